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
 * So in a file of large records the bodies are never read: the walk
 * pread()s a window of SCAN_WINDOW bytes (4 KiB) at each record header,
 * and inside a packet larger than that at each top-level field header,
 * skipping the bodies between (scan_sparse): about one pread() per 64 KiB
 * record, the record's trailer fields and the next record's header. A
 * 256 MiB file of 64 KiB records, 2026-12-04 on the 2-core bench VM: 9.3-
 * 12.6 ms by its headers, against 61-65 ms mapped and walked as before
 * (page faults; 29-35 ms in an earlier run) and 17-18 ms read(). Small
 * records are read() into a cached buffer instead: every byte is needed
 * there. The headers of the first records decide (probe_record_size): a
 * mean of SCAN_SPARSE_RECORD_MIN bytes or more walks by headers. A file
 * that shrinks during the walk (another process truncates it) shows as a
 * short pread(): -EIO. Not a regular file, or small: the read() path
 * (cons_out_scan_fd_read), with the same answers.
 *
 * Following a file being written (cons_out_scan_follow, each period of
 * `shmtrace record` while the service writes): o->scanned is where the
 * whole records counted so far end; a call goes on from there to the
 * file's end of the moment, by headers or read as above, and leaves an
 * incomplete last record for the next call (a writer appends: nothing
 * before its end changes). So the final cons_out_scan_fd has only the
 * bytes since the last period left. (Following used to read() everything:
 * for 256 MB of 64 KiB records that copied the whole file out of the page
 * cache while the service was still writing it.)
 *
 * A service that counts what it writes (shmtraced: TraceStats.shmtrace_file
 * in GetTraceStats) spares the read altogether: cons_out_take_file_counts
 * takes its count when the session has ended with every write done and
 * the file has the size the service wrote. The service frames every record
 * itself and drops the packets its validator refuses, so its count is the
 * scan's answer (malformed 0). Anything else (Perfetto's traced, a file
 * that changed since, a failed write) is scanned.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "consumer_client.h"
#include "consumer_int.h"

#define SCAN_SPARSE_MIN (1u << 20)         /* smaller files: read() */
#define SCAN_SPARSE_RECORD_MIN (8u << 10)  /* smaller records: read() */
#define SCAN_WINDOW    4096u               /* bytes per pread() */
#define SCAN_READ_BUF  (1u << 20)

void (*cons__scan_sparse_hook)(int fd);
size_t cons__scan_window = SCAN_WINDOW;

/* Reads a varint at *p (< end); false if truncated or longer than 10.
 * Tags and most lengths take one or two bytes: those first, without the
 * loop (a 94 MB trace of 1 M records of 64-byte payloads, five fields
 * each: 14.4 -> 12.0 ms of CPU, 2026-12-06). */
static inline bool get_varint(const uint8_t **p, const uint8_t *end,
                              uint64_t *v)
{
    const uint8_t *q = *p;
    if (end - q >= 2) {
        if (q[0] < 0x80) {
            *v = q[0];
            *p = q + 1;
            return true;
        }
        if (q[1] < 0x80) {
            *v = (uint64_t)(q[0] & 0x7f) | (uint64_t)q[1] << 7;
            *p = q + 2;
            return true;
        }
    }
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

/* One top-level field header at *p (before e), *p moved past it: its
 * field number, wire type (returned; -1 if malformed: a bad wire type, or
 * a varint cut by e or overlong) and the bytes of body that follow (*body:
 * 8, 4, the length, or 0 for a varint, whose value is read into *v for
 * field 42 and skipped otherwise). The callers check *body against what is
 * left of the packet. */
static inline int field_head(const uint8_t **p, const uint8_t *e,
                             uint32_t *field, uint64_t *body, uint64_t *v)
{
    uint64_t tag;
    if (!get_varint(p, e, &tag))
        return -1;
    *field = (uint32_t)(tag >> 3);
    *body = 0;
    switch (tag & 7) {
    case 0:
        if (*field == 42)
            return get_varint(p, e, v) ? 0 : -1;
        return skip_varint(p, e) ? 0 : -1;
    case 1:
        *body = 8;
        return 1;
    case 5:
        *body = 4;
        return 5;
    case 2:
        return get_varint(p, e, body) ? 2 : -1;
    default:
        return -1;
    }
}

/* A TraceStats body (field 35): kept if it parses, the last one wins. */
static void keep_stats(cons_out *o, const uint8_t *p, size_t len)
{
    Perfetto__Protos__TraceStats *st =
        perfetto__protos__trace_stats__unpack(NULL, len, p);
    if (st) {
        perfetto__protos__trace_stats__free_unpacked(o->last_stats, NULL);
        o->last_stats = st;
    }
}

/* Top-level scan: previous_packet_dropped (42) and trace_stats (35). */
static inline void scan_packet(cons_out *o, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    bool flagged = false;
    while (p < end) {
        uint32_t field;
        uint64_t body, v;
        int wt = field_head(&p, end, &field, &body, &v);
        if (wt < 0 || body > (uint64_t)(end - p)) {
            o->malformed++;
            return;
        }
        if (wt == 0 && field == 42)
            flagged = v != 0; /* last one wins */
        else if (wt == 2 && field == 35)
            keep_stats(o, p, (size_t)body);
        p += body;
    }
    if (flagged)
        o->flagged_packets++;
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

/* The bytes of the file around a position, read with pread(): what the
 * walk of a file of large records looks at (record headers, top-level
 * field headers, TraceStats bodies) without reading the bodies it skips. */
typedef struct {
    int fd;
    uint8_t *buf;
    size_t window;             /* bytes per pread(), at least */
    size_t cap, len;           /* buf holds the file's [at, at + len) */
    uint64_t at;
    uint64_t end;              /* the file's end when the walk began */
    int err;                   /* -EIO: it shrank; -errno: pread failed */
} scan_win;

/* A window of `window` bytes over fd's first `end` bytes; -ENOMEM. */
static int win_init(scan_win *w, int fd, uint64_t end, size_t window)
{
    memset(w, 0, sizeof(*w));
    w->fd = fd;
    w->window = w->cap = window;
    w->end = end;
    w->buf = malloc(window);
    return w->buf ? 0 : -ENOMEM;
}

/* Pointer to the file's bytes from pos: at least min(need, end - pos) of
 * them, *avail in all (up to the window's end, never past end); NULL with
 * w->err set if they cannot be had. Refills the window from pos when they
 * are not all in it: w->window bytes, or need if more (a TraceStats body;
 * the buffer grows for it, later reads are w->window again, so that one
 * huge body cannot make every later read huge). */
static const uint8_t *win_get(scan_win *w, uint64_t pos, size_t need,
                              size_t *avail)
{
    if (need > w->end - pos)
        need = (size_t)(w->end - pos);
    if (pos < w->at || pos + need > w->at + w->len) {
        if (need > w->cap) {
            uint8_t *nb = realloc(w->buf, need);
            if (!nb) {
                w->err = -ENOMEM;
                return NULL;
            }
            w->buf = nb;
            w->cap = need;
        }
        size_t want = need > w->window ? need : w->window;
        if (want > w->end - pos)
            want = (size_t)(w->end - pos);
        size_t got = 0;
        while (got < want) {
            ssize_t n = pread(w->fd, w->buf + got, want - got,
                              (off_t)(pos + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                w->err = -errno;
                return NULL;
            }
            if (n == 0)
                break;
            got += (size_t)n;
        }
        w->at = pos;
        w->len = got;
        if (got < need) {
            w->err = -EIO;           /* shrank under the walk */
            return NULL;
        }
    }
    *avail = (size_t)(w->at + w->len - pos);
    return w->buf + (pos - w->at);
}

/* scan_packet for a packet of the file at [pos, pos + len), larger than
 * a window: the same answers, from its field headers only (and the
 * bodies of TraceStats). false if the file could not be read (w->err). */
static bool scan_packet_sparse(cons_out *o, scan_win *w, uint64_t pos,
                               uint64_t len)
{
    const uint64_t end = pos + len;
    bool flagged = false;
    while (pos < end) {
        size_t avail;
        /* a tag and a varint after it: 20 bytes at most */
        const uint8_t *h = win_get(w, pos, 20, &avail);
        if (!h)
            return false;
        if (avail > end - pos)
            avail = (size_t)(end - pos);
        const uint8_t *p = h;
        uint32_t field;
        uint64_t body, v;
        int wt = field_head(&p, h + avail, &field, &body, &v);
        if (wt >= 0)
            pos += (uint64_t)(p - h);
        if (wt < 0 || body > end - pos) {
            o->malformed++;
            return true;
        }
        if (wt == 0 && field == 42) {
            flagged = v != 0; /* last one wins */
        } else if (wt == 2 && field == 35) {
            const uint8_t *b = win_get(w, pos, (size_t)body, &avail);
            if (!b)
                return false;
            keep_stats(o, b, (size_t)body);
        }
        pos += body;
    }
    if (flagged)
        o->flagged_packets++;
    return true;
}

/* The walk of a file of large records, from o->scanned to its end of the
 * moment: each record's header is read, then its packet, whole if the
 * window holds it, else by its field headers (scan_packet_sparse). final:
 * an incomplete last record is -EBADMSG; otherwise it waits for the next
 * call, as in scan_records. */
static int scan_sparse(cons_out *o, scan_win *w, bool final)
{
    uint64_t pos = o->scanned;
    while (pos < w->end) {
        size_t avail;
        const uint8_t *h = win_get(w, pos, 11, &avail);
        if (!h)
            return w->err;
        const uint8_t *p = h + 1, *e = h + avail;
        uint64_t plen;
        if (h[0] != 0x0a)
            return -EBADMSG;
        if (!get_varint(&p, e, &plen))
            /* truncated or overlong varint, or more bytes to come */
            return final || avail >= 11 ? -EBADMSG : 0;
        if (plen > CONS_MAX_PACKET_BYTES)
            return -EBADMSG;
        uint64_t body = pos + (uint64_t)(p - h);
        if (plen > w->end - body)
            return final ? -EBADMSG : 0;    /* truncated record */
        if (plen <= w->window) {
            const uint8_t *pk = win_get(w, body, (size_t)plen, &avail);
            if (!pk)
                return w->err;
            scan_packet(o, pk, (size_t)plen);
        } else if (!scan_packet_sparse(o, w, body, plen)) {
            return w->err;
        }
        o->packets++;
        o->bytes += (body - pos) + plen;
        pos = body + plen;
        o->scanned = pos;
    }
    return 0;
}

/* Mean record size of the first records (at most 256 of them, or the
 * first 4 MiB): whether the walk should skip their bodies (above). 0 if
 * the file does not start with a well-formed record. */
static size_t probe_record_size(scan_win *w, uint64_t from)
{
    uint64_t pos = from;
    size_t k = 0;
    while (k < 256 && pos < w->end && pos - from < (4u << 20)) {
        size_t avail;
        const uint8_t *h = win_get(w, pos, 11, &avail);
        const uint8_t *p = h ? h + 1 : NULL;
        uint64_t plen;
        if (!h || h[0] != 0x0a || !get_varint(&p, h + avail, &plen) ||
            plen > w->end - (pos + (uint64_t)(p - h)))
            break;
        pos += (uint64_t)(p - h) + plen;
        k++;
    }
    w->err = 0;
    return k ? (size_t)((pos - from) / k) : 0;
}

/* From o->scanned to the file's end of the moment: a file of mostly large
 * records by its headers (scan_sparse), else read() whole (scan_read).
 * final: the file is finished (an incomplete last record is -EBADMSG);
 * otherwise that record is left for the next call. */
static int scan_file(cons_out *o, int fd, bool final)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return scan_read(o, fd, final);
    if ((uint64_t)st.st_size < o->scanned)
        return -EIO;                 /* shrank under what was counted */
    if ((uint64_t)st.st_size - o->scanned < SCAN_SPARSE_MIN)
        return scan_read(o, fd, final);
    scan_win w;
    if (win_init(&w, fd, (uint64_t)st.st_size, cons__scan_window) < 0)
        return scan_read(o, fd, final);
    int rc;
    /* Small records: every byte is read anyway, and one read() of many
     * records beats a pread() per record. */
    if (probe_record_size(&w, o->scanned) < SCAN_SPARSE_RECORD_MIN) {
        rc = scan_read(o, fd, final);
    } else {
        scan_start(o);
        if (cons__scan_sparse_hook)
            cons__scan_sparse_hook(fd);
        rc = scan_sparse(o, &w, final);
    }
    free(w.buf);
    return rc;
}

int cons__scan_fd_sparse(cons_out *o, int fd, size_t window)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size < o->scanned)
        return -EIO;
    scan_win w;
    if (win_init(&w, fd, (uint64_t)st.st_size,
                 window ? window : SCAN_WINDOW) < 0)
        return -ENOMEM;
    scan_start(o);
    int rc = scan_sparse(o, &w, true);
    free(w.buf);
    return rc;
}

int cons_out_scan_fd(cons_out *o, int fd)
{
    return scan_file(o, fd, true);
}

int cons_out_scan_follow(cons_out *o, int fd)
{
    return scan_file(o, fd, false);
}

bool cons_out_take_file_counts(cons_out *o,
                               const Perfetto__Protos__TraceStats *st,
                               uint64_t file_size)
{
    const Perfetto__Protos__TraceStats__ShmtraceFileStats *f =
        st ? st->shmtrace_file : NULL;
    if (!f || !f->complete || f->bytes != file_size ||
        f->packets > f->bytes / 2 || f->flagged_packets > f->packets)
        return false;      /* a record takes 2 bytes at least */
    o->packets = f->packets;
    o->bytes = f->bytes;
    o->flagged_packets = f->flagged_packets;
    o->malformed = 0;
    o->scanned = f->bytes;
    return true;
}
