/*
 * ipc.h - shmtrace's IPC layer: Perfetto's UNIX-socket IPC wire protocol.
 *
 * Internal (noinst) library ipc/libshmtrace_ipc.la, linked into libbuf.la
 * (the service, shmtraced) and libshm.la (the producer client). Prefix ipc_,
 * internal non-static helpers ipc__.
 *
 * Layers, bottom up (spec: ../shared/spec/wire-formats.md section 7):
 *
 *   ipc_loop     single-threaded poll() event loop: fd watches, one-shot and
 *                periodic timers, posted tasks (plus one thread-safe post).
 *   ipc_decoder  frame codec: 4-byte little-endian length N + N bytes of a
 *                serialized perfetto.protos.IPCFrame. The receive buffer is
 *                IPC_FRAME_MAX_BYTES (131072) bytes: a frame with 4 + N >
 *                131072 is a fatal connection error; N == 0 frames are
 *                ignored; frames that fail to parse are dropped (counted).
 *   ipc_chan     buffered non-blocking channel over an AF_UNIX SOCK_STREAM
 *                socket; SCM_RIGHTS fd passing: at most one fd per sendmsg(),
 *                sent with the first byte of the frame it belongs to; a
 *                received fd is kept until taken by the next method/reply
 *                handled (a newer fd replaces and closes an untaken one).
 *   ipc_host     the service side: listen, accept, BindService by name with a
 *                method table (ids 1-based in declaration order), dispatch
 *                InvokeMethod, replies / streamed replies / drop_reply,
 *                msg_request_error for frames that carry no request.
 *   ipc_client   the client side: connect, BindService, invoke methods by
 *                name with reply callbacks (streaming too), send one fd.
 *
 * Untrusted input: every byte read from a socket is hostile. Frames are
 * bounded before they are parsed, protobuf-c does the parsing, and every id
 * and index taken from a frame is looked up, never used as an offset.
 *
 * Threads: every object here belongs to the thread that runs its ipc_loop;
 * the only calls allowed from other threads are ipc_loop_post_threadsafe()
 * and ipc_loop_quit().
 *
 * Errors: functions returning int return 0 (or a non-negative value where
 * documented) or a negative errno code; ipc_strerror() prints them. A failed
 * call changes nothing.
 */
#ifndef SHMTRACE_IPC_H
#define SHMTRACE_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "ipc.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Constants                                                          */
/* ------------------------------------------------------------------ */

/* Perfetto's kIPCBufferSize: 4-byte header + frame must fit in it. */
#define IPC_FRAME_MAX_BYTES 131072u
#define IPC_FRAME_HEADER_BYTES 4u
/* Largest reply_proto/args_proto a sender should put in one frame: leaves
 * room for the IPCFrame envelope (request_id, tags, lengths). */
#define IPC_MAX_PAYLOAD_BYTES (IPC_FRAME_MAX_BYTES - 64u)
/* Bytes a channel may hold queued for a peer that does not read them. A
 * send that would go past it kills the channel (on_close with -ENOBUFS)
 * instead of growing without bound: a peer that keeps sending requests and
 * never reads the replies cannot make us buffer its replies forever.
 * Senders that stream (ReadBuffers) keep far below it by watching
 * ipc_chan_tx_queued_bytes(). */
#define IPC_CHAN_TX_MAX_BYTES (32u << 20)

/* Socket names (see ipc_sock_path()). */
#define IPC_PRODUCER_SOCK_ENV "PERFETTO_PRODUCER_SOCK_NAME"
#define IPC_CONSUMER_SOCK_ENV "PERFETTO_CONSUMER_SOCK_NAME"
#define IPC_PRODUCER_SOCK_BASENAME "shmtrace-producer.sock"
#define IPC_CONSUMER_SOCK_BASENAME "shmtrace-consumer.sock"

/* Service names as Perfetto spells them. */
#define IPC_PRODUCER_PORT "ProducerPort"
#define IPC_CONSUMER_PORT "ConsumerPort"

const char *ipc_strerror(int err);

/* Monotonic clock (CLOCK_MONOTONIC) in milliseconds. */
uint64_t ipc_now_ms(void);

/* ------------------------------------------------------------------ */
/* Event loop                                                         */
/* ------------------------------------------------------------------ */

typedef struct ipc_loop ipc_loop;

/* Called on the loop thread with the poll() revents of a watched fd. */
typedef void (*ipc_fd_fn)(ipc_loop *loop, int fd, short revents, void *ctx);
/* A timer or posted task. */
typedef void (*ipc_task_fn)(void *ctx);

/* Returns NULL with errno set on failure. */
ipc_loop *ipc_loop_create(void);
/* Frees the loop; watched fds are NOT closed (their owners close them).
 * Pending tasks and timers are dropped without running. NULL is a no-op. */
void ipc_loop_destroy(ipc_loop *loop);

/* Watch fd for events (POLLIN/POLLOUT). One watch per fd: -EEXIST if the fd
 * is watched already. Callbacks may add/remove watches (including their
 * own) and timers freely. */
int ipc_loop_watch_fd(ipc_loop *loop, int fd, short events, ipc_fd_fn fn,
                      void *ctx);
/* Change the events of a watched fd; -ENOENT if not watched. */
int ipc_loop_set_events(ipc_loop *loop, int fd, short events);
/* Stop watching fd (does not close it). Unknown fd: no-op. */
void ipc_loop_unwatch_fd(ipc_loop *loop, int fd);

/* Run fn after delay_ms, then every period_ms if period_ms != 0.
 * Returns a timer id > 0, or 0 when out of memory. */
uint64_t ipc_loop_add_timer(ipc_loop *loop, uint32_t delay_ms,
                            uint32_t period_ms, ipc_task_fn fn, void *ctx);
/* Cancel a timer (also from its own callback). Unknown id: no-op. */
void ipc_loop_cancel_timer(ipc_loop *loop, uint64_t timer_id);

/* Run fn on the next loop iteration (loop thread only). */
int ipc_loop_post(ipc_loop *loop, ipc_task_fn fn, void *ctx);
/* Same, from any thread; wakes the loop. */
int ipc_loop_post_threadsafe(ipc_loop *loop, ipc_task_fn fn, void *ctx);

/* One iteration: wait up to timeout_ms (-1: until something happens) for
 * fds/timers/tasks, dispatch them. Returns the number of callbacks run, or
 * a negative errno (poll failure other than EINTR). */
int ipc_loop_run_once(ipc_loop *loop, int timeout_ms);
/* Iterate until ipc_loop_quit(). Returns 0, or a negative errno. */
int ipc_loop_run(ipc_loop *loop);
/* Make ipc_loop_run() return after the current iteration. Thread-safe. */
void ipc_loop_quit(ipc_loop *loop);

/* ------------------------------------------------------------------ */
/* Frame codec                                                        */
/* ------------------------------------------------------------------ */

/* Serialize frame with its 4-byte LE length prefix into a malloc'd buffer
 * (*out, *out_len; caller frees). -EMSGSIZE if 4 + N > IPC_FRAME_MAX_BYTES,
 * -ENOMEM. */
int ipc_frame_pack(const Perfetto__Protos__IPCFrame *frame, uint8_t **out,
                   size_t *out_len);

/* Incremental decoder over a fixed IPC_FRAME_MAX_BYTES receive buffer. */
typedef struct ipc_decoder ipc_decoder;

ipc_decoder *ipc_decoder_create(void);
void ipc_decoder_destroy(ipc_decoder *dec);
/* Free space to recv() into: returns a pointer, *avail its size (0 only
 * when a fatal error was already reported by ipc_decoder_next()). */
uint8_t *ipc_decoder_write_ptr(ipc_decoder *dec, size_t *avail);
/* Account n bytes just written at ipc_decoder_write_ptr(). */
void ipc_decoder_commit(ipc_decoder *dec, size_t n);
/* Copy bytes in (tests, or callers without recv). -ENOBUFS if they do not
 * fit in the free space (call ipc_decoder_next() first). */
int ipc_decoder_feed(ipc_decoder *dec, const void *data, size_t len);
/* Pop the next complete frame. Returns 1 and a frame in *out (caller frees
 * with perfetto__protos__ipcframe__free_unpacked(*out, NULL)), 0 when more
 * bytes are needed, -EMSGSIZE when the next frame can never fit (fatal: the
 * connection must be closed; the decoder stays in the error state).
 * Empty (N == 0) and unparsable frames are skipped and counted. */
int ipc_decoder_next(ipc_decoder *dec, Perfetto__Protos__IPCFrame **out);
/* Frames skipped because they did not parse / were empty. */
uint64_t ipc_decoder_dropped_frames(const ipc_decoder *dec);
uint64_t ipc_decoder_empty_frames(const ipc_decoder *dec);
/* false if m or any message inside it carries field number 0 (invalid
 * protobuf that protobuf-c accepts in a multi-byte key but cannot re-parse
 * once re-packed). The decoder drops such frames; host and client refuse
 * such args / replies like undecodable ones. */
bool ipc_message_well_formed(const ProtobufCMessage *m);

/* ------------------------------------------------------------------ */
/* Channel (a connected socket speaking frames)                       */
/* ------------------------------------------------------------------ */

typedef struct ipc_chan ipc_chan;

typedef struct ipc_chan_cbs {
    /* A decoded frame; the channel frees it after the call returns. */
    void (*on_frame)(ipc_chan *chan, Perfetto__Protos__IPCFrame *frame,
                     void *ctx);
    /* The connection ended: err 0 = orderly EOF, else a negative errno
     * (-EMSGSIZE oversized frame, -ECONNRESET, ...). Called once; the
     * channel is dead afterwards but must still be destroyed by its owner
     * (ipc_chan_destroy() is allowed inside this callback). */
    void (*on_close)(ipc_chan *chan, int err, void *ctx);
} ipc_chan_cbs;

/* Take ownership of a connected stream socket (made non-blocking and
 * close-on-exec here) and start watching it. NULL with errno on failure
 * (the socket is then not closed). */
ipc_chan *ipc_chan_create(ipc_loop *loop, int sock_fd, const ipc_chan_cbs *cbs,
                          void *ctx);
/* Close the socket and free; callbacks never run afterwards. Safe inside
 * the channel's own callbacks. NULL is a no-op. */
void ipc_chan_destroy(ipc_chan *chan);
/* Queue a frame; fd >= 0 is dup()ed and passed with the frame's first byte
 * (the caller keeps its fd). -EMSGSIZE, -ENOMEM, -EPIPE (dead channel, or
 * the queue would pass IPC_CHAN_TX_MAX_BYTES: the channel is then killed,
 * on_close reports -ENOBUFS), -EBADF (bad fd). */
int ipc_chan_send(ipc_chan *chan, const Perfetto__Protos__IPCFrame *frame,
                  int fd);
/* Share a transmit budget with other channels: *used counts the bytes
 * all of them have queued; a send that would take it past max kills this
 * channel as the per-channel bound does (-ENOBUFS to on_close, -EPIPE to
 * the sender). NULL detaches (its queued bytes leave *used); the owner of
 * *used detaches every channel before freeing it. */
void ipc_chan_set_tx_budget(ipc_chan *chan, uint64_t *used, uint64_t max);
/* The fd received with the frames handled so far, or -1; the caller owns
 * it afterwards. */
int ipc_chan_take_fd(ipc_chan *chan);
/* Bytes queued but not yet accepted by the kernel. */
size_t ipc_chan_tx_queued_bytes(const ipc_chan *chan);
/* Peer credentials (SO_PEERCRED) read at creation; -1 when unknown. */
uid_t ipc_chan_peer_uid(const ipc_chan *chan);
pid_t ipc_chan_peer_pid(const ipc_chan *chan);
/* Frames the decoder dropped (unparsable or empty). */
uint64_t ipc_chan_dropped_frames(const ipc_chan *chan);

/* ------------------------------------------------------------------ */
/* Socket paths and sockets                                           */
/* ------------------------------------------------------------------ */

typedef enum ipc_sock_kind {
    IPC_SOCK_PRODUCER = 0,
    IPC_SOCK_CONSUMER = 1
} ipc_sock_kind;

/* Default socket directories (ipc_sock.c has the reasoning):
 *   root (euid 0):  IPC_SYSTEM_SOCK_DIR, a directory only root can write
 *                   ($SHMTRACE_SYSTEM_SOCK_DIR replaces it, for tests);
 *   any other user: $XDG_RUNTIME_DIR when it is an absolute path to a
 *                   directory of that user that nobody else can write, else
 *                   /tmp/shmtrace-<uid>, created mode 0700. */
#define IPC_SYSTEM_SOCK_DIR "/run/shmtrace"
#define IPC_SYSTEM_SOCK_DIR_ENV "SHMTRACE_SYSTEM_SOCK_DIR"

/* Client side: resolve the socket name, first match wins:
 *   1. override (a --flag value) if non-NULL and non-empty;
 *   2. $PERFETTO_PRODUCER_SOCK_NAME / $PERFETTO_CONSUMER_SOCK_NAME;
 *   3. root: <system dir>/shmtrace-{producer,consumer}.sock;
 *      others: the socket in their own default directory if it exists,
 *      else the system one if that exists, else their own.
 * A name starting with '@' is a Linux abstract socket (as in Perfetto).
 * -ENAMETOOLONG if it does not fit sockaddr_un (or out_len). */
int ipc_sock_path(ipc_sock_kind kind, const char *override, char *out,
                  size_t out_len);
/* Service side: the name a daemon of this euid listens on: override, the
 * environment, else the socket in its default directory (see above), which
 * is created if missing and must then be a directory owned by the euid
 * that neither group nor others can write (else -EPERM: someone may have
 * squatted it). err (if errlen) gets a message on failure. */
int ipc_sock_service_path(ipc_sock_kind kind, const char *override,
                          char *out, size_t out_len, char *err,
                          size_t errlen);
/* Bind and listen on path with the given mode (0660 producer, 0600
 * consumer). The socket is created with that mode (umask), never chmod()ed
 * by name afterwards. If path exists: a live listener answers connect() ->
 * refuse with -EADDRINUSE; otherwise the stale socket is unlinked and
 * replaced. Refuses (-EEXIST) to unlink something that is not a socket.
 * Returns a non-blocking close-on-exec fd, or a negative errno. */
int ipc_sock_listen(const char *path, mode_t mode);
/* Connect to path; returns a connected, non-blocking, close-on-exec fd or a
 * negative errno (-ENOENT / -ECONNREFUSED: no service). No trust check:
 * see ipc_sock_check_peer(). */
int ipc_sock_connect(const char *path);
/* The client's trust rule: the process that listens at the other end of a
 * connected socket (SO_PEERCRED) must be root or our own euid. 0 if so,
 * -EPERM if not (*peer_uid, if non-NULL, gets its uid either way), or the
 * getsockopt error. ipc_client_connect() applies it. */
int ipc_sock_check_peer(int fd, uid_t *peer_uid);
/* A message for a failed connect to path (err from ipc_client_connect() or
 * ipc_sock_connect()); for -EPERM it names the untrusted daemon's uid. */
void ipc_sock_describe_error(const char *path, int err, char *out,
                             size_t out_len);

/* ------------------------------------------------------------------ */
/* Output files (ipc_file.c)                                          */
/* ------------------------------------------------------------------ */

/* Open path to write a trace into: create it (mode 0600) or truncate an
 * existing regular file; anything else at path (symlink, directory,
 * device, FIFO, socket) is refused with -EEXIST and left untouched.
 * read_back: O_RDWR instead of O_WRONLY. Returns a close-on-exec fd, or a
 * negative errno with a message in err. */
int ipc_file_open_output(const char *path, bool read_back, char *err,
                         size_t errlen);
/* 0 if fd is a regular file (or /dev/null) open for writing; else a
 * negative errno and a message naming `what` in err. For fds a client
 * passes to the service: a FIFO, socket or terminal could block it. */
int ipc_file_check_fd(int fd, const char *what, char *err, size_t errlen);
/* For an fd another user passes to the service, before anything touches
 * it (ipc_file.c says why): -EPERM with a message naming `what` if it is
 * on a FUSE file system, else 0 (also when /proc cannot tell). */
int ipc_file_check_not_fuse(int fd, const char *what, char *err,
                            size_t errlen);
/* The type of the file system fd lives on ("ext4", "fuse.sshfs") from
 * /proc, without asking that file system: 0, or a negative errno. */
int ipc_file_fstype(int fd, char *out, size_t len);
bool ipc_file_fstype_is_fuse(const char *fstype);
/* "a directory", "a character device", ... for messages. */
const char *ipc_file_kind(mode_t mode);

/* ------------------------------------------------------------------ */
/* Host (service side)                                                */
/* ------------------------------------------------------------------ */

typedef struct ipc_host ipc_host;
typedef struct ipc_conn ipc_conn; /* one connected client */
typedef struct ipc_call ipc_call; /* one InvokeMethod awaiting replies */

/* A method handler. args is the request decoded with the method's
 * args_desc (or NULL when args_desc is NULL: see ipc_call_args_raw()); it is
 * freed when the handler returns. The handler replies now or later with
 * ipc_call_reply*() / ipc_call_fail(); until the final reply the call stays
 * valid, at most until the service's on_disconnect for its connection
 * returns (the host then frees every unfinished call of the connection). */
typedef void (*ipc_method_fn)(ipc_call *call, const ProtobufCMessage *args,
                              void *svc_ctx);

typedef struct ipc_method {
    const char *name;                             /* e.g. "CommitData" */
    const ProtobufCMessageDescriptor *args_desc;  /* request type */
    ipc_method_fn fn;
} ipc_method;

/* Method ids are the 1-based index in methods[] (declaration order). */
typedef struct ipc_service {
    const char *name;                /* "ProducerPort", "ConsumerPort" */
    const ipc_method *methods;
    uint32_t n_methods;
    /* A connection that bound this service went away (peer closed, fatal
     * frame, ipc_conn_close(), host destroyed). Drop every ipc_call of this
     * connection here. May be NULL. */
    void (*on_disconnect)(ipc_conn *conn, void *svc_ctx);
} ipc_service;

/* Listen on path (see ipc_sock_listen()) and serve on loop. NULL on
 * failure with *err (if non-NULL) set to a negative errno. */
ipc_host *ipc_host_create(ipc_loop *loop, const char *path, mode_t mode,
                          int *err);
/* Serve on an already listening socket (ownership taken on success). */
ipc_host *ipc_host_create_from_fd(ipc_loop *loop, int listen_fd, int *err);
/* Disconnect every client (on_disconnect runs), close the listening socket,
 * unlink the path it created. NULL is a no-op. */
void ipc_host_destroy(ipc_host *host);
/* Make svc (which must outlive the host) bindable. -EEXIST for a duplicate
 * name, -EINVAL for a bad table. */
int ipc_host_expose_service(ipc_host *host, const ipc_service *svc,
                            void *svc_ctx);
/* Serve an already connected socket as if accepted (tests, socketpair);
 * ownership taken on success. */
int ipc_host_adopt_client(ipc_host *host, int sock_fd);
/* Connected clients right now. */
size_t ipc_host_num_conns(const ipc_host *host);
/* Admission (ipc_host.c says how a refused peer is told). A host serves at
 * most IPC_HOST_MAX_CONNS connections, and at most n of one peer uid
 * (0, the default: no per-uid limit). */
#define IPC_HOST_MAX_CONNS 1024u
void ipc_host_set_max_conns_per_uid(ipc_host *host, uint32_t n);
/* The last n of the IPC_HOST_MAX_CONNS are kept for peers of uid a or b
 * (a daemon passes root and its own uid), so that its owner can still
 * get in when other users together hold the rest. 0, the default: none
 * kept. */
void ipc_host_set_reserved_conns(ipc_host *host, uint32_t n, uid_t a,
                                 uid_t b);
/* Told of every connection refused (a limit, or no descriptors left:
 * dropped false, why is what the peer was sent) and of every connection
 * dropped because it did not read its replies (a transmit bound: dropped
 * true), with the peer's uid ((uid_t)-1 if unknown); e.g. to log it. */
typedef void (*ipc_refused_fn)(void *ctx, uid_t uid, bool dropped,
                               const char *why);
void ipc_host_set_refused_cb(ipc_host *host, ipc_refused_fn fn, void *ctx);
/* Connections refused so far. */
uint64_t ipc_host_refused(const ipc_host *host);
/* The replies queued for all connections of one peer uid share a budget
 * (ipc_chan_set_tx_budget): a uid whose connections do not read cannot
 * make the host hold more than this many bytes for it; the connection
 * whose reply would pass it is dropped. 0 restores the default. */
#define IPC_HOST_TX_MAX_BYTES_PER_UID (256u << 20)
void ipc_host_set_tx_max_per_uid(ipc_host *host, uint64_t bytes);

/* Reply to a call. has_more = true keeps the call open (streaming); the
 * final reply (has_more = false) frees it. reply may be NULL (empty reply
 * payload). ipc_call_reply_fd() also passes fd (dup()ed, caller keeps it).
 * -EMSGSIZE if the frame would exceed IPC_FRAME_MAX_BYTES (nothing sent,
 * the call stays open). With drop_reply the reply is discarded and 0 is
 * returned. */
int ipc_call_reply(ipc_call *call, const ProtobufCMessage *reply,
                   bool has_more);
int ipc_call_reply_fd(ipc_call *call, const ProtobufCMessage *reply,
                      bool has_more, int fd);
/* Final reply with success = false; frees the call. */
void ipc_call_fail(ipc_call *call);
ipc_conn *ipc_call_conn(const ipc_call *call);
/* The fd that arrived with (or before) this request, or -1; caller owns. */
int ipc_call_take_fd(ipc_call *call);
/* Raw args_proto bytes (valid during the handler only). */
const uint8_t *ipc_call_args_raw(const ipc_call *call, size_t *len);
uint64_t ipc_call_request_id(const ipc_call *call);
bool ipc_call_drop_reply(const ipc_call *call);

/* Connection facts. Credentials come from SO_PEERCRED, never from
 * messages; -1 if the platform did not tell. */
uid_t ipc_conn_uid(const ipc_conn *conn);
pid_t ipc_conn_pid(const ipc_conn *conn);
uint64_t ipc_conn_id(const ipc_conn *conn); /* unique per host, from 1 */
void ipc_conn_set_data(ipc_conn *conn, void *data);
void *ipc_conn_data(const ipc_conn *conn);
size_t ipc_conn_tx_queued_bytes(const ipc_conn *conn);
uint64_t ipc_conn_dropped_frames(const ipc_conn *conn);
/* Drop the connection (e.g. a misbehaving producer). Deferred to the next
 * loop iteration, so it is safe inside handlers; on_disconnect runs then. */
void ipc_conn_close(ipc_conn *conn);

/* ------------------------------------------------------------------ */
/* Client                                                             */
/* ------------------------------------------------------------------ */

typedef struct ipc_client ipc_client;

typedef struct ipc_client_cbs {
    /* BindService answered: ok = the service exists. */
    void (*on_bound)(ipc_client *client, bool ok, void *ctx);
    /* Connection lost (err 0 = EOF, else negative errno). Pending reply
     * callbacks have already been called with -ECONNRESET. The client must
     * still be destroyed (allowed inside this callback). */
    void (*on_disconnect)(ipc_client *client, int err, void *ctx);
} ipc_client_cbs;

/* A reply (or the failure of a call). status: 0 ok (reply decoded with the
 * reply descriptor given at invoke, NULL if none given), -EPROTO the host
 * answered success = false or request_error, -EBADMSG undecodable reply,
 * -ECONNRESET the connection went away. has_more: more replies follow
 * (streaming); the callback is not called again once has_more is false or
 * status < 0. reply is freed after the callback returns. */
typedef void (*ipc_reply_fn)(ipc_client *client, int status,
                             const ProtobufCMessage *reply, bool has_more,
                             void *ctx);

/* Connect to path and send BindService(service_name). NULL with *err;
 * -EPERM when the daemon at path is neither root nor our euid
 * (ipc_sock_check_peer; ipc_sock_describe_error words it). */
ipc_client *ipc_client_connect(ipc_loop *loop, const char *path,
                               const char *service_name,
                               const ipc_client_cbs *cbs, void *ctx,
                               int *err);
/* Same over an already connected socket (ownership taken, also on
 * failure). */
ipc_client *ipc_client_create_from_fd(ipc_loop *loop, int sock_fd,
                                      const char *service_name,
                                      const ipc_client_cbs *cbs, void *ctx,
                                      int *err);
/* Close without calling any callback. Safe inside callbacks. NULL no-op. */
void ipc_client_destroy(ipc_client *client);
bool ipc_client_is_bound(const ipc_client *client);
bool ipc_client_is_connected(const ipc_client *client);
/* Why the host refused this connection, as it said (printable ASCII), or
 * NULL: set before on_disconnect when the host turned us away. */
const char *ipc_client_refusal(const ipc_client *client);
/* Whether the bound service has this method. */
bool ipc_client_has_method(const ipc_client *client, const char *method);

/* Invoke method (by the name Perfetto uses) with args (NULL = empty), fd
 * (>= 0: dup()ed and passed with the frame). cb NULL sends drop_reply.
 * reply_desc decodes replies for cb. Returns the request id (> 0) or
 * -ENOTCONN (not bound yet / disconnected), -ENOENT (no such method),
 * -EMSGSIZE, -ENOMEM. */
int64_t ipc_client_invoke(ipc_client *client, const char *method,
                          const ProtobufCMessage *args, int fd,
                          const ProtobufCMessageDescriptor *reply_desc,
                          ipc_reply_fn cb, void *cb_ctx);
/* Same with args already serialized (args_len bytes at args; may be 0). */
int64_t ipc_client_invoke_raw(ipc_client *client, const char *method,
                              const uint8_t *args, size_t args_len, int fd,
                              const ProtobufCMessageDescriptor *reply_desc,
                              ipc_reply_fn cb, void *cb_ctx);
/* The fd received with the replies handled so far (e.g. the SMB fd with
 * SetupTracing), or -1; caller owns it. Call it from the reply callback. */
int ipc_client_take_fd(ipc_client *client);
size_t ipc_client_tx_queued_bytes(const ipc_client *client);
uint64_t ipc_client_dropped_frames(const ipc_client *client);
/* Raw frame for tests that speak the wire directly (-ENOTCONN, -EMSGSIZE). */
int ipc_client_send_raw_frame(ipc_client *client,
                              const Perfetto__Protos__IPCFrame *frame, int fd);

#ifdef __cplusplus
}
#endif
#endif /* SHMTRACE_IPC_H */
