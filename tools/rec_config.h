/*
 * rec_config.h - the TraceConfig of `shmtrace record -c` and record's
 * Perfetto-style helpers (--background, unknown data sources) (rcfg_*).
 *
 * Perfetto's conventions: `-c FILE` or `-c -` (stdin); `--txt` says the
 * config is protobuf text format; without it the config is detected: a
 * file made only of printable characters and whitespace (what Perfetto's
 * `perfetto` calls "could be text") is parsed as text; so is UTF-8 text
 * (non-ASCII comments) that does not decode as protobuf; anything else must
 * be a binary (protobuf-encoded) TraceConfig. A binary config is kept
 * byte for byte: rcfg_final() returns those very bytes unless a flag
 * changed the config, in which case it is decoded, changed and re-encoded.
 */
#ifndef SHMTRACE_REC_CONFIG_H
#define SHMTRACE_REC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.pb-c.h"

typedef struct rcfg {
    Perfetto__Protos__TraceConfig *cfg; /* decoded (always set on success) */
    uint8_t *raw;       /* the binary config as given (binary input only) */
    size_t raw_len;
    bool was_text;
    bool modified;      /* a flag changed cfg: re-encode */
} rcfg;

/* Load PATH ("-" = stdin). force_txt: --txt. On error returns < 0 and
 * writes a message naming the problem (and what to do) to err. */
int rcfg_load(rcfg *rc, const char *path, bool force_txt, char *err,
              size_t err_len);
/* An empty config (no -c). */
int rcfg_empty(rcfg *rc);
/* The bytes to send: the original bytes of a binary config that no flag
 * changed, else rc->cfg encoded. *out is malloc'd. */
int rcfg_final(const rcfg *rc, uint8_t **out, size_t *len);
void rcfg_free(rcfg *rc);

/* --background: fork; the parent prints the child's PID and exits 0 once
 * the child has left the terminal's session (stdio on /dev/null). Returns
 * 0 in the child, -1 if it could not fork. */
int rcfg_daemonize(void);

struct cons_client;
/* Warn on stderr about each data source of cfg that no producer has
 * registered, listing those registered (QueryServiceState; silent if the
 * service does not answer it). */
void rcfg_warn_unknown_data_sources(struct cons_client *c,
                                    const Perfetto__Protos__TraceConfig *cfg);

#endif /* SHMTRACE_REC_CONFIG_H */
