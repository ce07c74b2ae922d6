/*
 * rec_config.c - the TraceConfig of `shmtrace record -c` (rcfg_*): read
 * a file or stdin, tell text from binary, keep binary bytes as given.
 * See rec_config.h for the rules.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>

#include "rec_config.h"
#include "consumer_client.h"
#include "textproto.h"

#define MAX_CONFIG_BYTES (16u * 1024 * 1024)

/* Whole of fd into a malloc'd buffer with a NUL after the data. */
static int read_all(int fd, uint8_t **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_CONFIG_BYTES) {
                free(buf);
                return -EFBIG;
            }
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* Perfetto's "could be text": printable ASCII or \t \n \v \f \r only. */
static bool could_be_text(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 32 && p[i] <= 126) || (p[i] >= 9 && p[i] <= 13)))
            return false;
    return true;
}

/* Well-formed UTF-8 with no control bytes but whitespace: text with
 * non-ASCII characters (a comment in another language, say). */
static bool utf8_text(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t k;
        if (c < 0x80) {
            if (!could_be_text(&c, 1))
                return false;
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++)
            if ((p[i + j] & 0xc0) != 0x80)
                return false;
        i += k + 1;
    }
    return true;
}

int rcfg_empty(rcfg *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->cfg = calloc(1, sizeof *rc->cfg);
    if (!rc->cfg)
        return -ENOMEM;
    perfetto__protos__trace_config__init(rc->cfg);
    return 0;
}

int rcfg_load(rcfg *rc, const char *path, bool force_txt, char *err,
              size_t err_len)
{
    memset(rc, 0, sizeof *rc);
    bool is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "stdin" : path;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_len, "cannot read config %s: %s", name,
                 strerror(errno));
        return -errno;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    int r = read_all(fd, &buf, &len);
    if (!is_stdin)
        close(fd);
    if (r < 0) {
        snprintf(err, err_len, "cannot read config %s: %s", name,
                 r == -EFBIG ? "larger than 16 MiB" : strerror(-r));
        return r;
    }
    if (len == 0) {
        snprintf(err, err_len, "config %s is empty", name);
        free(buf);
        return -EINVAL;
    }
    bool text = force_txt || could_be_text(buf, len);
    if (!text && utf8_text(buf, len)) {
        /* Not printable ASCII, but UTF-8 text: text unless it decodes as
         * a binary config. */
        Perfetto__Protos__TraceConfig *b =
            perfetto__protos__trace_config__unpack(NULL, len, buf);
        text = b == NULL;
        if (b)
            perfetto__protos__trace_config__free_unpacked(b, NULL);
    }
    if (text) {
        char msg[256];
        ProtobufCMessage *m = NULL;
        if (memchr(buf, 0, len)) {
            snprintf(err, err_len, "config %s holds a NUL byte", name);
            free(buf);
            return -EINVAL;
        }
        r = tp_parse((const char *)buf, &perfetto__protos__trace_config__descriptor,
                     &m, msg, sizeof msg);
        if (r < 0) {
            /* A binary config made only of printable bytes is possible
             * (rare): say how to force either reading. */
            Perfetto__Protos__TraceConfig *b =
                force_txt ? NULL
                          : perfetto__protos__trace_config__unpack(NULL, len,
                                                                   buf);
            snprintf(err, err_len, "%s: %s%s", name, msg,
                     b ? " (it also decodes as a binary TraceConfig, which "
                         "needs a non-printable byte to be detected; "
                         "re-encode it or check the text)"
                       : force_txt ? "" : " (read as text format: the file "
                         "is all printable characters)");
            if (b)
                perfetto__protos__trace_config__free_unpacked(b, NULL);
            free(buf);
            return -EINVAL;
        }
        free(buf);
        rc->cfg = (Perfetto__Protos__TraceConfig *)m;
        rc->was_text = true;
        return 0;
    }
    rc->cfg = perfetto__protos__trace_config__unpack(NULL, len, buf);
    if (!rc->cfg) {
        snprintf(err, err_len, "%s is neither a text-format config (it has "
                 "non-printable bytes) nor a valid binary TraceConfig (it "
                 "does not decode as protobuf); pass --txt for text", name);
        free(buf);
        return -EINVAL;
    }
    rc->raw = buf;
    rc->raw_len = len;
    return 0;
}

int rcfg_final(const rcfg *rc, uint8_t **out, size_t *len)
{
    if (rc->raw && !rc->modified) {
        *out = malloc(rc->raw_len ? rc->raw_len : 1);
        if (!*out)
            return -ENOMEM;
        memcpy(*out, rc->raw, rc->raw_len);
        *len = rc->raw_len;
        return 0;
    }
    size_t n = perfetto__protos__trace_config__get_packed_size(rc->cfg);
    *out = malloc(n ? n : 1);
    if (!*out)
        return -ENOMEM;
    *len = perfetto__protos__trace_config__pack(rc->cfg, *out);
    return 0;
}

void rcfg_free(rcfg *rc)
{
    if (rc->cfg)
        perfetto__protos__trace_config__free_unpacked(rc->cfg, NULL);
    free(rc->raw);
    memset(rc, 0, sizeof *rc);
}

/* --background (as perfetto's): the parent prints the child's PID and
 * exits 0; the child leaves the terminal's session, its stdio goes to
 * /dev/null and it records on. */
int rcfg_daemonize(void)
{
    fflush(NULL);
    int pfd[2];
    if (pipe(pfd) < 0) {
        perror("shmtrace record: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("shmtrace record: fork");
        return -1;
    }
    if (pid > 0) {
        /* Wait until the child has detached, then report it. */
        close(pfd[1]);
        char one = 0;
        ssize_t n;
        do
            n = read(pfd[0], &one, 1);
        while (n < 0 && errno == EINTR);
        printf("%d\n", (int)pid);
        fflush(stdout);
        _exit(n == 1 ? 0 : 1);
    }
    close(pfd[0]);
    if (setsid() < 0)
        perror("shmtrace record: setsid");
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        if (null > 2)
            close(null);
    }
    ssize_t w = write(pfd[1], "1", 1);
    (void)w;
    close(pfd[1]);
    return 0;
}

/* Warn about data sources no producer registered (QueryServiceState; a
 * service without it is not asked again). */
void rcfg_warn_unknown_data_sources(cons_client *c,
                                    const Perfetto__Protos__TraceConfig *cfg)
{
    char **names = NULL;
    size_t n = 0;
    if (cfg->n_data_sources == 0 ||
        cons_query_data_sources(c, &names, &n) < 0)
        return;
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__TraceConfig__DataSource *ds =
            cfg->data_sources[i];
        const char *want = ds && ds->config ? ds->config->name : NULL;
        if (!want)
            continue;
        bool found = false;
        for (size_t k = 0; k < n && !found; k++)
            found = !strcmp(names[k], want);
        if (found)
            continue;
        fprintf(stderr, "shmtrace record: warning: no producer has "
                "registered data source '%s' (yet); registered:", want);
        for (size_t k = 0; k < n; k++)
            fprintf(stderr, "%s %s", k ? "," : "", names[k]);
        fprintf(stderr, "%s\n", n ? "" : " none");
    }
    cons_free_names(names, n);
}
