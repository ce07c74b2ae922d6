/*
 * ins_reader.h - buffered, offset-tracking byte source for the inspector.
 *
 * Design: one heap buffer (default 1 MiB) over a file descriptor (regular
 * file, pipe or socket). Callers ask for at least N contiguous bytes with
 * ins_reader_ensure(); the reader moves the unread tail to the front and
 * reads more. N may exceed the buffer, up to INS_READER_MAX_BYTES: the
 * buffer then grows once, so memory stays bounded by that constant whatever
 * the input size. Every byte has an absolute offset (ins_reader_offset())
 * used in error messages.
 *
 * Ownership: ins_reader_init() allocates the buffer; ins_reader_free() frees
 * it (the fd stays the caller's). Not thread-safe: one reader, one thread.
 * Errors: negative errno (-EIO on read failure, -ENOMEM, -EFBIG when a
 * request exceeds INS_READER_MAX_BYTES).
 */
#ifndef INS_READER_H
#define INS_READER_H

#include <stddef.h>
#include <stdint.h>

/* Largest contiguous window a caller may ask for (a submessage the
 * inspector decodes in one piece, e.g. TraceStats or TraceConfig). */
#define INS_READER_MAX_BYTES (64u * 1024u * 1024u)
#define INS_READER_DEFAULT_BYTES (1u * 1024u * 1024u)

typedef struct ins_reader {
    int fd;               /* borrowed */
    uint8_t *buf;         /* owned, cap bytes */
    size_t cap;           /* buffer size */
    size_t pos;           /* next unread byte in buf */
    size_t len;           /* valid bytes in buf */
    uint64_t base_offset; /* absolute offset of buf[0] */
    int eof;              /* read() returned 0 */
    int error;            /* 0 or negative errno of the failed read() */
} ins_reader;

/* Prepare R over FD with a CAP-byte buffer (0 = default). 0 or -ENOMEM. */
int ins_reader_init(ins_reader *r, int fd, size_t cap);
/* Prepare R over an in-memory stream: takes ownership of BUF (malloc()ed,
 * LEN bytes), which ins_reader_free() releases. No fd is read. */
void ins_reader_init_mem(ins_reader *r, uint8_t *buf, size_t len);
/* Free the buffer. The fd is not closed. NULL-safe. */
void ins_reader_free(ins_reader *r);

/* Make at least N unread bytes contiguous at ins_reader_ptr(). Returns the
 * number of unread bytes available (>= N, or fewer at end of input), or a
 * negative errno (-EIO, -ENOMEM, -EFBIG). */
long ins_reader_ensure(ins_reader *r, size_t n);

/* Unread bytes currently buffered. */
static inline size_t ins_reader_avail(const ins_reader *r)
{
    return r->len - r->pos;
}

/* Pointer to the next unread byte; valid until the next ensure/skip. */
static inline const uint8_t *ins_reader_ptr(const ins_reader *r)
{
    return r->buf + r->pos;
}

/* Consume N bytes that ensure() made available. */
static inline void ins_reader_consume(ins_reader *r, size_t n)
{
    r->pos += n;
}

/* Absolute offset of the next unread byte. */
static inline uint64_t ins_reader_offset(const ins_reader *r)
{
    return r->base_offset + r->pos;
}

/* Skip N bytes (any size: read through without storing). Returns 0, or
 * -ENODATA if the input ended first (everything up to the end consumed),
 * or a negative errno from read(). */
int ins_reader_skip(ins_reader *r, uint64_t n);

#endif /* INS_READER_H */
