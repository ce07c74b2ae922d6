/*
 * cons_scan.c - counting the packets of a finished trace file
 * (cons_out_scan_fd, consumer_client.h): what `shmtrace record` reports
 * when the service wrote the file itself (write_into_file).
 *
 * A trace file is a run of Trace.packet records (0x0A, varint length,
 * packet); each packet's top-level fields are scanned for
 * previous_packet_dropped and TraceStats (scan_packet). The scan touches
 * only the record headers and top-level field headers: the bodies of
 * large fields are skipped, and so is every varint value but field 42's
 * (one 8-byte load, skip_varint).
 *
 * So a file of large records is mapped (read-only, private) rather than
 * read: read() copies every byte out of the page cache (256 MiB of 64 KiB
 * records: ~27 ms of a `shmtrace record` stop here), a mapping costs only
 * the page faults of the pages touched (~9 ms). Small records touch every
 * page, and there read() into a cached buffer wins (1 KiB records: 32
 * against 40 ms). The headers of the first records decide
 * (probe_record_size): a mean of SCAN_MAP_RECORD_MIN bytes or more maps.
 * The walk goes in windows of SCAN_WINDOW bytes and unmaps what it has
 * passed, so that a huge file never holds more than a window's page
 * tables. A file that shrinks while mapped (another process truncates it)
 * raises SIGBUS at the next access past its new end: during the walk a
 * SIGBUS handler jumps back out and the scan fails with -EIO, never a
 * crash. Not a regular file, small, or not mappable: the read() path
 * (cons_out_scan_fd_read), with the same answers.
 *
 * Following a file being written (cons_out_scan_follow, each period of
 * `shmtrace record` while the service writes): o->scanned is where the
 * whole records counted so far end; a call goes on from there to the
 * file's end of the moment, mapped or read as above, and leaves an
 * incomplete last record for the next call (a writer appends: nothing
 * before its end changes). So the final cons_out_scan_fd has only the
 * bytes since the last period left. (Following used to read() everything:
 * for 256 MB of 64 KiB records that copied the whole file out of the page
 * cache while the service was still writing it.)
 *
 * Threads: the SIGBUS handler is the process's for the scan's duration
 * (the CLI tools are single-threaded); the jump target is thread-local.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "consumer_client.h"
#include "consumer_int.h"

#define SCAN_MAP_MIN   (1u << 20)          /* smaller files: read() */
#define SCAN_MAP_RECORD_MIN (8u << 10)     /* smaller records: read() */
#define SCAN_WINDOW    (64u << 20)
#define SCAN_READ_BUF  (1u << 20)

void (*cons__scan_mapped_hook)(int fd);
size_t cons__scan_window = SCAN_WINDOW;

/* Reads a varint at *p (< end); false if truncated or longer than 10. */
static inline bool get_varint(const uint8_t **p, const uint8_t *end,
                              uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Skips a varint, the same answer as get_varint: with 8 bytes left, its
 * length comes from one load (the first byte without the top bit), not a
 * loop turn per byte (a nanosecond timestamp is 9 bytes). */
static inline bool skip_varint(const uint8_t **p, const uint8_t *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end - *p >= 8) {
        uint64_t x;
        memcpy(&x, *p, 8);
        uint64_t stops = ~x & 0x8080808080808080ull;
        if (stops) {
            *p += (__builtin_ctzll(stops) >> 3) + 1;
            return true;
        }
    }
#endif
    uint64_t v;
    return get_varint(p, end, &v);
}

/* Top-level scan: previous_packet_dropped (42) and trace_stats (35). */
static inline void scan_packet(cons_out *o, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    bool flagged = false;
    while (p < end) {
        uint64_t tag, v;
        if (!get_varint(&p, end, &tag))
            goto bad;
        uint32_t field = (uint32_t)(tag >> 3);
        switch (tag & 7) {
        case 0:
            if (field != 42) {
                if (!skip_varint(&p, end))
                    goto bad;
                break;
            }
            if (!get_varint(&p, end, &v))
                goto bad;
            flagged = v != 0; /* last one wins */
            break;
        case 1:
            if (end - p < 8)
                goto bad;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                goto bad;
            p += 4;
            break;
        case 2:
            if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p))
                goto bad;
            if (field == 35) {
                Perfetto__Protos__TraceStats *st =
                    perfetto__protos__trace_stats__unpack(NULL, (size_t)v, p);
                if (st) {
                    perfetto__protos__trace_stats__free_unpacked(
                        o->last_stats, NULL);
                    o->last_stats = st;
                }
            }
            p += v;
            break;
        default:
            goto bad;
        }
    }
    if (flagged)
        o->flagged_packets++;
    return;
bad:
    o->malformed++;
}

void cons__scan_packet(cons_out *o, const uint8_t *p, size_t len)
{
    scan_packet(o, p, len);
}

/* The whole records at the start of [buf, buf + len): counted into o;
 * returns the bytes they take. *rc = -EBADMSG at a broken record (one that
 * cannot be a prefix of a good one, or any incomplete one when eof: no
 * more bytes follow); otherwise an incomplete last record is left for the
 * caller to extend. */
static size_t scan_records(cons_out *o, const uint8_t *buf, size_t len,
                           bool eof, int *rc)
{
    size_t off = 0;
    *rc = 0;
    while (off < len) {
        const uint8_t *p = buf + off, *end = buf + len;
        uint64_t plen = 0;
        if (*p != 0x0a) {
            *rc = -EBADMSG;
            break;
        }
        p++;
        ptrdiff_t avail = end - p;
        if (!get_varint(&p, end, &plen)) {
            if (eof || avail >= 10)
                *rc = -EBADMSG;  /* truncated or overlong varint */
            break;               /* else: need more bytes */
        }
        if (plen > CONS_MAX_PACKET_BYTES) {
            *rc = -EBADMSG;
            break;
        }
        if (plen > (uint64_t)(end - p)) {
            if (eof)
                *rc = -EBADMSG;  /* truncated record */
            break;
        }
        scan_packet(o, p, (size_t)plen);
        o->packets++;
        o->bytes += (size_t)(p - (buf + off)) + plen;
        off = (size_t)(p - buf) + plen;
    }
    return off;
}

/* Counts from o->scanned (0: reset the counts first). */
static void scan_start(cons_out *o)
{
    if (o->scanned == 0)
        o->packets = o->bytes = o->flagged_packets = o->malformed = 0;
}

/* The read() walk from o->scanned to the end of the file as it is now;
 * o->scanned moves past the last whole record. final: an incomplete
 * record at the end is -EBADMSG; otherwise it waits for the next call. */
static int scan_read(cons_out *o, int fd, bool final)
{
    scan_start(o);
    size_t cap = SCAN_READ_BUF, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    off_t pos = (off_t)o->scanned;
    int rc = 0;
    bool eof = false;
    for (;;) {
        /* Refill behind whatever is left of a partial record. */
        if (!eof && len < cap) {
            ssize_t n = pread(fd, buf + len, cap - len, pos);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                rc = -errno;
                break;
            }
            if (n == 0)
                eof = true;
            pos += n;
            len += (size_t)n;
        }
        size_t off = scan_records(o, buf, len, eof && final, &rc);
        o->scanned += off;
        memmove(buf, buf + off, len - off);
        len -= off;
        if (rc < 0 || (eof && (len == 0 || !final)))
            break;
        if (len == cap) { /* one record larger than the buffer */
            size_t ncap = cap * 2;
            uint8_t *nb = ncap <= 2 * (size_t)CONS_MAX_PACKET_BYTES
                              ? realloc(buf, ncap) : NULL;
            if (!nb) {
                rc = -EBADMSG;
                break;
            }
            buf = nb;
            cap = ncap;
        }
    }
    free(buf);
    return rc;
}

int cons_out_scan_fd_read(cons_out *o, int fd)
{
    return scan_read(o, fd, true);
}

/* Mean record size of the first records (at most 256 of them, or the
 * first 4 MiB): the walk of the mapping only reads their headers. 0 if the
 * file does not start with a well-formed record. */
static size_t probe_record_size(const uint8_t *m, size_t n)
{
    size_t off = 0, k = 0;
    while (k < 256 && off < n && off < (4u << 20)) {
        const uint8_t *p = m + off + 1, *end = m + n;
        uint64_t plen;
        if (m[off] != 0x0a || !get_varint(&p, end, &plen) ||
            plen > (uint64_t)(end - p))
            break;
        off = (size_t)(p - m) + (size_t)plen;
        k++;
    }
    return k ? off / k : 0;
}

static _Thread_local sigjmp_buf *scan_jump;

static void on_sigbus(int sig)
{
    (void)sig;
    siglongjmp(*scan_jump, 1);
}

/* From o->scanned to the file's end of the moment, mapped when that is
 * large records (above), else read(). final: the file is finished (an
 * incomplete last record is -EBADMSG); otherwise that record is left for
 * the next call. */
static int scan_file(cons_out *o, int fd, bool final)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return scan_read(o, fd, final);
    if ((uint64_t)st.st_size < o->scanned)
        return -EIO;                 /* shrank under what was counted */
    if ((uint64_t)st.st_size - o->scanned < SCAN_MAP_MIN ||
        (uint64_t)st.st_size > SIZE_MAX / 2)
        return scan_read(o, fd, final);
    size_t n = (size_t)st.st_size;
    uint8_t *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return scan_read(o, fd, final);
    scan_start(o);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old);
    sigjmp_buf jb;
    scan_jump = &jb;
    /* Changed between sigsetjmp and a jump back, used after it. */
    volatile size_t off = (size_t)o->scanned, unmapped = 0;
    volatile int rc = 0;
    volatile bool mapped_walk = true;
    if (sigsetjmp(jb, 1) == 0) {
        if (cons__scan_mapped_hook)
            cons__scan_mapped_hook(fd);
        /* Small records: every page is touched anyway, and faulting them
         * in costs more than read()'s copy into a cached buffer (1 KiB
         * records: 40 against 32 ms for 256 MiB here). */
        if (probe_record_size(m + off, n - off) < SCAN_MAP_RECORD_MIN)
            mapped_walk = false;
        const size_t window = cons__scan_window;
        size_t wlen = window;
        while (mapped_walk && off < n) {
            if (wlen > n - off)
                wlen = n - off;
            int r;
            size_t c = scan_records(o, m + off, wlen,
                                    final && off + wlen == n, &r);
            if (r < 0) {
                rc = r;
                break;
            }
            if (c == 0) {
                if (off + wlen == n)
                    break;           /* following: the last one is cut */
                wlen = n - off;      /* a record longer than the window */
                continue;
            }
            off += c;
            o->scanned = off;
            wlen = window;
            size_t below = off / page * page;
            if (below - unmapped >= window) {
                munmap(m + unmapped, below - unmapped);
                unmapped = below;
            }
        }
    } else {
        rc = -EIO;                   /* the file shrank while we read it */
    }
    sigaction(SIGBUS, &old, NULL);
    scan_jump = NULL;
    munmap(m + unmapped, n - unmapped);
    return mapped_walk ? rc : scan_read(o, fd, final);
}

int cons_out_scan_fd(cons_out *o, int fd)
{
    return scan_file(o, fd, true);
}

int cons_out_scan_follow(cons_out *o, int fd)
{
    return scan_file(o, fd, false);
}
