/*
 * svc_ipc.h - shmtraced's IPC glue: ProducerPort and ConsumerPort served
 * over ipc_host (ipc/ipc.h) on top of the service core (svc_service.h).
 *
 * One svc_daemon = one ipc_loop thread, two listening sockets, one
 * svc_service. Producer connections become svc_producers at
 * InitializeConnection (identity from SO_PEERCRED); the GetAsyncCommand
 * stream carries SetupTracing (+ SMB fd), Setup/Start/StopDataSource and
 * Flush. A consumer connection owns at most one session (EnableTracing or
 * CloneSession); its disconnect frees it.
 *
 * Shutdown (svc_daemon_shutdown, e.g. on SIGTERM): every running session
 * is disabled (final flush, stop, files written, consumers told), then the
 * loop quits once all are disabled or after a grace period.
 */
#ifndef SHMTRACE_SVC_IPC_H
#define SHMTRACE_SVC_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ipc/ipc.h"
#include "svc_service.h"

typedef struct svc_daemon svc_daemon;

/* NULL + *err (negative errno; -EADDRINUSE: another instance owns the
 * socket). Paths must be resolved already (ipc_sock_path). */
svc_daemon *svc_daemon_create(ipc_loop *loop, const char *producer_path,
                              const char *consumer_path, int *err);
void svc_daemon_destroy(svc_daemon *);
/* Begin a clean stop; the loop quits when done. */
void svc_daemon_shutdown(svc_daemon *);
svc_service *svc_daemon_service(svc_daemon *);
/* Connections one peer uid may hold on each socket (0: only the
 * socket's IPC_HOST_MAX_CONNS); default SVC_MAX_CONNS_PER_UID, half of
 * them, so that one user cannot take them all. Refusals are logged. */
#define SVC_MAX_CONNS_PER_UID (IPC_HOST_MAX_CONNS / 2)
/* The last connections of each socket, kept for root and the daemon's
 * own uid (ipc_host_set_reserved_conns): when other users together hold
 * the rest, the owner can still look in (shmtrace stats) and record. */
#define SVC_RESERVED_CONNS 16u
void svc_daemon_set_max_conns_per_uid(svc_daemon *, uint32_t n);
/* write_into_file through the service's writer thread (svc_fwrite.h),
 * whose completions wake the loop. 0 or -errno. */
int svc_daemon_set_file_writer(svc_daemon *, bool on);

#endif /* SHMTRACE_SVC_IPC_H */
