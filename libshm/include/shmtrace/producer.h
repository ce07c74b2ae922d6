/*
 * shmtrace/producer.h - libshm's IPC client: a producer process talking to
 * shmtraced (or Perfetto's traced) over the producer socket.
 *
 * What it does (wire-formats.md sections 8 and 10):
 *   connect -> BindService("ProducerPort") -> InitializeConnection (SMB size
 *   and page size hints, producer name) -> GetAsyncCommand (kept open) ->
 *   RegisterDataSource for every registered source. Commands from the
 *   service arrive on the GetAsyncCommand stream:
 *     setup_tracing      SMB fd (SCM_RIGHTS): the library maps it and builds
 *                        the smb_arbiter whose transport seam sends
 *                        CommitData (batched: one IPC per 1/16 of the SMB,
 *                        between a page and 64 KiB, patches included;
 *                        never one per packet) and RegisterTraceWriter.
 *     setup/start/stop_data_source, flush, clear_incremental_state
 *                        -> the callbacks below.
 *   When the service goes away, every callback of the connection is undone
 *   with on_disconnect; with options.reconnect the library retries every
 *   reconnect_delay_ms and registers the data sources again; without it the
 *   producer stays disconnected (writers become harmless: see below).
 *
 * Threads: prod_create starts one library thread that runs the IPC; every
 * callback runs on that thread, one at a time. All prod_* functions are
 * thread-safe and may be called from callbacks. TraceWriters are used from
 * the application's own threads as trace_writer.h says.
 *
 * Writers and sessions: prod_create_writer makes a tw_writer on the current
 * SMB. After a disconnect the old SMB is orphaned: its arbiter is shut down
 * (new writers are null writers, commits are dropped and counted) but stays
 * mapped until prod_destroy, so writers still alive never touch freed
 * memory. Destroy your writers when a data source stops or on_disconnect.
 *
 * Errors: 0 or a negative errno (smb_strerror prints it). Ownership:
 * prod_create allocates, prod_destroy joins the thread and frees;
 * prod_destroy(NULL) is a no-op. Pointers passed to callbacks are valid
 * only during the call.
 */
#ifndef SHMTRACE_PRODUCER_H
#define SHMTRACE_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#include <shmtrace/api.h>
#include <shmtrace/arbiter.h>
#include <shmtrace/trace_writer.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct prod_producer prod_producer;

/* DataSourceDescriptor (what RegisterDataSource sends). */
typedef struct prod_data_source {
    const char *name;                   /* e.g. "shmtrace.synthetic" */
    uint8_t will_notify_on_start;       /* app calls prod_notify_started */
    uint8_t will_notify_on_stop;        /* app calls prod_notify_stopped */
    uint8_t handles_incremental_state_clear;
    uint8_t no_flush;
    uint32_t reserved[4];               /* zero */
} prod_data_source;

/* A data source instance's config (DataSourceConfig, as the service sent
 * it in setup/start_data_source). */
typedef struct prod_ds_config {
    uint64_t instance_id;          /* the service's DataSourceInstanceID */
    const char *name;              /* data source name */
    uint32_t target_buffer;        /* global BufferID for tw_writer_create */
    uint32_t trace_duration_ms;
    uint64_t tracing_session_id;
    uint32_t buffer_exhausted_policy; /* 0 unspecified, 1 drop, 2, 3 */
    uint32_t stop_timeout_ms;
    /* for_testing (TestConfig), 0 when absent */
    uint32_t test_message_count;
    uint32_t test_max_messages_per_second;
    uint32_t test_message_size;
    uint32_t reserved0;
    /* The whole DataSourceConfig, serialized, for anything else. */
    const uint8_t *raw;
    size_t raw_len;
} prod_ds_config;

typedef struct prod_callbacks {
    /* Connected, bound and initialized (sent InitializeConnection). */
    void (*on_connect)(prod_producer *p, void *ctx);
    /* The connection ended (or a connect attempt failed: err < 0). Every
     * data source instance of the connection is gone with it.
     * -ECONNREFUSED: the service refused the connection and said why
     * (prod_refusal; e.g. too many connections of this uid). */
    void (*on_disconnect)(prod_producer *p, int err, void *ctx);
    void (*on_setup)(prod_producer *p, const prod_ds_config *cfg,
                     void *ctx);
    /* Start writing (create writers for cfg->target_buffer). If the
     * descriptor set will_notify_on_start, call prod_notify_started once
     * it really writes: until then the service does not count the session
     * as started (consumers waiting for that, e.g. `perfetto
     * --background-wait`, keep waiting; after 20 s the trace names the
     * data source in slow_starting_data_sources). */
    void (*on_start)(prod_producer *p, const prod_ds_config *cfg,
                     void *ctx);
    /* Stop: flush and destroy the instance's writers, then call
     * prod_notify_stopped if the descriptor set will_notify_on_stop. */
    void (*on_stop)(prod_producer *p, uint64_t instance_id, void *ctx);
    /* Flush the writers of these instances, then call
     * prod_flush_done(p, flush_id) (any thread, any time). When NULL, the
     * library acks at once (pending batches only). */
    void (*on_flush)(prod_producer *p, const uint64_t *instance_ids,
                     size_t n_ids, uint64_t flush_id, uint64_t flags,
                     void *ctx);
    void (*on_clear_incremental_state)(prod_producer *p,
                                       const uint64_t *instance_ids,
                                       size_t n_ids, void *ctx);
} prod_callbacks;

typedef struct prod_options {
    const char *socket_path;        /* NULL: $PERFETTO_PRODUCER_SOCK_NAME,
                                       then the shmtrace default (looked
                                       up again at each reconnect) */
    const char *producer_name;      /* NULL: "shmtrace-producer" */
    uint32_t smb_size_hint_bytes;   /* 0: let the service choose */
    uint32_t smb_page_size_hint_bytes; /* 0: let the service choose */
    uint8_t reconnect;              /* 1: retry after loss / failure */
    uint8_t reserved8[3];
    uint32_t reconnect_delay_ms;    /* 0: 1000 */
    uint32_t reserved[6];           /* zero */
} prod_options;

typedef struct prod_stats {
    uint64_t connects;          /* successful connections */
    uint64_t disconnects;
    uint64_t commit_requests;   /* CommitData IPCs sent */
    uint64_t chunks_committed;  /* chunks_to_move sent */
    uint64_t patches_sent;
    uint64_t commits_dropped;   /* batches lost: not connected / too big */
    uint64_t commands;          /* async commands received */
    uint64_t flush_acks;        /* CommitData with flush_request_id */
} prod_stats;

/* Start the producer thread and connect. NULL + errno (EINVAL, ENOMEM,
 * or the connect error when !reconnect) on failure. cb may be NULL.
 * The producer talks only to a service running as root or as its own
 * euid (SO_PEERCRED): any other daemon at the socket path is refused with
 * EPERM (on_disconnect's err -EPERM when reconnecting) and gets nothing. */
SHMTRACE_API prod_producer *prod_create(const prod_options *opts,
                                        const prod_callbacks *cb, void *ctx);
/* Disconnect, join the thread, unmap every SMB. Destroy all writers
 * first. NULL is a no-op. Must not be called from a callback. */
SHMTRACE_API void prod_destroy(prod_producer *p);

/* Register a data source (now, and again after every reconnect).
 * -EEXIST duplicate name, -EINVAL. */
SHMTRACE_API int prod_register_data_source(prod_producer *p,
                                           const prod_data_source *ds);

/* A writer on the current SMB for target_buffer; a null writer (writes
 * nothing) after a disconnect. NULL + errno ENOTCONN when no SMB was ever
 * set up (create writers from on_start), ENOMEM. */
SHMTRACE_API tw_writer *prod_create_writer(prod_producer *p,
                                           uint32_t target_buffer,
                                           tw_policy policy);

SHMTRACE_API int prod_notify_started(prod_producer *p, uint64_t instance_id);
SHMTRACE_API int prod_notify_stopped(prod_producer *p, uint64_t instance_id);
/* Ack a flush: sends the arbiter's pending batch with flush_request_id. */
SHMTRACE_API int prod_flush_done(prod_producer *p, uint64_t flush_id);

/* 1 when connected and bound, else 0. */
SHMTRACE_API int prod_is_connected(prod_producer *p);
SHMTRACE_API void prod_get_stats(prod_producer *p, prod_stats *out);
/* Why the service refused the last connection, in its words (printable
 * ASCII), or NULL. Valid during on_disconnect, from the callback's
 * thread. */
SHMTRACE_API const char *prod_refusal(prod_producer *p);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_PRODUCER_H */
