/*
 * svc_regex.c - the regular expressions consumers hand the service
 * (a data source's producer_name_regex_filter, a trigger's
 * producer_name_regex), checked before glibc's regcomp / regexec see them.
 *
 * Both run on the service's one thread, for patterns any consumer may
 * send, and glibc's engine is not safe for every pattern:
 *   - a backreference can make regexec recurse until the stack overflows
 *     (CVE-2019-9192: "(|)(\1\1)*" segfaults it): the config
 *     producer_name_regex_filter: "(|)(\\2\\2)*.*" killed shmtraced, and
 *     every user's sessions with it, as soon as a producer was matched;
 *   - nested repetitions blow up regcomp or regexec: "(.{0,255}){255}" ran
 *     for more than 30 s, "(.{0,100}){100}" 2 s against a 41-byte name,
 *     "(.*|a*){127}" 1.2 s and "((.*)*){16}" 79 ms in regcomp, "{32}" there
 *     more than a minute: exponential (2026-12-06, glibc 2.36).
 * So svc_regex_check refuses, with the reason, a pattern that
 *   - is longer than SVC_REGEX_MAX_LEN bytes, or nests groups deeper than
 *     SVC_REGEX_MAX_DEPTH;
 *   - holds a backreference (\1 to \9): not POSIX extended syntax, which
 *     is what Perfetto matches these filters with (std::regex::extended);
 *   - has parentheses or brackets that do not balance (the service wraps
 *     a pattern in "^(...)$": an extra ')' would step out of that);
 *   - puts two quantifiers in a row ("a{0,9}{5,}", "(x)*+"), a count
 *     {m,n} on a group ("(ab){2}"), or nests quantifiers more than
 *     SVC_REGEX_MAX_QDEPTH deep ("(a*)*" is two deep, "((a*)*)*" three):
 *     "x(){0,9}{5,}" took 1.9 s in regcomp and "{11,}" more than a minute,
 *     though it expands to few atoms;
 *   - may expand to more than SVC_REGEX_MAX_SIZE atoms: an atom (a
 *     character, '.', a bracket expression, an escape) counts 1, a group
 *     the sum over its alternatives, and every quantifier multiplies what
 *     it applies to: '*', '?' and '+' by 2, {m,n} by n + 1, {m} and {m,}
 *     by m + 1.
 * Within these limits the worst patterns found (by hand, and among
 * random patterns of ERE pieces) take about a millisecond to compile and
 * match against 1024 bytes ("(.{0,63})+b" 1.1 ms). Legitimate
 * producer-name filters ("com\.example\..*", "(foo|bar)_[0-9]+",
 * "[a-z]{2,8}") are far from them.
 * The scan follows ERE syntax only as far as these need; syntax errors
 * are regcomp's to report. svc_regex_full_match matches names of at most
 * SVC_REGEX_MAX_SUBJECT bytes (a longer producer name matches no regex;
 * exact name filters still apply).
 */
#include "config.h"

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"

#define SVC_REGEX_MAX_LEN 1024u
#define SVC_REGEX_MAX_DEPTH 32u
#define SVC_REGEX_MAX_SIZE 128u
#define SVC_REGEX_MAX_QDEPTH 2u
#define SVC_REGEX_MAX_SUBJECT 1024u

typedef struct {
    const char *p;
    size_t i;
    const char *why;      /* set on refusal */
} rx_scan;

/* Saturating: sizes only grow, and anything past the limit is refused. */
static uint64_t cap(uint64_t v)
{
    return v > SVC_REGEX_MAX_SIZE ? SVC_REGEX_MAX_SIZE + 1 : v;
}

/* Skips a bracket expression starting at '['. */
static bool skip_bracket(rx_scan *s)
{
    const char *p = s->p;
    size_t i = s->i + 1;
    if (p[i] == '^')
        i++;
    if (p[i] == ']')          /* a leading ']' is a member */
        i++;
    for (;;) {
        if (p[i] == '\0') {
            s->why = "a '[' without its ']'";
            return false;
        }
        if (p[i] == ']')
            break;
        if (p[i] == '[' && (p[i + 1] == ':' || p[i + 1] == '.' ||
                            p[i + 1] == '=')) {
            char end = p[i + 1];
            i += 2;
            while (p[i] && !(p[i] == end && p[i + 1] == ']'))
                i++;
            if (!p[i]) {
                s->why = "a \"[:\", \"[.\" or \"[=\" without its end";
                return false;
            }
            i += 2;
            continue;
        }
        i++;
    }
    s->i = i + 1;
    return true;
}

/* An interval at '{': the copies it makes of its atom (upper bound + 1). */
static bool interval(rx_scan *s, uint64_t *copies)
{
    const char *p = s->p;
    size_t i = s->i + 1;
    uint64_t m = 0, n = 0;
    bool digits = false, comma = false, upper = false;
    for (; p[i] >= '0' && p[i] <= '9'; i++, digits = true)
        m = cap(m * 10 + (uint64_t)(p[i] - '0'));
    if (p[i] == ',') {
        comma = true;
        for (i++; p[i] >= '0' && p[i] <= '9'; i++, upper = true)
            n = cap(n * 10 + (uint64_t)(p[i] - '0'));
    }
    if (!digits || p[i] != '}') {
        s->why = "a '{' that is not a repetition count {m}, {m,} or {m,n}";
        return false;
    }
    *copies = (comma && upper ? (n > m ? n : m) : m) + 1;
    s->i = i + 1;
    return true;
}

/* The alternatives from s->i to the ')' closing this depth (or the end):
 * their size, summed; *qd: the quantifiers nested deepest in them. */
static bool alternatives(rx_scan *s, unsigned depth, uint64_t *size,
                         unsigned *qd)
{
    uint64_t total = 0;
    *qd = 0;
    for (;;) {
        char c = s->p[s->i];
        uint64_t atom = 1;
        unsigned aq = 0;      /* quantifiers nested in this piece */
        bool group = c == '(';
        if (c == '\0' || c == ')')
            break;
        if (c == '|') {
            s->i++;
            continue;
        }
        if (c == '(') {
            if (depth + 1 > SVC_REGEX_MAX_DEPTH) {
                s->why = "groups nested too deep";
                return false;
            }
            s->i++;
            if (!alternatives(s, depth + 1, &atom, &aq))
                return false;
            if (s->p[s->i] != ')') {
                s->why = "a '(' without its ')'";
                return false;
            }
            s->i++;
            if (atom == 0)
                atom = 1;
        } else if (c == '[') {
            if (!skip_bracket(s))
                return false;
        } else if (c == '\\') {
            char d = s->p[s->i + 1];
            if (d >= '1' && d <= '9') {
                s->why = "a backreference (\\1 to \\9): not POSIX extended "
                         "syntax";
                return false;
            }
            if (d == '\0') {
                s->why = "a '\\' at the end";
                return false;
            }
            s->i += 2;
        } else {
            s->i++;
        }
        /* its quantifier: one at most; a count only on a single atom */
        c = s->p[s->i];
        if (c == '*' || c == '?' || c == '+') {
            s->i++;
            atom = cap(atom * 2);
            aq++;
        } else if (c == '{') {
            uint64_t copies;
            if (group) {
                s->why = "a repetition count {m,n} on a group (here only "
                         "*, + and ? apply to a group; write (ab){2} as "
                         "abab)";
                return false;
            }
            if (!interval(s, &copies))
                return false;
            atom = cap(atom * copies);
            aq++;
        }
        c = s->p[s->i];
        if (aq && (c == '*' || c == '?' || c == '+' || c == '{')) {
            s->why = "two quantifiers in a row (such as a{0,9}{5,}: "
                     "glibc's regcomp takes exponential time)";
            return false;
        }
        if (aq > SVC_REGEX_MAX_QDEPTH) {
            s->why = "quantifiers nested more than two deep (such as "
                     "((a*)*){16}: glibc's regcomp takes exponential time)";
            return false;
        }
        if (aq > *qd)
            *qd = aq;
        total = cap(total + atom);
    }
    *size = total;
    return true;
}

/* regcomp of "^(re)$", the form that is matched (and so checked). */
static int compile_whole(const char *re, regex_t *r)
{
    size_t len = strlen(re);
    char *full = malloc(len + 5);
    if (!full)
        return REG_ESPACE;
    snprintf(full, len + 5, "^(%s)$", re);
    int rc = regcomp(r, full, REG_EXTENDED | REG_NOSUB);
    free(full);
    return rc;
}

/* svc_regex_check, and on success the compiled "^(re)$" in *out (NULL:
 * freed here) for the caller to match with and free. */
static int check_compile(const char *re, char *why, size_t whylen,
                         regex_t *out)
{
    rx_scan s = { .p = re ? re : "", .i = 0, .why = NULL };
    uint64_t size = 0;
    unsigned qd = 0;
    size_t len = strlen(s.p);
    if (len > SVC_REGEX_MAX_LEN) {
        if (why && whylen)
            snprintf(why, whylen, "longer than %u bytes", SVC_REGEX_MAX_LEN);
        return -EINVAL;
    }
    if (alternatives(&s, 0, &size, &qd) && s.p[s.i] == ')')
        s.why = "a ')' without its '('";
    if (!s.why && size > SVC_REGEX_MAX_SIZE) {
        if (why && whylen)
            snprintf(why, whylen, "repetitions that expand it past %u atoms "
                     "(every quantifier multiplies what it applies to)",
                     SVC_REGEX_MAX_SIZE);
        return -EINVAL;
    }
    if (s.why) {
        if (why && whylen)
            snprintf(why, whylen, "%s", s.why);
        return -EINVAL;
    }
    regex_t r;
    int rc = compile_whole(s.p, &r);
    if (rc != 0) {
        if (why && whylen)
            snprintf(why, whylen, "%s", rc == REG_ESPACE ? "out of memory" :
                     "not a valid POSIX extended regular expression");
        return -EINVAL;
    }
    if (out)
        *out = r;
    else
        regfree(&r);
    return 0;
}

int svc_regex_check(const char *re, char *why, size_t whylen)
{
    return check_compile(re, why, whylen, NULL);
}

bool svc_regex_full_match(const char *re, const char *subject)
{
    regex_t r;
    if (strlen(subject) > SVC_REGEX_MAX_SUBJECT ||
        check_compile(re, NULL, 0, &r) < 0)
        return false;
    bool ok = regexec(&r, subject, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}
