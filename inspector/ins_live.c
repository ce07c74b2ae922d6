/*
 * ins_live.c - clone a live session into a trace file, then inspect it
 * (design in ins_live.h).
 */
#include "ins_live.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_client.h"

ins_exit ins_live(const ins_live_options *lo, const ins_options *o,
                  ins_result *res)
{
    memset(res, 0, sizeof(*res));
    char *tmp = NULL;
    const char *path = lo->keep_trace;
    if (path == NULL) {
        /* Next to the database: same filesystem, a place the user chose. */
        if (asprintf(&tmp, "%s.live-XXXXXX", o->output_path) < 0) {
            res->status = INS_EXIT_OUTPUT;
            snprintf(res->message, sizeof(res->message), "out of memory");
            return res->status;
        }
        int fd = mkstemp(tmp);
        if (fd < 0) {
            res->status = INS_EXIT_OUTPUT;
            snprintf(res->message, sizeof(res->message),
                     "cannot create a temporary file next to %s: %s",
                     o->output_path, strerror(errno));
            free(tmp);
            return res->status;
        }
        close(fd);
        path = tmp;
    }

    char err[512] = "";
    cons_out out;
    memset(&out, 0, sizeof(out));
    /* No service, one of another user we refused to talk to, or one that
     * refused us (too many connections of ours): no_service. */
    bool no_service = false;
    int rc = cons_clone_to_file(lo->socket, lo->session_id, lo->session_name,
                                path, &out, &no_service, err, sizeof(err));
    cons_out_fini(&out);
    if (rc < 0) {
        res->status = no_service ? INS_EXIT_NO_SERVICE : INS_EXIT_LIVE;
        snprintf(res->message, sizeof(res->message),
                 "cannot clone the live session: %s%s", err,
                 no_service || cons_connect_failure_is_local(rc) ? "" :
                 " (is a session recording? `shmtrace stats` shows the "
                 "service's sessions)");
        if (tmp)
            unlink(tmp);
        free(tmp);
        return res->status;
    }

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        res->status = INS_EXIT_LIVE;
        snprintf(res->message, sizeof(res->message), "cannot open the clone "
                 "%s: %s", path, strerror(errno));
    } else {
        char name[256];
        if (lo->session_name)
            snprintf(name, sizeof(name), "live session '%s' (clone)",
                     lo->session_name);
        else if (lo->session_id != UINT64_MAX)
            snprintf(name, sizeof(name), "live session %llu (clone)",
                     (unsigned long long)lo->session_id);
        else
            snprintf(name, sizeof(name), "live session (clone)");
        ins_inspect_fd(fd, name, o, res);
        close(fd);
    }
    if (tmp)
        unlink(tmp);
    free(tmp);
    return res->status;
}
