/*
 * ins_live.h - `shmtrace-inspect --live`: inspect a running session.
 *
 * Design: the consumer client of tools/ (cons_clone_to_file, branch ipc)
 * clones the session (CloneSession + ReadBuffers + FreeBuffers) into a
 * trace file, streamed packet by packet; that file is then inspected like
 * any other. The file is a temp file next to the output database (removed
 * afterwards) unless --keep-trace names one. The running session is not
 * disturbed: a clone is a snapshot of its buffers.
 *
 * Linked into the shmtrace-inspect binary only (libins stays free of IPC).
 */
#ifndef INS_LIVE_H
#define INS_LIVE_H

#include <stdint.h>

#include "ins_inspect.h"

typedef struct ins_live_options {
    const char *socket;       /* consumer socket; NULL = environment/default */
    uint64_t session_id;      /* UINT64_MAX = let the service pick */
    const char *session_name; /* or by unique_session_name (NULL = by id) */
    const char *keep_trace;   /* keep the cloned trace here (NULL = temp) */
} ins_live_options;

/* Clone, then inspect into O->output_path (O->input_path is ignored).
 * INS_EXIT_NO_SERVICE when the service cannot be reached, INS_EXIT_LIVE
 * when the clone fails; otherwise as ins_inspect(). */
ins_exit ins_live(const ins_live_options *lo, const ins_options *o,
                  ins_result *res);

#endif /* INS_LIVE_H */
