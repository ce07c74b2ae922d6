/*
 * svc_ipc_int.h - private state shared by shmtraced's IPC glue:
 * svc_ipc.c (the daemon: hosts, tick, shutdown), svc_ipc_producer.c
 * (ProducerPort) and svc_ipc_consumer.c (ConsumerPort).
 *
 * Per-connection state hangs off ipc_conn_set_data():
 *   svc_pconn  producer: its svc_producer (after InitializeConnection), the
 *              open GetAsyncCommand call, and commands queued before that
 *              call arrived (packed GetAsyncCommandResponse + optional fd).
 *   svc_cconn  consumer: its session, the pending EnableTracing call (its
 *              reply is sent when the session ends), pending Flush calls
 *              (by token), and the ReadBuffers pump.
 *
 * Method ids are the 1-based table index (wire-formats.md §8, §9).
 * Unimplemented methods answer success = false.
 */
#ifndef SHMTRACE_SVC_IPC_INT_H
#define SHMTRACE_SVC_IPC_INT_H

#include "svc_ipc.h"

#define SVC_REPLY_BYTES (IPC_MAX_PAYLOAD_BYTES - 1024u)
#define SVC_SLICE_OVERHEAD 16u
#define SVC_READ_ROUND (4u << 20)
#define SVC_TX_HIGH (4u << 20)
#define SVC_TICK_MS 10u
#define SVC_SHUTDOWN_GRACE_MS 15000u

/* Bounds on what one peer can make the daemon hold. */
#define SVC_MAX_PENDING_FLUSHES 64    /* per consumer connection */
/* Commands queued for a producer without GetAsyncCommand: at most this
 * many, and this many bytes (packed), per connection; past either it is
 * dropped (svc_ipc_producer.c). */
#define SVC_MAX_QUEUED_CMDS      4096
#define SVC_MAX_QUEUED_CMD_BYTES (4u << 20)
/* ... and all the producer connections of one uid together at most this
 * many bytes (a uid may have SVC_MAX_CONNS_PER_UID connections: 512 times
 * the bound of one was 2 GiB of daemon heap). */
#define SVC_MAX_QUEUED_CMD_BYTES_PER_UID (16u << 20)

/* Bytes of commands queued for the producer connections of one uid. */
typedef struct {
    uid_t uid;
    size_t bytes;
} svc_uid_queued;

typedef struct svc_cmd {
    uint8_t *data;
    size_t len;
    int fd;
    uint64_t instance_id;        /* Setup/StartDataSource's; 0 otherwise */
} svc_cmd;

typedef struct {
    svc_daemon *d;
    ipc_conn *conn;
    svc_producer *p;
    ipc_call *async_call;
    svc_cmd *queue;
    size_t nqueue;
    size_t queue_bytes;          /* sum of queue[].len */
    bool queue_overflowed;       /* dropped for it; close pending */
} svc_pconn;

typedef struct {
    uint64_t token;
    ipc_call *call;
} svc_pending_flush;

typedef struct {
    svc_daemon *d;
    ipc_conn *conn;
    svc_session *s;
    ipc_call *enable_call;
    svc_pending_flush *flushes;
    size_t nflushes;
    uint64_t next_token;
    /* ReadBuffers pump */
    ipc_call *read_call;
    uint64_t read_timer;
    uint8_t *batch;              /* SVC_REPLY_BYTES */
    size_t batch_len;
    size_t *slice_len;
    bool *slice_last;
    size_t nslices, cap_slices;
    int read_err;
    /* ObserveEvents stream (svc_ipc_consumer_ext.c) */
    ipc_call *observe_call;
    uint32_t observe_mask;       /* 1 << ObservableEvents.Type */
    /* a CloneSession waiting for its source's flush (svc_ipc_consumer.c) */
    ipc_call *clone_call;
    Perfetto__Protos__CloneSessionRequest *clone_req;   /* a copy */
    int clone_fd;
    uint64_t clone_id;           /* session id (UINT64_MAX: by name) */
    uint64_t clone_token;
    uint64_t clone_timer;        /* clone_finish is due */
    bool clone_gone;             /* the source was freed meanwhile */
} svc_cconn;

/* Refused connections of one socket, logged at most once a second. */
typedef struct {
    const char *socket;          /* "producer", "consumer" */
    uint64_t last_log_ms;
    uint64_t unlogged;           /* refused since that line */
} svc_refusal_log;

struct svc_daemon {
    ipc_loop *loop;
    ipc_host *phost, *chost;
    svc_refusal_log prefused, crefused;
    svc_service *svc;
    uint64_t tick_timer;
    uint64_t step_timer;         /* a zero-delay tick posted while a file
                                    pass has steps left; 0 = none */
    bool shutting_down;
    uint64_t shutdown_deadline_ms;
    int fw_fd;                   /* the writer thread's eventfd, watched;
                                    -1 = none */
    svc_cconn **clones;          /* consumers whose clone waits for a flush */
    size_t nclones;
    svc_uid_queued *uid_queued;  /* uids with queued producer commands */
    size_t nuid_queued;
    uint64_t next_clone_token;
};

/* The two ports (svc_ipc_producer.c, svc_ipc_consumer.c). */
extern const ipc_service svc__producer_port;
extern const ipc_service svc__consumer_port;

/* svc_ops callbacks of the service core (svc_service.h), per port. */
int svc__op_setup_tracing(void *ctx, void *conn, int fd, uint32_t page_kb);
int svc__op_setup_ds(void *ctx, void *conn, uint64_t id,
                     const Perfetto__Protos__DataSourceConfig *cfg);
int svc__op_start_ds(void *ctx, void *conn, uint64_t id,
                     const Perfetto__Protos__DataSourceConfig *cfg);
int svc__op_stop_ds(void *ctx, void *conn, uint64_t id);
int svc__op_flush(void *ctx, void *conn, const uint64_t *ids, size_t n,
                  uint64_t flush_id, uint64_t flags);
void svc__op_session_disabled(void *ctx, void *consumer, svc_session *s,
                              const char *error);
void svc__op_flush_done(void *ctx, void *consumer, uint64_t token, bool ok);
int svc__op_clear_incremental(void *ctx, void *conn, const uint64_t *ids,
                              size_t n);
void svc__op_clone_trigger_hit(void *ctx, void *consumer, uint64_t tsid,
                               const svc_trigger_hit *hit);
void svc__op_all_ds_started(void *ctx, void *consumer, svc_session *s);
void svc__op_clone_flush_done(void *ctx, uint64_t token, bool source_gone);

/* svc_ipc_consumer.c helpers shared with svc_ipc_consumer_ext.c */
svc_cconn *svc__cconn_get(svc_daemon *d, ipc_call *call);
void svc__send_disabled(svc_cconn *cc, const char *error);
void svc__read_finish(svc_cconn *cc, bool ok);

/* svc_ipc_consumer_ext.c: Detach/Attach, ChangeTraceConfig, ObserveEvents,
 * QueryServiceState, SaveTraceForBugreport, clone trigger extras. */
void svc__c_detach(ipc_call *, const ProtobufCMessage *, void *);
void svc__c_attach(ipc_call *, const ProtobufCMessage *, void *);
void svc__c_change_config(ipc_call *, const ProtobufCMessage *, void *);
void svc__c_observe(ipc_call *, const ProtobufCMessage *, void *);
void svc__c_query(ipc_call *, const ProtobufCMessage *, void *);
void svc__c_bugreport(ipc_call *, const ProtobufCMessage *, void *);
void svc__attach_notification(svc_cconn *cc, ipc_call *enable_call);
void svc__clone_extras(svc_cconn *cc,
                       const Perfetto__Protos__CloneSessionRequest *req);
/* A consumer connection goes away: its ObserveEvents call is freed by the
 * host (nothing to do but forget it). */

/* Replies success with an empty message of the method's reply type. */
void svc__reply_empty(ipc_call *call);

#endif /* SHMTRACE_SVC_IPC_INT_H */
