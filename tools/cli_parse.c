/*
 * cli_parse.c - value parsers of the command-line tools (cli_*): sizes,
 * durations, unsigned numbers, and reading a (bounded) config file. Pure
 * functions, unit-tested in tests/check_cli.c.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_parse.h"

/* The leading unsigned number of S in BASE, END after it. No sign, no
 * empty number, no overflow. 0 or -EINVAL. */
static int leading_unsigned(const char *s, int base, unsigned long long *v,
                            char **end)
{
    errno = 0;
    if (s[0] == '-')
        return -EINVAL;
    *v = strtoull(s, end, base);
    if (errno || *end == s)
        return -EINVAL;
    return 0;
}

/* NUMBER[k|kb|m|mb|g|gb] -> KiB (plain number = KiB); rounded up to 4. */
int cli_parse_size_kb(const char *s, uint32_t *kb)
{
    char *end;
    unsigned long long v;
    if (leading_unsigned(s, 10, &v, &end) < 0)
        return -EINVAL;
    if (v > UINT32_MAX)
        return -ERANGE; /* also keeps the multiplications below exact */
    unsigned long long k;
    if (!*end || !strcasecmp(end, "k") || !strcasecmp(end, "kb"))
        k = v;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb"))
        k = v * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb"))
        k = v * 1024 * 1024;
    else if (!strcasecmp(end, "b"))
        k = (v + 1023) / 1024;
    else
        return -EINVAL;
    k = (k + 3) / 4 * 4;
    if (k == 0 || k > UINT32_MAX)
        return -ERANGE;
    *kb = (uint32_t)k;
    return 0;
}

int cli_parse_buffer_kb(const char *s, uint32_t *kb, char *why, size_t n)
{
    uint32_t v = 0;
    int rc = cli_parse_size_kb(s, &v);
    if (rc == -EINVAL) {
        snprintf(why, n, "is not a size: use NUMBER[k|m|g] (KiB without "
                 "a unit), e.g. 32m");
        return rc;
    }
    if (rc == 0 && v == 0)
        rc = -ERANGE;
    if (rc < 0) {
        /* Either 0 or past 32 bits: which one, from the digits. */
        bool zero = strspn(s, "0") > 0 && !isdigit((unsigned char)
                                                   s[strspn(s, "0")]);
        if (zero)
            snprintf(why, n, "is 0: a buffer needs at least 4k");
        else
            snprintf(why, n, "is larger than the %um a buffer can hold",
                     CLI_MAX_BUFFER_KB / 1024);
        return -ERANGE;
    }
    if (v > CLI_MAX_BUFFER_KB) {
        snprintf(why, n, "is larger than the %um a buffer can hold",
                 CLI_MAX_BUFFER_KB / 1024);
        return -ERANGE;
    }
    *kb = v;
    return 0;
}

void cli_bad_option(const char *prog, int opt, int optopt, const char *arg)
{
    if (opt == ':')
        fprintf(stderr, "%s: option '%s' needs a value\n", prog, arg);
    else if (optopt && !(arg && arg[0] == '-' && arg[1] == '-'))
        fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
    else
        fprintf(stderr, "%s: unknown option '%s'\n", prog, arg);
    fprintf(stderr, "Try '%s --help' for more information.\n", prog);
}

/* NUMBER[ms|s|m|h] -> ms (plain number = seconds). */
int cli_parse_duration_ms(const char *s, uint32_t *ms)
{
    char *end;
    unsigned long long v;
    if (leading_unsigned(s, 10, &v, &end) < 0)
        return -EINVAL;
    if (v > UINT32_MAX)
        return -ERANGE;
    unsigned long long r;
    if (!strcmp(end, "ms"))
        r = v;
    else if (!*end || !strcmp(end, "s"))
        r = v * 1000;
    else if (!strcmp(end, "m"))
        r = v * 60000;
    else if (!strcmp(end, "h"))
        r = v * 3600000;
    else
        return -EINVAL;
    if (r > UINT32_MAX)
        return -ERANGE;
    *ms = (uint32_t)r;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (leading_unsigned(s, 0, &v, &end) < 0 || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

char *cli_read_file(const char *path, int *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        *err = -errno;
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (len + 1 < cap)
            break;
        if (cap >= 16u * 1024 * 1024) {
            free(buf);
            buf = NULL;
            *err = -EFBIG;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            *err = -ENOMEM;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf)
        buf[len] = 0;
    fclose(f);
    return buf;
}
