/*
 * producer_int.h - private state of libshm's producer IPC client
 * (producer_client.c: thread, connection, commands; producer_commit.c: the
 * transport seam that turns arbiter batches into CommitData IPCs).
 *
 * Locking: prod_producer.mu guards the fields marked (mu). It is never held
 * while calling into an arbiter or a writer (the arbiter calls our
 * transport with ITS mutex held, and the transport takes mu: holding mu
 * around an arbiter call would invert that order). Fields marked (loop) are
 * touched only by the library thread.
 */
#ifndef SHMTRACE_PRODUCER_INT_H
#define SHMTRACE_PRODUCER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/un.h>

#include <shmtrace/producer.h>

#include "ipc.h"

/* One outgoing IPC queued by any thread for the library thread. */
typedef struct prod__outmsg {
    struct prod__outmsg *next;
    uint64_t gen;          /* connection generation it belongs to */
    const char *method;    /* static string: "CommitData", ... */
    uint8_t *bytes;        /* serialized request (owned) */
    size_t len;
} prod__outmsg;

/* One SMB (one per connection that got setup_tracing). Kept until
 * prod_destroy because writers may still point into it. */
typedef struct prod__smb {
    struct prod__smb *next;
    prod_producer *p;
    uint64_t gen;
    smb_arbiter *arb;
} prod__smb;

typedef struct prod__ds {
    char *name;
    prod_data_source desc;
} prod__ds;

typedef struct prod__instance {
    uint64_t id;
    size_t ds_index;       /* into dss */
} prod__instance;

struct prod_producer {
    prod_options opts;
    char *producer_name;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    bool path_explicit;          /* given in options: never re-resolved */
    prod_callbacks cb;
    void *ctx;
    pthread_t thread;
    bool thread_started;
    ipc_loop *loop;
    /* (loop) */
    ipc_client *client;
    char refusal[256];     /* the service's words when it refused us */
    uint64_t reconnect_timer;
    bool stopping;
    bool initialized;      /* InitializeConnection succeeded */
    size_t n_dss_sent;     /* data sources registered on this connection */
    prod__instance *instances;
    size_t n_instances, cap_instances;
    /* (mu) */
    pthread_mutex_t mu;
    prod__ds *dss;
    size_t n_dss;
    prod__outmsg *q_head, *q_tail;
    bool drain_posted;
    prod__smb *smbs;       /* all SMBs ever set up */
    prod__smb *cur;        /* the current connection's SMB or NULL */
    uint64_t gen;          /* bumped on every connect and disconnect */
    bool connected;
    prod_stats stats;
};

/* Queue a serialized request for the library thread; takes bytes. Drops
 * (and counts, returns -ENOTCONN) if gen is not the live connection. */
int prod__enqueue(prod_producer *p, uint64_t gen, const char *method,
                  uint8_t *bytes, size_t len);
/* The transport seam for an SMB of connection s->gen. */
void prod__make_transport(prod__smb *s, smb_transport *out);

#endif /* SHMTRACE_PRODUCER_INT_H */
