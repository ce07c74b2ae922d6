/*
 * consumer_client.h - a small synchronous ConsumerPort client (cons_*) and
 * a Perfetto trace-file writer, shared by the `shmtrace` CLI and the
 * inspector's --live mode (noinst library tools/libshmtrace_consumer.la).
 *
 * Each cons_client is one connection bound to "ConsumerPort" (the service
 * ties a session to the connection: closing it frees the session). Calls
 * are synchronous: they run the client's private ipc_loop until the reply
 * arrives, the connection drops or CONS_REPLY_TIMEOUT_MS pass. The
 * EnableTracing reply arrives only when the session ends; cons_enable()
 * returns once the request is sent and cons_ended() reports the end.
 *
 * Trace files (wire-formats.md section 1): a concatenation of Trace.packet
 * records, `0A <varint len> <TracePacket bytes>`, no header or footer.
 * cons_out_* writes them (buffered) and, reading only the top-level fields
 * of each packet (the bytes came from the service but are still parsed
 * defensively), counts packets that carry previous_packet_dropped != 0 and
 * keeps the last trace_stats packet for the loss summary.
 *
 * Threads: a cons_client and a cons_out belong to one thread.
 * Errors: 0 or a negative errno (-ENOTCONN: connection lost, -ETIMEDOUT,
 * -EPROTO: the service answered with a failure, -EIO: write error).
 */
#ifndef SHMTRACE_CONSUMER_CLIENT_H
#define SHMTRACE_CONSUMER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.pb-c.h"
#include "config.pb-c.h"

#define CONS_REPLY_TIMEOUT_MS 60000
/* Largest packet we reassemble from ReadBuffers slices. */
#define CONS_MAX_PACKET_BYTES (64u * 1024 * 1024)

typedef struct cons_client cons_client;

/* Connect to the consumer socket (override, else $PERFETTO_CONSUMER_SOCK_NAME,
 * else the default) and bind ConsumerPort. NULL with *err set. */
cons_client *cons_connect(const char *socket_override, int *err);
void cons_destroy(cons_client *c);
/* The resolved socket path (for messages). */
const char *cons_socket_path(const cons_client *c);

/* EnableTracing(cfg); fd >= 0 is passed along (write_into_file). */
int cons_enable(cons_client *c, const Perfetto__Protos__TraceConfig *cfg,
                int fd);
/* EnableTracing with an already encoded TraceConfig, sent byte for byte. */
int cons_enable_raw(cons_client *c, const uint8_t *cfg, size_t len, int fd);
/* QueryServiceState: the names of the registered data sources (deduplicated,
 * malloc'd array of malloc'd strings, free with cons_free_names). -EPROTO
 * if the service does not implement it. */
int cons_query_data_sources(cons_client *c, char ***names, size_t *n);
void cons_free_names(char **names, size_t n);
/* Whether the session ended (EnableTracing answered or the connection
 * dropped); *error gets the service's error text or NULL. */
bool cons_ended(const cons_client *c, const char **error);
/* Whether it ended because the connection to the service dropped (the
 * error is then our own words for that, not the service's). */
bool cons_ended_by_disconnect(const cons_client *c);
/* Run the loop for up to timeout_ms (returns early on any event). */
void cons_poll(cons_client *c, int timeout_ms);

int cons_disable(cons_client *c);
/* Flush (timeout_ms 0 = the session's flush_timeout_ms). -EPROTO if the
 * service reports that not every producer acked. */
int cons_flush(cons_client *c, uint32_t timeout_ms);
/* Per reassembled packet; return < 0 to stop reading (that error is
 * returned by cons_read). */
typedef int (*cons_packet_fn)(const uint8_t *packet, size_t len, void *ctx);
/* ReadBuffers: stream every packet currently readable to fn. */
int cons_read(cons_client *c, cons_packet_fn fn, void *ctx);
int cons_free_buffers(cons_client *c);
/* GetTraceStats; *out to free with perfetto__protos__trace_stats__
 * free_unpacked(*out, NULL). */
int cons_get_stats(cons_client *c, Perfetto__Protos__TraceStats **out);
/* CloneSession by id (UINT64_MAX: let the service pick) or by
 * unique_session_name (name != NULL). The clone becomes this client's
 * session: cons_read it, then cons_free_buffers. err gets the service's
 * message on -EPROTO. */
int cons_clone(cons_client *c, uint64_t session_id, const char *name,
               char *err, size_t err_len);

/* ---- trace file writer -------------------------------------------- */

typedef struct cons_out {
    int fd;
    uint64_t bytes;            /* written, records included */
    uint64_t packets;
    uint64_t flagged_packets;  /* previous_packet_dropped != 0 */
    uint64_t malformed;        /* packets whose top level did not parse */
    Perfetto__Protos__TraceStats *last_stats; /* last trace_stats seen */
    int error;                 /* first write error (negative errno) */
    uint8_t *buf;
    size_t buf_len, buf_cap;
    uint64_t scanned;          /* cons_out_scan_*: bytes of whole records
                                  counted so far (0: none) */
} cons_out;

/* Start writing to fd (not closed by cons_out_fini). */
int cons_out_init(cons_out *o, int fd);
/* cons_packet_fn-compatible: append one packet record. */
int cons_out_packet(const uint8_t *packet, size_t len, void *out);
/* Write buffered bytes; returns o->error. */
int cons_out_flush(cons_out *o);
void cons_out_fini(cons_out *o);
/* Count the packets of an existing trace file (e.g. one the service wrote
 * with write_into_file) into o, without writing: packets, bytes,
 * flagged_packets, malformed, last_stats; from o->scanned on (what
 * cons_out_scan_follow counted already; 0: from the start, counts reset).
 * -EBADMSG if a record is broken or cut (counting stops there), -EIO if
 * the file shrank while being scanned, or the read error. A file of
 * large records is walked by its headers, its bodies unread (cons_scan.c).
 */
int cons_out_scan_fd(cons_out *o, int fd);
/* The same with read() of every byte (small records; tests). */
int cons_out_scan_fd_read(cons_out *o, int fd);
/* The same on a file still being written: counts the whole records up to
 * its end of the moment and leaves an incomplete last one for the next
 * call (or the final cons_out_scan_fd). */
int cons_out_scan_follow(cons_out *o, int fd);
/* Instead of a scan: the service's own count of the file it wrote
 * (st->shmtrace_file, shmtraced's GetTraceStats), taken into o when it is
 * that of the finished file as it lies here: complete (the session ended
 * and every write succeeded), file_size bytes, and consistent. True if
 * taken; otherwise o is unchanged and the file must be scanned. */
bool cons_out_take_file_counts(cons_out *o,
                               const Perfetto__Protos__TraceStats *st,
                               uint64_t file_size);

/* Sum of the losses in a TraceStats (for the one-line summary). */
typedef struct cons_losses {
    uint64_t chunks_overwritten;
    uint64_t chunks_discarded;   /* buffer-level + service-level */
    uint64_t abi_violations;
    uint64_t trace_writer_packet_loss;
    uint64_t patches_failed;
    uint64_t invalid_packets;
    uint64_t bytes_written;
} cons_losses;
void cons_losses_from_stats(const Perfetto__Protos__TraceStats *st,
                            cons_losses *out);

/* The message of a failed connect, with the socket path and strerror:
 * every program says it the same way (and tests grep for it). */
#define CONS_NO_SERVICE_FMT \
    "cannot connect to the tracing service at %s: %s (is shmtraced " \
    "running? see --socket)"
/* A failed connect's rc that says nothing about the service: this process
 * ran out of descriptors (-EMFILE, -ENFILE) or memory (-ENOMEM, -ENOBUFS)
 * before it could reach it (cli_local_limit_hint, cli_exit.h). Programs
 * exit CLI_EXIT_FAIL for these, not CLI_EXIT_NO_SERVICE, and do not ask
 * whether shmtraced is running. */
bool cons_connect_failure_is_local(int rc);
/* The words for cons_connect's failure rc, into msg: CONS_NO_SERVICE_FMT;
 * CLI_LOCAL_LIMIT_FMT for a local limit (above); a daemon of another user
 * holding the socket (-EPERM); or the service's own reason when it
 * refused the connection (-ECONNREFUSED after a refusal: too many
 * connections of this uid, no descriptors left). */
void cons_connect_error(const char *socket_override, int rc, char *msg,
                        size_t len);
/* The same words for a failed connect to the socket at path, with the
 * service's refusal (NULL or "" if none): for any socket, the producer
 * one too (shmtrace trigger). */
void cons_describe_connect_failure(const char *path, int rc,
                                   const char *refused, char *msg,
                                   size_t len);

/* Clone a running session into a trace file at path (created/truncated):
 * connect, CloneSession, ReadBuffers, FreeBuffers. For `shmtrace clone`
 * and the inspector's --live. The file appears only if the whole clone
 * was read (a failure leaves none, and an older file at path intact).
 * *result (may be NULL) gets the counts; err the message. *unreachable
 * (may be NULL) is set when the failure was reaching the service: no
 * socket or no one listening, a daemon of another user we will not talk
 * to, or one that refused the connection (cons_connect_error's cases);
 * it is false for every later failure. */
int cons_clone_to_file(const char *socket_override, uint64_t session_id,
                       const char *name, const char *path, cons_out *result,
                       bool *unreachable, char *err, size_t err_len);

#endif /* SHMTRACE_CONSUMER_CLIENT_H */
