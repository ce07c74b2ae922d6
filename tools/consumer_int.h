/*
 * consumer_int.h - internals of the consumer client shared by
 * consumer_client.c and consumer_ext.c (detach/attach, query, events,
 * triggers): the connection state and the synchronous call helpers.
 */
#ifndef SHMTRACE_CONSUMER_INT_H
#define SHMTRACE_CONSUMER_INT_H

#include "consumer_client.h"
#include "ipc.h"

struct cons_client {
    ipc_loop *loop;
    ipc_client *ipc;
    char path[108];
    bool bound_done, bound_ok;
    bool disconnected;
    bool enable_sent, ended;
    bool end_lost;     /* it ended because the connection dropped */
    char *end_error;
    /* ObserveEvents (consumer_ext.c): clone trigger hits not taken yet */
    bool observing;
    struct cons_clone_hit *hits;
    size_t nhits;
    bool all_started;
};

typedef struct call {
    bool done;
    int status;
    ProtobufCMessage *reply;  /* kept (unpacked copy) when wanted */
    bool keep_reply;
    /* ReadBuffers */
    cons_packet_fn fn;
    void *ctx;
    uint8_t *pkt;
    size_t pkt_len, pkt_cap;
    bool pkt_overflow;
    int cb_error;
} call;

/* Run the loop until *flag, a disconnect, or CONS_REPLY_TIMEOUT_MS. */
int cons__wait_flag(cons_client *c, const bool *flag);
/* Invoke and wait for the final reply (k->keep_reply: copy it). */
int cons__invoke_sync(cons_client *c, const char *method,
                      const ProtobufCMessage *args, int fd,
                      const ProtobufCMessageDescriptor *reply_desc, call *k);
/* The EnableTracing reply: the session ended. */
void cons__on_enable_reply(ipc_client *ic, int status,
                           const ProtobufCMessage *msg, bool has_more,
                           void *ctx);

/* consumer_ext.c: frees what the extensions keep in the client. */
void cons__ext_free(cons_client *c);

/* Counts one packet's flag (42) / malformed state and keeps its
 * TraceStats (35) into o (cons_scan.c, for cons_out_packet). */
void cons__scan_packet(cons_out *o, const uint8_t *p, size_t len);
/* Test hooks of cons_out_scan_fd: called when a file of large records is
 * walked by its headers (NULL in the product); the bytes read per pread()
 * of that walk (4 KiB). */
extern void (*cons__scan_sparse_hook)(int fd);
extern size_t cons__scan_window;
/* cons_out_scan_fd's walk by headers, whatever the file, with a window of
 * `window` bytes (0: the product's), for fuzz_scan to hold against
 * cons_out_scan_fd_read. */
int cons__scan_fd_sparse(cons_out *o, int fd, size_t window);

#endif /* SHMTRACE_CONSUMER_INT_H */
