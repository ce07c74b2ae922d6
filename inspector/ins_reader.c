/*
 * ins_reader.c - buffered byte source (see ins_reader.h for the design).
 *
 * Invariant: 0 <= pos <= len <= cap; buf[pos..len) are the next unread bytes
 * and buf[0] is at absolute offset base_offset.
 */
#include "ins_reader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ins_reader_init(ins_reader *r, int fd, size_t cap)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->cap = cap ? cap : INS_READER_DEFAULT_BYTES;
    r->buf = malloc(r->cap);
    return r->buf ? 0 : -ENOMEM;
}

void ins_reader_init_mem(ins_reader *r, uint8_t *buf, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    r->buf = buf;
    r->cap = len;
    r->len = len;
    r->eof = 1;
}

void ins_reader_free(ins_reader *r)
{
    if (r == NULL)
        return;
    free(r->buf);
    r->buf = NULL;
}

/* One read() into the free space at the end; 0 at EOF, >0 bytes, <0 err. */
static long reader_read_once(ins_reader *r)
{
    for (;;) {
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n > 0) {
            r->len += (size_t)n;
            return (long)n;
        }
        if (n == 0) {
            r->eof = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        r->error = -errno;
        return r->error;
    }
}

long ins_reader_ensure(ins_reader *r, size_t n)
{
    if (ins_reader_avail(r) >= n)
        return (long)ins_reader_avail(r);
    if (n > INS_READER_MAX_BYTES)
        return -EFBIG;
    if (n > r->cap) {
        /* Grow once to the requested window (bounded by the constant). */
        size_t cap = r->cap ? r->cap : 64;
        while (cap < n)
            cap *= 2;
        if (cap > INS_READER_MAX_BYTES)
            cap = INS_READER_MAX_BYTES;
        uint8_t *nb = malloc(cap);
        if (nb == NULL)
            return -ENOMEM;
        if (ins_reader_avail(r) > 0)
            memcpy(nb, r->buf + r->pos, ins_reader_avail(r));
        free(r->buf);
        r->buf = nb;
        r->cap = cap;
        r->len -= r->pos;
        r->base_offset += r->pos;
        r->pos = 0;
    } else if (r->cap - r->pos < n) {
        /* Slide the unread tail to the front to make room. */
        size_t avail = ins_reader_avail(r);
        memmove(r->buf, r->buf + r->pos, avail);
        r->base_offset += r->pos;
        r->pos = 0;
        r->len = avail;
    }
    while (ins_reader_avail(r) < n && !r->eof) {
        long got = reader_read_once(r);
        if (got < 0)
            return got;
    }
    return (long)ins_reader_avail(r);
}

int ins_reader_skip(ins_reader *r, uint64_t n)
{
    for (;;) {
        size_t avail = ins_reader_avail(r);
        if (n <= avail) {
            r->pos += (size_t)n;
            return 0;
        }
        n -= avail;
        r->base_offset += r->len;
        r->pos = r->len = 0;
        if (r->eof)
            return -ENODATA;
        long got = reader_read_once(r);
        if (got < 0)
            return (int)got;
    }
}
