/*
 * shmtrace_ext.h - the parts of the `shmtrace` CLI for triggers,
 * detach/attach, snapshots on CLONE_SNAPSHOT triggers and the service
 * state (issue 12), kept apart from shmtrace.c's record/clone/stats core.
 */
#ifndef SHMTRACE_SHMTRACE_EXT_H
#define SHMTRACE_SHMTRACE_EXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "consumer_client.h"
#include "consumer_ext.h"
#include "ipc.pb-c.h"

/* Trigger options of `shmtrace record`. */
typedef struct shx_trig_opts {
    const char *names[16];
    size_t n;
    int mode;                    /* 1 start, 2 stop (default), 4 clone */
    uint32_t timeout_ms;         /* 0: --duration, else 10 min */
    uint32_t stop_delay_ms;
} shx_trig_opts;

/* The options `shmtrace record` takes for them. */
typedef struct shx_rec_opts {
    shx_trig_opts trig;
    const char *detach_key, *attach_key, *is_detached_key;
    bool stop;
} shx_rec_opts;

#define SHX_OPT_BASE 1000
#define SHX_RECORD_LONG_OPTIONS                                          \
    { "trigger", required_argument, 0, SHX_OPT_BASE + 0 },              \
    { "trigger-mode", required_argument, 0, SHX_OPT_BASE + 1 },         \
    { "trigger-timeout", required_argument, 0, SHX_OPT_BASE + 2 },      \
    { "stop-delay", required_argument, 0, SHX_OPT_BASE + 3 },           \
    { "detach", required_argument, 0, SHX_OPT_BASE + 4 },               \
    { "attach", required_argument, 0, SHX_OPT_BASE + 5 },               \
    { "stop", no_argument, 0, SHX_OPT_BASE + 6 },                       \
    { "is-detached", required_argument, 0, SHX_OPT_BASE + 7 }
/* Their --help text. */
extern const char shx_record_help[];
/* One getopt result: 1 taken, 0 not ours (usage error), -1 bad value
 * (message printed). */
int shx_record_option(shx_rec_opts *o, int ch, const char *arg);
/* After parsing: --attach / --is-detached run here (*done = 1, the exit
 * status returned); inconsistent options are usage errors (*done = 1). */
int shx_record_early(shx_rec_opts *o, const char *socket, bool quiet,
                     int *done);

/* What those options change in the config: the triggers, and
 * write_into_file for --detach (nobody reads a detached session over IPC:
 * the service writes the file). *modified set when anything changed. */
int shx_apply_record_opts(Perfetto__Protos__TraceConfig *cfg,
                          const shx_rec_opts *o, bool *modified, char *err,
                          size_t errlen);

/* Parses start|stop|clone; -1 if none. */
int shx_parse_trigger_mode(const char *s);
/* Adds a trigger_config with t's triggers to cfg (which must not have a
 * duration: a --duration becomes the trigger timeout, as Perfetto requires
 * no duration_ms with triggers). 0, or -1 with err set. */
int shx_apply_triggers(Perfetto__Protos__TraceConfig *cfg,
                       const shx_trig_opts *t, char *err, size_t errlen);
/* Whether cfg's triggers are CLONE_SNAPSHOT (record then writes OUT.N). */
bool shx_is_clone_snapshot(const Perfetto__Protos__TraceConfig *cfg);

/* record --attach KEY [--stop] / --is-detached KEY: exit status. */
int shx_attach(const char *socket, const char *key, bool stop, bool quiet);
int shx_is_detached(const char *socket, const char *key);
/* record --detach KEY after EnableTracing: exit status. */
int shx_detach(cons_client *c, const char *key, const char *out);
/* CLONE_SNAPSHOT: writes a snapshot OUT.N for every trigger hit received
 * so far; *count numbers them. Returns 0 or the exit status of a failure
 * (the session goes on either way). */
int shx_snapshots(cons_client *c, const char *socket, const char *out,
                  unsigned *count);

/* `shmtrace trigger NAME...` and `shmtrace query [--json]`. */
int shx_cmd_trigger(int argc, char **argv);
int shx_cmd_query(int argc, char **argv);
/* For `shmtrace stats`: the service state after the trace stats, or both
 * as one JSON object with json. 0 or an exit status. */
int shx_stats_extra(cons_client *c, const Perfetto__Protos__TraceStats *st,
                    bool json);
#endif /* SHMTRACE_SHMTRACE_EXT_H */
