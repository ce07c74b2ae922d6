/*
 * ins_inflate.c - bounded DEFLATE decoder with zlib/gzip wrappers (design
 * in ins_inflate.h).
 *
 * Huffman tables (RFC 1951 §3.2.2): count[len] = number of codes of each
 * bit length, symbol[] = symbols ordered by code; decoding walks lengths
 * 1..15 keeping the first code of each length. Lengths are validated when a
 * table is built (over-subscribed sets are rejected; incomplete ones only
 * for single-code distance trees, as zlib allows).
 */
#include "ins_inflate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAXBITS 15
#define MAXLCODES 286
#define MAXDCODES 30
#define FIXLCODES 288

typedef struct state {
    const uint8_t *in;
    size_t in_len, in_pos;
    uint32_t bitbuf;
    int bitcnt;
    uint8_t *out;
    size_t out_len, out_cap;
    const char *why;
} state;

typedef struct huffman {
    short count[MAXBITS + 1];
    short symbol[FIXLCODES];
} huffman;

/* -1 on input exhausted. */
static int bits(state *s, int need, uint32_t *val)
{
    uint32_t v = s->bitbuf;
    while (s->bitcnt < need) {
        if (s->in_pos >= s->in_len) {
            s->why = "compressed data ends early";
            return -1;
        }
        v |= (uint32_t)s->in[s->in_pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
    s->bitbuf = v >> need;
    s->bitcnt -= need;
    *val = v & ((1u << need) - 1);
    return 0;
}

static int out_reserve(state *s, size_t more)
{
    if (more > INS_INFLATE_MAX_BYTES - s->out_len) {
        s->why = "decompressed size over the inspector's bound";
        return -EFBIG;
    }
    if (s->out_len + more <= s->out_cap)
        return 0;
    size_t cap = s->out_cap ? s->out_cap : 65536;
    while (cap < s->out_len + more)
        cap *= 2;
    if (cap > INS_INFLATE_MAX_BYTES)
        cap = INS_INFLATE_MAX_BYTES;
    uint8_t *n = realloc(s->out, cap);
    if (n == NULL)
        return -ENOMEM;
    s->out = n;
    s->out_cap = cap;
    return 0;
}

static int stored(state *s)
{
    s->bitbuf = 0; /* drop to a byte boundary */
    s->bitcnt = 0;
    if (s->in_len - s->in_pos < 4) {
        s->why = "stored block header cut short";
        return -EBADMSG;
    }
    const uint8_t *h = s->in + s->in_pos;
    unsigned len = h[0] | (unsigned)h[1] << 8;
    unsigned nlen = h[2] | (unsigned)h[3] << 8;
    s->in_pos += 4;
    if (len != (~nlen & 0xffffu)) {
        s->why = "stored block length check failed";
        return -EBADMSG;
    }
    if (s->in_len - s->in_pos < len) {
        s->why = "stored block cut short";
        return -EBADMSG;
    }
    if (len == 0)
        return 0; /* nothing to copy (and s->out may still be NULL) */
    int rc = out_reserve(s, len);
    if (rc)
        return rc;
    memcpy(s->out + s->out_len, s->in + s->in_pos, len);
    s->out_len += len;
    s->in_pos += len;
    return 0;
}

/* Symbol, or -1 (input ended / no such code). */
static int decode(state *s, const huffman *h)
{
    int code = 0, first = 0, index = 0;
    for (int len = 1; len <= MAXBITS; len++) {
        uint32_t b;
        if (bits(s, 1, &b) != 0)
            return -1;
        code |= (int)b;
        int count = h->count[len];
        if (code - count < first)
            return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    s->why = "invalid Huffman code";
    return -1;
}

/* 0 complete, >0 incomplete, <0 over-subscribed. */
static int construct(huffman *h, const short *length, int n)
{
    short offs[MAXBITS + 1];
    for (int len = 0; len <= MAXBITS; len++)
        h->count[len] = 0;
    for (int sym = 0; sym < n; sym++)
        h->count[length[sym]]++;
    if (h->count[0] == n)
        return 0;
    int left = 1;
    for (int len = 1; len <= MAXBITS; len++) {
        left <<= 1;
        left -= h->count[len];
        if (left < 0)
            return left;
    }
    offs[1] = 0;
    for (int len = 1; len < MAXBITS; len++)
        offs[len + 1] = (short)(offs[len] + h->count[len]);
    for (int sym = 0; sym < n; sym++)
        if (length[sym] != 0)
            h->symbol[offs[length[sym]]++] = (short)sym;
    return left;
}

static const short LBASE[29] = {
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
    35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short LEXT[29] = {
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
    3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short DBASE[30] = {
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
    257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
    8193, 12289, 16385, 24577};
static const short DEXT[30] = {
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6,
    7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static int codes(state *s, const huffman *lencode, const huffman *distcode)
{
    for (;;) {
        int sym = decode(s, lencode);
        if (sym < 0)
            return -EBADMSG;
        if (sym < 256) {
            int rc = out_reserve(s, 1);
            if (rc)
                return rc;
            s->out[s->out_len++] = (uint8_t)sym;
        } else if (sym == 256) {
            return 0;
        } else {
            sym -= 257;
            if (sym >= 29) {
                s->why = "invalid length symbol";
                return -EBADMSG;
            }
            uint32_t extra;
            if (bits(s, LEXT[sym], &extra) != 0)
                return -EBADMSG;
            size_t len = (size_t)LBASE[sym] + extra;
            int dsym = decode(s, distcode);
            if (dsym < 0)
                return -EBADMSG;
            if (dsym >= 30) {
                s->why = "invalid distance symbol";
                return -EBADMSG;
            }
            if (bits(s, DEXT[dsym], &extra) != 0)
                return -EBADMSG;
            size_t dist = (size_t)DBASE[dsym] + extra;
            if (dist > s->out_len) {
                s->why = "distance before the start of the output";
                return -EBADMSG;
            }
            int rc = out_reserve(s, len);
            if (rc)
                return rc;
            /* Byte by byte: source and destination may overlap. */
            for (size_t i = 0; i < len; i++, s->out_len++)
                s->out[s->out_len] = s->out[s->out_len - dist];
        }
    }
}

/* Fixed codes (RFC 1951 §3.2.6), built per block: cheap, and no global
 * state. */
static int fixed(state *s)
{
    huffman lencode, distcode;
    short lengths[FIXLCODES];
    int sym = 0;
    for (; sym < 144; sym++) lengths[sym] = 8;
    for (; sym < 256; sym++) lengths[sym] = 9;
    for (; sym < 280; sym++) lengths[sym] = 7;
    for (; sym < FIXLCODES; sym++) lengths[sym] = 8;
    construct(&lencode, lengths, FIXLCODES);
    for (sym = 0; sym < MAXDCODES; sym++) lengths[sym] = 5;
    construct(&distcode, lengths, MAXDCODES);
    return codes(s, &lencode, &distcode);
}

static int dynamic(state *s)
{
    static const short ORDER[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11,
                                    4, 12, 3, 13, 2, 14, 1, 15};
    short lengths[MAXLCODES + MAXDCODES];
    huffman lencode, distcode;
    uint32_t v;
    if (bits(s, 5, &v) != 0)
        return -EBADMSG;
    int nlen = (int)v + 257;
    if (bits(s, 5, &v) != 0)
        return -EBADMSG;
    int ndist = (int)v + 1;
    if (bits(s, 4, &v) != 0)
        return -EBADMSG;
    int ncode = (int)v + 4;
    if (nlen > MAXLCODES || ndist > MAXDCODES) {
        s->why = "bad code counts";
        return -EBADMSG;
    }
    int idx;
    for (idx = 0; idx < ncode; idx++) {
        if (bits(s, 3, &v) != 0)
            return -EBADMSG;
        lengths[ORDER[idx]] = (short)v;
    }
    for (; idx < 19; idx++)
        lengths[ORDER[idx]] = 0;
    if (construct(&lencode, lengths, 19) != 0) {
        s->why = "incomplete code-length code";
        return -EBADMSG;
    }
    idx = 0;
    while (idx < nlen + ndist) {
        int sym = decode(s, &lencode);
        if (sym < 0)
            return -EBADMSG;
        if (sym < 16) {
            lengths[idx++] = (short)sym;
            continue;
        }
        short len = 0;
        int rep;
        if (sym == 16) {
            if (idx == 0) {
                s->why = "repeat with no previous length";
                return -EBADMSG;
            }
            len = lengths[idx - 1];
            if (bits(s, 2, &v) != 0)
                return -EBADMSG;
            rep = 3 + (int)v;
        } else if (sym == 17) {
            if (bits(s, 3, &v) != 0)
                return -EBADMSG;
            rep = 3 + (int)v;
        } else {
            if (bits(s, 7, &v) != 0)
                return -EBADMSG;
            rep = 11 + (int)v;
        }
        if (idx + rep > nlen + ndist) {
            s->why = "too many lengths";
            return -EBADMSG;
        }
        while (rep--)
            lengths[idx++] = len;
    }
    if (lengths[256] == 0) {
        s->why = "no end-of-block code";
        return -EBADMSG;
    }
    int err = construct(&lencode, lengths, nlen);
    if (err < 0 || (err > 0 && nlen - lencode.count[0] != 1)) {
        s->why = "bad literal/length code";
        return -EBADMSG;
    }
    err = construct(&distcode, lengths + nlen, ndist);
    if (err < 0 || (err > 0 && ndist - distcode.count[0] != 1)) {
        s->why = "bad distance code";
        return -EBADMSG;
    }
    return codes(s, &lencode, &distcode);
}

static int raw_inflate(state *s)
{
    uint32_t last, type;
    do {
        if (bits(s, 1, &last) != 0 || bits(s, 2, &type) != 0)
            return -EBADMSG;
        int rc;
        if (type == 0)
            rc = stored(s);
        else if (type == 1)
            rc = fixed(s);
        else if (type == 2)
            rc = dynamic(s);
        else {
            s->why = "invalid block type";
            rc = -EBADMSG;
        }
        if (rc)
            return rc;
    } while (!last);
    s->bitbuf = 0; /* the trailer starts at the next byte */
    s->bitcnt = 0;
    return 0;
}

static uint32_t adler32(const uint8_t *d, size_t n)
{
    uint32_t a = 1, b = 0;
    while (n) {
        size_t k = n < 5552 ? n : 5552;
        n -= k;
        while (k--) {
            a += *d++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}

static uint32_t crc32_ieee(const uint8_t *d, size_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ d[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* gzip header (RFC 1952 §2.3): skip optional fields. */
static int gzip_header(state *s)
{
    const uint8_t *in = s->in;
    size_t n = s->in_len;
    if (n < 10 || in[2] != 8) {
        s->why = "bad gzip header";
        return -EBADMSG;
    }
    uint8_t flg = in[3];
    size_t p = 10;
    if (flg & 4) { /* FEXTRA */
        if (n - p < 2)
            goto bad;
        size_t xlen = in[p] | (size_t)in[p + 1] << 8;
        p += 2;
        if (n - p < xlen)
            goto bad;
        p += xlen;
    }
    for (int f = 8; f <= 16; f <<= 1) { /* FNAME, FCOMMENT */
        if (!(flg & f))
            continue;
        while (p < n && in[p] != 0)
            p++;
        if (p >= n)
            goto bad;
        p++;
    }
    if (flg & 2) /* FHCRC */
        p += 2;
    if (p > n)
        goto bad;
    s->in_pos = p;
    return 0;
bad:
    s->why = "gzip header cut short";
    return -EBADMSG;
}

int ins_inflate(const uint8_t *in, size_t in_len, uint8_t **out,
                size_t *out_len, const char **why)
{
    state s = {.in = in, .in_len = in_len};
    int rc = 0;
    int gzip = in_len >= 2 && in[0] == 0x1f && in[1] == 0x8b;
    *out = NULL;
    *out_len = 0;
    if (gzip) {
        rc = gzip_header(&s);
    } else if (in_len < 2 || (in[0] & 0x0f) != 8 || (in[0] >> 4) > 7 ||
               ((unsigned)in[0] << 8 | in[1]) % 31 != 0) {
        s.why = "not a zlib or gzip stream";
        rc = -EBADMSG;
    } else if (in[1] & 0x20) {
        s.why = "zlib preset dictionary not supported";
        rc = -EBADMSG;
    } else {
        s.in_pos = 2;
    }
    if (rc == 0)
        rc = raw_inflate(&s);
    if (rc == 0) {
        const uint8_t *t = in + s.in_pos;
        size_t left = in_len - s.in_pos;
        if (gzip) {
            if (left < 8 ||
                (t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                 (uint32_t)t[3] << 24) != crc32_ieee(s.out, s.out_len)) {
                s.why = "gzip CRC-32 mismatch";
                rc = -EBADMSG;
            }
        } else if (left < 4 ||
                   ((uint32_t)t[0] << 24 | (uint32_t)t[1] << 16 |
                    (uint32_t)t[2] << 8 | t[3]) !=
                       adler32(s.out, s.out_len)) {
            s.why = "zlib Adler-32 mismatch";
            rc = -EBADMSG;
        }
    }
    if (rc != 0) {
        free(s.out);
        if (why)
            *why = rc == -ENOMEM ? "out of memory"
                   : s.why ? s.why : "corrupt compressed data";
        return rc;
    }
    if (s.out == NULL) { /* empty output: still a buffer, as documented */
        s.out = malloc(1);
        if (s.out == NULL) {
            if (why)
                *why = "out of memory";
            return -ENOMEM;
        }
    }
    *out = s.out;
    *out_len = s.out_len;
    return 0;
}
