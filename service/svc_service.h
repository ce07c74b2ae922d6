/*
 * svc_service.h - the tracing service core, independent of sockets.
 *
 * The daemon (shmtraced.c) and its IPC glue (svc_ipc.c) translate frames
 * into these calls; tests drive them directly. The core never does I/O on a
 * connection itself: whatever it must tell a producer or a consumer goes
 * through the svc_ops callbacks, with the opaque `conn`/`consumer` handles
 * the glue passed in.
 *
 * Threads: one thread owns an svc_service and makes every call.
 * Errors: int returns are 0 or a negative errno; functions that can fail for
 * a reason a user must see fill `err` (NUL-terminated, may be truncated).
 * Time: the core reads CLOCK_MONOTONIC (svc_now_ms) to arm deadlines;
 * svc_tick(now) fires the ones that are due, svc_next_deadline_ms tells the
 * loop how long it may sleep.
 */
#ifndef SHMTRACE_SVC_SERVICE_H
#define SHMTRACE_SVC_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.pb-c.h"
#include "common.pb-c.h"

typedef struct svc_service svc_service;
typedef struct svc_producer svc_producer;
typedef struct svc_session svc_session;

/* A trigger that hit a session (the trace's `trigger` packet, the
 * consumer's CloneTriggerHit event). Strings valid during the call. */
typedef struct {
    const char *name, *producer_name;
    int32_t producer_uid;
    uint64_t boot_time_ns, delay_ms;
} svc_trigger_hit;

/* What the core asks the glue to do. Producer commands return 0 or -errno
 * (a failure is treated as "the producer will not answer"). */
typedef struct {
    int (*setup_tracing)(void *ctx, void *conn, int smb_fd,
                         uint32_t page_size_kb);
    int (*setup_data_source)(void *ctx, void *conn, uint64_t instance_id,
            const Perfetto__Protos__DataSourceConfig *cfg);
    int (*start_data_source)(void *ctx, void *conn, uint64_t instance_id,
            const Perfetto__Protos__DataSourceConfig *cfg);
    int (*stop_data_source)(void *ctx, void *conn, uint64_t instance_id);
    int (*flush)(void *ctx, void *conn, const uint64_t *instance_ids,
                 size_t n, uint64_t flush_id, uint64_t flags);
    /* A consumer Flush finished (token as given to svc_session_flush). */
    void (*flush_done)(void *ctx, void *consumer, uint64_t token, bool ok);
    /* The session is now disabled (duration elapsed, DisableTracing done,
     * or file full); error NULL on a normal stop. */
    void (*session_disabled)(void *ctx, void *consumer, svc_session *,
                             const char *error);
    /* A CLONE_SNAPSHOT trigger is due: the consumer should CloneSession
     * (ObservableEvents.clone_trigger_hit). May be NULL. */
    void (*clone_trigger_hit)(void *ctx, void *consumer, uint64_t session_id,
                              const svc_trigger_hit *);
    /* incremental_state_config.clear_period_ms elapsed: ClearIncremental-
     * State for these instances of the producer. May be NULL. */
    int (*clear_incremental_state)(void *ctx, void *conn,
                                   const uint64_t *instance_ids, size_t n);
    /* Every data source instance of the session has started (ObservableEvents
     * all_data_sources_started): at its start (EnableTracing, StartTracing
     * or a START_TRACING trigger) if none registered will_notify_on_start,
     * else when the last of those sent NotifyDataSourceStarted or went
     * away. Once per session. May be NULL. */
    void (*all_ds_started)(void *ctx, void *consumer, svc_session *);
    /* The flush that svc_session_flush_for_clone started for `token` is
     * over (acked by every producer, or timed out: the clone takes what
     * is there either way); source_gone: the session is being freed (from
     * svc_session_free: do not touch the service's sessions from here, only
     * note it). May be NULL. */
    void (*clone_flush_done)(void *ctx, uint64_t token, bool source_gone);
} svc_ops;

/* A packet ready for the consumer: one TracePacket serialization (no Trace
 * field-1 header), valid until the callback returns. Return <0 to stop. */
typedef int (*svc_emit_fn)(void *ctx, const uint8_t *packet, size_t size);

uint64_t svc_now_ms(void);

/* NULL + errno on no memory. ops copied. */
svc_service *svc_create(const svc_ops *ops, void *ops_ctx, uid_t service_uid);
void svc_destroy(svc_service *);   /* NULL ok; closes output files */

/* Isolation between users. A session belongs to the uid of the consumer
 * that enabled it: only that uid may clone it, see it in stats or reuse
 * its unique_session_name. A consumer of uid 0 may also reach every other
 * uid's sessions (Perfetto's rule) unless this is turned off (default on;
 * shmtraced --no-root-access turns it off). */
void svc_set_root_access(svc_service *, bool root_may_access_all);
/* Per-uid limits, so that one user cannot lock the others out: a consumer
 * uid may have at most max_sessions sessions it started (clones not
 * counted, as in Perfetto) and hold at most max_buffer_kb KB of buffers,
 * clones included, within the service's budget (svc_set_buffer_budget).
 * 0 lifts either. The session limit holds for every uid, as Perfetto's; the
 * buffer share for every uid but the daemon's own (which has the whole
 * budget). Defaults: 5 sessions (Perfetto's) and 2 GiB (half the budget). */
#define SVC_MAX_SESSIONS_PER_UID_DEFAULT  5u  /* Perfetto's
                                        kMaxConcurrentTracingSessionsPerUid */
#define SVC_MAX_BUFFER_KB_PER_UID_DEFAULT (2u * 1024 * 1024)  /* 2 GiB */
void svc_set_uid_limits(svc_service *, uint32_t max_sessions,
                        uint64_t max_buffer_kb);
/* The service's buffer budget, all sessions and clones together, and the
 * part of it only root and the daemon's own uid may take: several users
 * together may hold at most total_kb - reserved_kb, so that the owner can
 * still record (or clone) when they have taken the rest. Defaults:
 * SVC_MAX_TOTAL_BUFFER_KB (4 GiB; total_kb 0 restores it) and
 * SVC_RESERVED_BUFFER_KB (reserved_kb 0: nothing kept). */
#define SVC_RESERVED_BUFFER_KB (256u * 1024)   /* 256 MiB */
void svc_set_buffer_budget(svc_service *, uint64_t total_kb,
                           uint64_t reserved_kb);
/* Bytes of packets per step of a periodic file pass (svc_flush.c);
 * 0 restores the default SVC_FILE_STEP_BYTES. */
void svc_set_file_step_bytes(svc_service *, size_t bytes);
/* File mode: packets of at least this many bytes are written to the file
 * from where they lie in their buffer, smaller ones copied into the file
 * batch (svc_read.c); 0 restores the default
 * SVC_FILE_IN_PLACE_MIN (8 KiB). */
void svc_set_file_in_place_min(svc_service *, size_t bytes);
/* write_into_file sessions created from now on write their files with
 * O_DIRECT where the file takes it (svc_direct.c: less CPU, no page
 * cache, the disk's throughput); off by default. */
void svc_set_file_direct(svc_service *, bool on);
/* write_into_file through a writer thread (svc_fwrite.h): the page cache
 * copy of a file pass runs beside the main loop. Set before the first
 * session; off by default (svc_create), on in shmtraced. 0 or -ENOMEM. */
int svc_set_file_writer_thread(svc_service *, bool on);
/* With the writer thread, where batches of copied packets (those under
 * the in-place threshold) are written: AUTO (the default) hands them to
 * the thread while the main thread is saturated and the packets average
 * at least SVC_FILE_COPIED_OUT_MIN bytes, and writes them on the main
 * thread otherwise (svc_read.c says why); THREAD and INLINE force one
 * way (tests). Batches of slices always go to the thread. */
typedef enum {
    SVC_FILE_COPIED_AUTO = 0,
    SVC_FILE_COPIED_THREAD,
    SVC_FILE_COPIED_INLINE
} svc_file_copied_mode;
void svc_set_file_copied_mode(svc_service *, svc_file_copied_mode);
/* With the writer thread: an fd that becomes readable when a batch was
 * written; the loop then calls svc_tick so that a pass that waited for
 * the writer goes on. -1 without. */
int svc_file_writer_fd(const svc_service *);

uint64_t svc_next_deadline_ms(const svc_service *);   /* 0 = none */
void svc_tick(svc_service *, uint64_t now_ms);

/* ---- producers (svc_producer.c) ---- */
typedef struct {
    uint32_t page_size_hint_bytes, smb_size_hint_bytes;
    const char *name;            /* may be NULL */
    int smb_scraping_mode;       /* 0 unspecified (on), 1 on, 2 off */
    const char *sdk_version;     /* may be NULL (QueryServiceState) */
} svc_producer_params;

/* NULL + errno (EAGAIN: no free producer id). */
svc_producer *svc_producer_connect(svc_service *, void *conn, uid_t uid,
        pid_t pid, const svc_producer_params *);
/* Scrapes its SMB, ends its instances, frees it. Returns the number of
 * chunks recovered by the scrape (its unfinished data). */
size_t svc_producer_disconnect(svc_service *, svc_producer *);
uint16_t svc_producer_id(const svc_producer *);
int svc_producer_register_ds(svc_service *, svc_producer *,
        const Perfetto__Protos__DataSourceDescriptor *, char *err,
        size_t errlen);
int svc_producer_unregister_ds(svc_service *, svc_producer *,
                               const char *name);
int svc_producer_register_writer(svc_service *, svc_producer *,
                                 uint32_t writer_id, uint32_t buffer_id);
int svc_producer_unregister_writer(svc_service *, svc_producer *,
                                   uint32_t writer_id);
/* -EPERM when the SMB is not set up (reply success=false). */
int svc_producer_commit(svc_service *, svc_producer *,
                        const Perfetto__Protos__CommitDataRequest *);
void svc_producer_ds_stopped(svc_service *, svc_producer *,
                             uint64_t instance_id);
/* NotifyDataSourceStarted: only p's own instances count; an id that is
 * not one of them (or not waiting for its ack) changes nothing. */
void svc_producer_ds_started(svc_service *, svc_producer *,
                             uint64_t instance_id);
/* The SMB (for tests): base and size, NULL before SetupTracing. */
uint8_t *svc_producer_smb(const svc_producer *, size_t *size,
                          size_t *page_size);

/* ---- sessions (svc_session.c) ---- */
/* EnableTracing by a consumer of uid `uid`. out_fd: owned by the session
 * from now on (-1 = none); with write_into_file it must be a regular file
 * open for writing. Without an fd, config.output_path is opened by the
 * service only when uid is the service's own uid (the service never
 * creates files for another user: that user's client opens the file and
 * passes the fd), and only as a regular file. */
svc_session *svc_session_enable_uid(svc_service *, void *consumer,
        uid_t uid, const Perfetto__Protos__TraceConfig *cfg, int out_fd,
        char *err, size_t errlen);
/* The same as the service's own uid (tests, embedders). */
svc_session *svc_session_enable(svc_service *, void *consumer,
        const Perfetto__Protos__TraceConfig *cfg, int out_fd,
        char *err, size_t errlen);
/* StartTracing: starts a deferred_start session (no-op if started). */
int svc_session_start(svc_service *, svc_session *);
/* Final flush, stop data sources, scrape; async (session_disabled op). */
int svc_session_disable(svc_service *, svc_session *);
/* timeout 0 = the session's flush_timeout_ms; result via flush_done. */
int svc_session_flush(svc_service *, svc_session *, uint32_t timeout_ms,
                      uint64_t flags, uint64_t token);
void svc_session_free(svc_service *, svc_session *);
/* Before a CloneSession: if the session it names (as in
 * svc_session_clone_uid) is started, flush its producers, as Perfetto
 * does, so that the clone holds what they wrote until now and not only
 * what they had committed (a chunk cut inside a packet waits for its
 * patches, which come with the commit). Returns 1 if a flush started, and
 * its end is reported through ops.clone_flush_done(token), possibly
 * before this returns; 0 if there is nothing to flush (clone at once). */
int svc_session_flush_for_clone(svc_service *, uid_t uid,
        uint64_t session_id, const char *unique_name, uint64_t token);
/* CloneSession by a consumer of uid `uid`: only sessions it may access
 * (svc_set_root_access) are candidates, its own first; anyone else's
 * session fails exactly like a missing one. */
svc_session *svc_session_clone_uid(svc_service *, void *consumer, uid_t uid,
        uint64_t session_id, const char *unique_name, char *err,
        size_t errlen);
/* The same for a trusted caller (tests, embedders; never a consumer's
 * request): no access check; the clone is the service's own uid's. */
svc_session *svc_session_clone(svc_service *, void *consumer,
        uint64_t session_id, const char *unique_name, char *err,
        size_t errlen);
uint64_t svc_session_id(const svc_session *);
void svc_session_uuid(const svc_session *, int64_t *msb, int64_t *lsb);
bool svc_session_is_disabled(const svc_session *);
/* STARTED (data sources started, not stopping yet, not a clone). */
bool svc_session_running(const svc_session *);
/* Every data source instance of the session has started (svc_start.c). */
bool svc_session_all_started(const svc_session *);
bool svc_session_writes_file(const svc_session *);
svc_session *svc_session_by_consumer(svc_service *, void *consumer);
size_t svc_session_count(const svc_service *);
/* Shutdown helpers: disable every running session / are all disabled? */
void svc_disable_all_sessions(svc_service *);
bool svc_all_sessions_disabled(const svc_service *);
/* Sessions not written to a file that are still held by a consumer. */
size_t svc_sessions_owing_reads(const svc_service *);

/* ---- triggers (svc_trigger.c) ---- */
/* ActivateTriggers from a producer (or a consumer acting as one): every
 * session whose trigger_config names a trigger reacts per its mode.
 * Returns how many (trigger, session) pairs matched. */
size_t svc_activate_triggers(svc_service *, const char *producer_name,
                             uid_t producer_uid, const char *const *names,
                             size_t n);
size_t svc_producer_activate_triggers(svc_service *, svc_producer *,
                                      const char *const *names, size_t n);
/* A clone made for a CLONE_SNAPSHOT trigger says so in its trace
 * (clone_snapshot_trigger packet). Strings copied. */
int svc_session_set_clone_trigger(svc_session *clone, const svc_trigger_hit *);
/* Triggers received by the session so far (for tests). */
size_t svc_session_triggers_received(const svc_session *);

/* ---- detach/attach, config changes, service state (svc_attach.c) ---- */
void svc_session_set_consumer_uid(svc_session *, uid_t);
uid_t svc_session_consumer_uid(const svc_session *);
const Perfetto__Protos__TraceConfig *svc_session_config(const svc_session *);
/* Detach: the session loses its consumer and survives it, found again by
 * (consumer uid, key). -EEXIST: that uid already detached a session under
 * key; -EINVAL: empty key or a clone. */
int svc_session_detach(svc_service *, svc_session *, const char *key);
/* Attach: the detached session of (uid, key) gets this consumer; NULL if
 * none. */
svc_session *svc_session_attach(svc_service *, void *consumer, uid_t uid,
                                const char *key);
/* ChangeTraceConfig: only producer_name_filter/_regex_filter of the data
 * sources already in the config change (as in Perfetto); producers that now
 * match get the data source. -EINVAL when the session is not running. */
int svc_session_change_config(svc_service *, svc_session *,
        const Perfetto__Protos__TraceConfig *cfg, char *err, size_t errlen);
/* The started session with the highest bugreport_score > 0 (lowest id on
 * a tie), for CloneSession(for_bugreport, id 0xFFFF...); 0 if none. */
uint64_t svc_bugreport_session_id(const svc_service *);

/* A deep copy of a protobuf-c message through its wire format, for one
 * that must outlive its owner (free with protobuf_c_message_free_unpacked
 * or the type's free_unpacked); NULL when out of memory. */
void *svc_pb_copy(const ProtobufCMessage *msg);

/* After svc_session_clone with the consumer's fd (owned from now on, -1
 * ok): if the source writes into a file, what it wrote so far is copied
 * into fd, read back through the source's own descriptor (refused when
 * that one is write-only), and the clone's buffers appended (returns 1,
 * was_write_into_file);
 * otherwise fd is closed and 0 returned (read the clone as usual). <0 with
 * err on failure (the clone should be freed). */
int svc_session_clone_file(svc_service *, svc_session *clone, int fd,
                           char *err, size_t errlen);
/* QueryServiceState: producers, their data sources (descriptors as
 * registered), the sessions `caller_uid` may see (all for root), version.
 * Caller frees with svc_query_free. NULL on no memory. */
struct Perfetto__Protos__TracingServiceState *svc_query_state(
        svc_service *, uid_t caller_uid, bool sessions_only);
void svc_query_free(struct Perfetto__Protos__TracingServiceState *);

/* ---- reading (svc_read.c) ---- */
/* Emits up to about max_bytes of packets (0 = no limit); *more = true if
 * it stopped early. The first pass adds the service's own packets; a pass
 * that drains everything ends with a TraceStats packet. */
int svc_session_read(svc_service *, svc_session *, size_t max_bytes,
                     svc_emit_fn, void *ctx, bool *more);
/* Read all and append to the session's file now (file mode). */
int svc_session_write_file(svc_service *, svc_session *);
/* One step of a file pass: at most max_bytes of packets (0 = no limit)
 * into the file, then *more says whether the pass has steps left (the
 * TraceStats packet ends the last one). Negative errno on failure. */
int svc_session_write_file_step(svc_service *, svc_session *,
                                size_t max_bytes, bool *more);
/* True while some session has a file pass with steps left: the caller
 * should call svc_tick again soon (next loop iteration) instead of waiting
 * for its next period. */
bool svc_has_pending_steps(const svc_service *);

/* ---- stats (svc_stats.c) ---- */
/* Caller frees with svc_stats_free. NULL on no memory. With a session,
 * writers not read yet get their sequence id now (writer_stats). What
 * anyone may know: producer and data source counts and the service's
 * reject counters; sessions, buffers and their stats only of sessions the
 * viewer may access (its session's uid; with no session, the service's
 * own uid). */
Perfetto__Protos__TraceStats *svc_stats_build(svc_service *, svc_session *);
/* The same for a consumer of uid `viewer` (GetTraceStats). */
Perfetto__Protos__TraceStats *svc_stats_build_for(svc_service *,
        svc_session *, uid_t viewer);
/* GetTraceStats of a write_into_file session (out_fd >= 0): adds
 * shmtrace_file, what the service wrote into its file (records, bytes,
 * flagged records; complete once the session has ended with every write
 * done, never for a clone, whose file starts with a copy). 0, or -ENOMEM
 * (st unchanged). Not for the trace's own stats packet. */
int svc_stats_add_file(Perfetto__Protos__TraceStats *st,
                       const svc_session *s);
void svc_stats_free(Perfetto__Protos__TraceStats *);

#endif /* SHMTRACE_SVC_SERVICE_H */
