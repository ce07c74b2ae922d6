/*
 * svc_log.c - svc_log_str(): a peer's string made safe for one line of
 * shmtraced's log (escaped, cut to the length the service keeps). See
 * svc_log.h for the rules and why.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "svc_log.h"

/* The escaped form of byte c in esc[5]; returns its length (1 to 4). */
static size_t escape_byte(unsigned char c, char esc[5])
{
    switch (c) {
    case '"':  memcpy(esc, "\\\"", 3); return 2;
    case '\\': memcpy(esc, "\\\\", 3); return 2;
    case '\n': memcpy(esc, "\\n", 3); return 2;
    case '\r': memcpy(esc, "\\r", 3); return 2;
    case '\t': memcpy(esc, "\\t", 3); return 2;
    default:
        break;
    }
    if (c >= 0x20 && c < 0x7f) {
        esc[0] = (char)c;
        esc[1] = '\0';
        return 1;
    }
    snprintf(esc, 5, "\\x%02x", c);
    return 4;
}

const char *svc_log_str(char *out, size_t outsz, const char *in,
                        size_t max_in)
{
    static const char cut_mark[] = "...";
    const size_t mark_len = sizeof cut_mark - 1;
    if (!out || outsz == 0)
        return "";
    out[0] = '\0';
    if (!in)
        return out;
    size_t len = strnlen(in, max_in);
    bool cut = in[len] != '\0';     /* longer than max_in */
    char esc[5];
    size_t whole = 0;
    for (size_t i = 0; i < len; i++)
        whole += escape_byte((unsigned char)in[i], esc);
    if (whole + 1 > outsz)
        cut = true;                 /* out is too small */
    /* What the escapes may take: out less the NUL and, if cut, the mark;
     * an escape that would pass it is left out whole. */
    size_t room = outsz - 1;
    if (cut)
        room = room > mark_len ? room - mark_len : 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        size_t n = escape_byte((unsigned char)in[i], esc);
        if (o + n > room)
            break;
        memcpy(out + o, esc, n);
        o += n;
    }
    if (cut && o + mark_len < outsz) {
        memcpy(out + o, cut_mark, mark_len);
        o += mark_len;
    }
    out[o] = '\0';
    return out;
}
