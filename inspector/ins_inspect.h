/*
 * ins_inspect.h - one trace in, one SQLite database out: the inspector's
 * entry point, used by shmtrace-inspect (main.c) and the tests.
 *
 * Pipeline: input fd -> ins_reader (1 MiB window) -> ins_detect (first
 * bytes) -> ins_decoder (one TracePacket at a time) -> ins_tracker (rows,
 * stats) -> ins_db (prepared statements, one transaction per batch of
 * packets). A packet with compressed_packets is followed by the packets
 * inside it (ins_inflate, then a decoder over the inflated bytes), in the
 * order trace processor parses them. Memory is the reader window + a few reusable blobs + the
 * sequence table + SQLite's bounded page cache, whatever the input size.
 *
 * On a truncated or malformed trace everything decoded before the bad
 * record is committed, trace_info says where and why, and the result is
 * INS_EXIT_CORRUPT. Nothing here calls exit() or prints except the
 * progress line (stderr, when enabled).
 */
#ifndef INS_INSPECT_H
#define INS_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include "ins_detect.h"

/* Exit codes of shmtrace-inspect: the values of the one table every
 * shmtrace program shares (tools/cli_exit.h, printed by --help). */
typedef enum ins_exit {
    INS_EXIT_OK = 0,      /* whole trace inspected */
    INS_EXIT_OUTPUT = 1,  /* cannot write the database (a failure while
                             running) */
    INS_EXIT_USAGE = 2,   /* bad command line */
    INS_EXIT_NO_SERVICE = 3, /* --live: the service could not be reached */
    INS_EXIT_INPUT = 4,   /* input unreadable or not a Perfetto trace; no
                             database written */
    INS_EXIT_CORRUPT = 5, /* truncated/malformed trace: database holds
                             everything before the problem */
    INS_EXIT_LIVE = 1     /* --live: the session could not be cloned */
} ins_exit;

typedef struct ins_options {
    const char *input_path;  /* trace file, "-" = standard input */
    const char *output_path; /* database to create */
    bool force;              /* replace an existing output */
    int progress;            /* 1 always, 0 never, -1 when stderr is a tty */
    bool no_packet_rows;     /* leave the packet table empty (faster) */
    uint32_t batch_packets;  /* packets per transaction, 0 = default */
} ins_options;

#define INS_DEFAULT_BATCH_PACKETS 50000u

typedef struct ins_result {
    ins_exit status;
    ins_format format;          /* what the first bytes looked like */
    uint64_t packets;           /* packets written */
    uint64_t bytes_decoded;     /* input bytes up to the last good packet */
    uint64_t input_bytes;       /* file size when known, else 0 */
    uint64_t error_offset;      /* INS_EXIT_CORRUPT: where */
    uint64_t compressed_skipped;
    char message[512];          /* human explanation when status != OK */
} ins_result;

/* Inspect O->input_path into O->output_path. Fills RES; returns
 * RES->status. */
ins_exit ins_inspect(const ins_options *o, ins_result *res);

/* Same from an open descriptor (not closed); NAME is used in messages. */
ins_exit ins_inspect_fd(int fd, const char *name, const ins_options *o,
                        ins_result *res);

#endif /* INS_INSPECT_H */
