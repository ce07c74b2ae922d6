/*
 * ipc_int.h - private helpers shared by the ipc/ modules (not for users of
 * ipc.h). Prefix ipc__.
 */
#ifndef SHMTRACE_IPC_INT_H
#define SHMTRACE_IPC_INT_H

#include "ipc.h"

/* Set O_NONBLOCK and FD_CLOEXEC on fd; 0 or negative errno. */
int ipc__set_nonblock_cloexec(int fd);

/* Pack a protobuf-c message into a malloc'd buffer (len may be 0; *out is
 * then non-NULL anyway). msg NULL packs nothing. 0 or -ENOMEM. */
int ipc__pack_msg(const ProtobufCMessage *msg, uint8_t **out, size_t *len);

#endif /* SHMTRACE_IPC_INT_H */
