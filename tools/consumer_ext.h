/*
 * consumer_ext.h - the consumer client's calls beyond recording one session
 * (issue 12): Detach/Attach, QueryServiceState, ObserveEvents (clone
 * trigger hits of CLONE_SNAPSHOT sessions), CloneSession with the trigger
 * that caused it and an output fd, and ActivateTriggers, which goes to the
 * PRODUCER socket as Perfetto's trigger_perfetto does. Same conventions as
 * consumer_client.h (synchronous, 0 or a negative errno).
 */
#ifndef SHMTRACE_CONSUMER_EXT_H
#define SHMTRACE_CONSUMER_EXT_H

#include "consumer_client.h"
#include "ipc.pb-c.h"

typedef struct cons_clone_hit {
    uint64_t tsid;
    char *name, *producer;       /* owned */
    uint32_t producer_uid;
    uint64_t boot_time_ns, delay_ms;
} cons_clone_hit;

/* Detach the session from this connection under key: it survives the
 * connection; -EPROTO if the service refused (key in use, no session). */
int cons_detach(cons_client *c, const char *key);
/* Attach to the session detached under key (same uid); *cfg_out (may be
 * NULL) gets its TraceConfig (free with ..._free_unpacked). Also asks for
 * the end-of-session notification: cons_ended() works afterwards.
 * -EPROTO: no such detached session. */
int cons_attach(cons_client *c, const char *key,
                Perfetto__Protos__TraceConfig **cfg_out);
/* QueryServiceState (all reply pieces merged). Free *out with
 * perfetto__protos__tracing_service_state__free_unpacked. */
int cons_query(cons_client *c, bool sessions_only,
               Perfetto__Protos__TracingServiceState **out);
/* Start observing: clone trigger hits are queued for cons_take_clone_hit
 * (run cons_poll to receive them). */
int cons_observe(cons_client *c);
bool cons_take_clone_hit(cons_client *c, cons_clone_hit *out);
void cons_clone_hit_free(cons_clone_hit *h);
/* CloneSession with optional trigger info and output fd (dup()ed; the
 * service writes a write_into_file session's clone into it and sets
 * *was_file). */
int cons_clone_ex(cons_client *c, uint64_t session_id, const char *name,
                  const cons_clone_hit *trigger, int fd, bool *was_file,
                  char *err, size_t err_len);
/* Connect to the producer socket (override, else
 * $PERFETTO_PRODUCER_SOCK_NAME, else the default) as producer
 * producer_name and send ActivateTriggers(names). On failure err says
 * why; *unreachable (may be NULL) is set when the service could not be
 * reached (no one listening, a daemon of another user, a refusal). */
int cons_activate_triggers(const char *producer_socket,
                           const char *producer_name,
                           const char *const *names, size_t n,
                           bool *unreachable, char *err, size_t err_len);

#endif /* SHMTRACE_CONSUMER_EXT_H */
