/*
 * svc_int.h - private state of the tracing service (shmtraced's core).
 *
 * Design: one svc_service owns everything; it is single-threaded (the
 * daemon's event loop serialises every call), so nothing here locks.
 *
 *   svc_service ──< svc_producer   (connected producers, id 1..65535, SMB)
 *               ──< svc_session    (consumer sessions; own their buffers)
 *               ──< svc_bufslot    (global BufferID -> tb_buffer, session)
 *
 * A session owns `nbufs` buffers, identified towards producers by global
 * BufferIDs (1..65535, never reused while alive). A data source instance
 * (svc_instance) ties a session to a producer's registered data source; its
 * config.target_buffer carries the global id. A producer may write into a
 * buffer only if one of its instances targets it ("allowed" check of
 * smb-abi.md §8).
 *
 * Sequence ids: per session, (producer_id << 16 | writer_id) -> 2, 3, ...
 * in order of first read (svc_seqmap); 1 is the service's own sequence.
 *
 * Everything coming from a producer (descriptors, commits, SMB bytes) is
 * untrusted and is checked here or in the SMB reader before use. A
 * consumer is trusted with its own sessions only: each session carries its
 * consumer's uid, and clones, stats and session names are confined to that
 * uid (root may reach every session unless root_access is off); files are
 * written only through fds the consumer opened itself, or at an
 * output_path when the consumer is the daemon's own uid. Its config is
 * still validated (sizes, counts).
 */
#ifndef SHMTRACE_SVC_INT_H
#define SHMTRACE_SVC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>

#include <shmtrace/trace_buffer.h>

#include "config.pb-c.h"
#include "common.pb-c.h"
#include "trace.pb-c.h"

#include "svc_service.h"
#include "svc_fwrite.h"

#define SVC_MAX_BUFFERS_PER_SESSION 128
#define SVC_MAX_TOTAL_BUFFER_KB     (4u * 1024 * 1024) /* 4 GiB, all sessions */
#define SVC_MAX_PATCHES_PER_CHUNK   1024
#define SVC_MAX_WRITER_ID           32767
/* A session's TraceStats is kept under SVC_STATS_MAX_BYTES, so that a
 * GetTraceStats reply fits one IPC frame (IPC_MAX_PAYLOAD_BYTES, 131008,
 * holds it with the response's own few bytes); the trace's stats packets
 * are the same message. The per-sequence loss list is what is bounded: it
 * gets the room buffer_stats and writer_stats leave, less
 * SVC_STATS_TAIL_BYTES for the counters and shmtrace_file set after it
 * (svc_loss.c folds writers beyond it); writer_stats is bounded by
 * SVC_WSTATS_MAX_BYTES. A reply that cannot be sent all the same is
 * answered success = false (logged), never left open. */
#define SVC_STATS_MAX_BYTES         (120u * 1024)
#define SVC_STATS_TAIL_BYTES        512u
/* writer_stats takes at most this much of it (svc_stats.c chooses which
 * writers keep their entry beyond it and counts the others in
 * shmtrace_writer_stats_left_out), so that the loss list keeps the rest:
 * about 1,500 writers with busy histograms, more with light ones. */
#define SVC_WSTATS_MAX_BYTES        (56u * 1024)
/* Writers' entries in a session's loss table (svc_loss.c: packets lost
 * outside the buffers, from producers' reports and after reading): at
 * most SVC_XLOSS_PER_PRODUCER per producer, and none once the session
 * holds SVC_XLOSS_MAX entries (80 bytes each). What a writer without an
 * entry loses is counted in an entry of its producer for the buffer,
 * which is always made, and listed in an aggregate. */
#define SVC_XLOSS_PER_PRODUCER      4096u
#define SVC_XLOSS_MAX               65536u
#define SVC_SMB_PAGE_DEFAULT        4096u
#define SVC_SMB_SIZE_DEFAULT        (256u * 1024)
#define SVC_SMB_PAGE_MAX            32768u
#define SVC_SMB_SIZE_MAX            (32u * 1024 * 1024)
/* SMBs this large get SVC_SMB_PAGE_MAX pages unless a page size is asked
 * for (svc_commit.c). */
#define SVC_SMB_LARGE_PAGE_FROM     (2u * 1024 * 1024)
/* Nobody asks for a size: 1/SVC_SMB_BUFFER_SHARE of the session's
 * buffers, a power of two from SVC_SMB_SIZE_DEFAULT up to
 * SVC_SMB_SIZE_SCALED_MAX (svc_commit.c). */
#define SVC_SMB_BUFFER_SHARE        64u
#define SVC_SMB_SIZE_SCALED_MAX     (2u * 1024 * 1024)
/* Bytes of data source names and descriptors the service keeps for one
 * producer, and for all producers of one uid (svc_producer.c): a
 * descriptor may be up to a frame (128 KiB) and 1024 of them are allowed
 * per producer, so without these one user's producers could make the
 * daemon keep gigabytes. A track_event descriptor with its categories
 * takes a few KiB. */
#define SVC_MAX_DS_BYTES_PER_PRODUCER (1024u * 1024)
#define SVC_MAX_DS_BYTES_PER_UID      (64u * 1024 * 1024)
/* SMB bytes all producers of one uid may hold (svc_commit.c). */
#define SVC_MAX_SMB_BYTES_PER_UID   (1024u * 1024 * 1024)

/* Session defaults and guardrails (svc_session.c, svc_flush.c). */
#define SVC_DEFAULT_FLUSH_TIMEOUT_MS 5000u
#define SVC_DEFAULT_STOP_TIMEOUT_MS  5000u
#define SVC_DEFAULT_FILE_PERIOD_MS   5000u
#define SVC_MIN_FILE_PERIOD_MS       100u
/* write_into_file with O_DIRECT (svc_direct.c, svc_set_file_direct):
 * the alignment of every direct write, and the batch size. */
#define SVC_FILE_DIRECT_ALIGN        4096u
#define SVC_FILE_DIRECT_BATCH        (4u << 20)
#define SVC_FILE_DIRECT_BATCHES      2
/* Clock snapshots and sync markers (svc_clocks.c): period (TraceConfig
 * builtin_data_sources.snapshot_interval_ms, 0 = the default), and how
 * many snapshots wait for the next read pass at most. */
#define SVC_SNAPSHOT_DEFAULT_MS      10000u
#define SVC_SNAPSHOT_MIN_MS          100u
/* While a suspend-aware timer is armed, the main loop wakes at least this
 * often (svc_clocks.c). */
#define SVC_SUSPEND_CHECK_MS         1000u
#define SVC_CLOCK_SNAPS              16u
#define SVC_CLOCK_IDS                6u
/* flush_started / all_data_sources_flushed events kept for the next read
 * pass at most (the latest ones; Perfetto keeps 64 too). */
#define SVC_EV_FLUSH_MAX             64u
#define SVC_FILE_STEP_BYTES          (4u << 20) /* per step of a file pass */
/* The idle pass (svc_flush.c): no commit for this long, and at least this
 * much (or 1/16 of the smallest buffer) written since the last pass ended;
 * after a burst (an early pass), any amount. */
#define SVC_FILE_IDLE_MS             5u
#define SVC_FILE_IDLE_BYTES          (1u << 20)
/* In file mode, packets this large are written from where they lie in the
 * buffer, smaller ones copied into the file batch (svc_read.c). */
#define SVC_FILE_IN_PLACE_MIN        (8u << 10)
/* With the writer thread, a file pass starts once this much has been
 * written since the last one began (svc_flush.c), not half a buffer;
 * once a session's file is known to be mostly small packets (copied into
 * the batches, not sliced), once SVC_FILE_EAGER_SMALL_BYTES are in. */
#define SVC_FILE_EAGER_BYTES         (4u << 20)
#define SVC_FILE_EAGER_SMALL_BYTES   (1u << 20)
/* File batches per session: one is filled while the others are written;
 * another is filled only while those in flight hold at most
 * SVC_FILE_IN_FLIGHT_BYTES, or just one is in flight (svc_read.c). */
#define SVC_FILE_BATCHES             8
#define SVC_FILE_IN_FLIGHT_BYTES     (4u << 20)
/* Batches of copied packets go to the writer thread too while the main
 * thread was busy at least SVC_FILE_BUSY_PERCENT of the last
 * SVC_FILE_LOAD_WINDOW_NS or more and the records framed meanwhile
 * averaged at least SVC_FILE_COPIED_OUT_MIN bytes (svc_read.c,
 * svc__copied_to_thread). */
#define SVC_FILE_LOAD_WINDOW_NS      (5u * 1000 * 1000)
#define SVC_FILE_BUSY_PERCENT        90u
#define SVC_FILE_COPIED_OUT_MIN      512u
#define SVC_MAX_DURATION_MS          (7u * 24 * 3600 * 1000)
#define SVC_GUARDRAIL_DURATION_MS    (24u * 3600 * 1000)
#define SVC_GUARDRAIL_TOTAL_KB       131072u
/* Flush flags: reason bits 0-3, initiator bits 4-7 (1 = traced). */
#define SVC_FLUSH_FLAGS_STOP     (2u | (1u << 4))
#define SVC_FLUSH_FLAGS_PERIODIC (1u | (1u << 4))

/* The earlier of two deadlines in ms, 0 meaning "none". */
static inline uint64_t svc__min_deadline(uint64_t a, uint64_t b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return a < b ? a : b;
}

/* The clocks of the AUTO rule's windows (svc__set_load_clock). */
typedef void (*svc_load_clock_fn)(void *ctx, uint64_t *wall_ns,
                                  uint64_t *cpu_ns);

/* A data source a producer registered (RegisterDataSource). */
typedef struct {
    char *name;                  /* owned */
    uint64_t desc_id;
    bool will_notify_on_stop, will_notify_on_start, no_flush;
    uint8_t *desc;               /* owned: the descriptor as registered */
    size_t desc_len;
} svc_dsreg;

typedef enum {
    SVC_INST_STARTED = 0,        /* Setup + Start sent */
    SVC_INST_STOPPING,           /* Stop sent, waiting for NotifyStopped */
    SVC_INST_STOPPED,
} svc_inst_state;

/* One data source instance: session x producer x config entry. */
typedef struct {
    uint64_t instance_id;        /* service-wide unique */
    uint16_t producer_id;
    uint32_t buffer_id;          /* global */
    uint32_t buffer_index;       /* index in the session config */
    char *name;                  /* owned copy of the data source name */
    bool notify_on_stop, no_flush;
    /* Registered will_notify_on_start and no NotifyDataSourceStarted for
     * this instance yet (svc_start.c). */
    bool start_pending;
    svc_inst_state state;
} svc_instance;

/* (producer, writer) key -> trusted_packet_sequence_id; linear probing. */
typedef struct {
    uint32_t *keys;              /* 0 = empty slot */
    uint32_t *ids;
    uint32_t *buffer_index;      /* for WriterStats.buffer */
    uint32_t *pending_loss;      /* loss to report on the next packet */
    size_t cap, count;
    uint32_t next_id;            /* starts at 2 */
    uint32_t last_key;           /* lookup cache: 0 = none; a packet is */
    size_t last_slot;            /* usually from the last one's sequence */
} svc_seqmap;

/* A flush in progress (consumer Flush, final flush, periodic flush). */
typedef struct {
    uint64_t flush_id;           /* the flush_request_id sent to producers */
    uint64_t deadline_ms;
    uint16_t *pending;           /* producers that did not ack yet */
    size_t npending;
    uint64_t token;              /* consumer's token, echoed in the result */
    int kind;                    /* SVC_FLUSH_* */
} svc_flush;

enum { SVC_FLUSH_CONSUMER = 0, SVC_FLUSH_DISABLE = 1, SVC_FLUSH_PERIODIC = 2,
       SVC_FLUSH_CLONE = 3 };
/* Flush flags of the flush before a clone: reason 3 (trace clone),
 * initiator 1 (traced). */
#define SVC_FLUSH_FLAGS_CLONE    (3u | (1u << 4))

typedef enum {
    SVC_SESSION_CONFIGURED = -1, /* deferred_start: waits for StartTracing */
    SVC_SESSION_STARTED = 0,
    SVC_SESSION_DISABLING,       /* final flush / stop in progress */
    SVC_SESSION_DISABLED,        /* buffers frozen, readable */
} svc_session_state;

/* A trigger a session received (svc_trigger.c): what the trace's
 * `trigger` packet says. */
typedef struct {
    char *name, *producer_name;  /* owned */
    int32_t producer_uid;
    uint64_t stop_delay_ms;
    uint64_t boot_time_ns;       /* when it arrived, CLOCK_BOOTTIME */
} svc_trig_info;

/* A CLONE_SNAPSHOT trigger waiting for its stop_delay_ms to elapse. */
typedef struct {
    uint64_t due_ms;
    svc_trig_info info;
} svc_trig_pending;

/* Trigger and incremental-state bookkeeping of one session (svc_trigger.c,
 * svc_incremental.c). Zeroed = no triggers, no clearing. */
typedef struct {
    int mode;                    /* SVC_TRIG_* (0 = no trigger_config) */
    svc_trig_info *received;     /* in arrival order */
    size_t nreceived, nemitted;  /* nemitted: already in the trace */
    svc_trig_info clone_trigger; /* a clone made for a CLONE_SNAPSHOT hit */
    bool has_clone_trigger;
    uint64_t start_timeout_ms;   /* START_TRACING: no trigger by then */
    svc_trig_pending *pending;   /* CLONE_SNAPSHOT notifications due */
    size_t npending;
    uint32_t clear_period_ms;    /* incremental_state_config */
    uint64_t next_clear_ms;
    uint64_t clears_sent;
} svc_trig_state;

/* One clock snapshot: ns of each clock of svc__clock_ids, BOOTTIME first. */
typedef struct {
    uint64_t ts[SVC_CLOCK_IDS];
} svc_clock_snap;

/* BOOTTIME (ns) of lifecycle events of one kind waiting for the next
 * read pass, oldest first (svc__ev_note). */
typedef struct {
    uint64_t ns[SVC_EV_FLUSH_MAX];
    uint32_t n;
} svc_ev_ring;

/* A service event naming data sources: last_flush_slow_data_sources
 * (svc_flush.c: when a stop's or a clone's flush ended without every
 * producer's ack, and the data sources of the session on those
 * producers) or slow_starting_data_sources (svc_start.c: the instances
 * not started SVC_START_ACK_TIMEOUT_MS after the session's start), as
 * (producer name, data source name) pairs, at most SVC_SLOW_DS_MAX
 * (Perfetto lists 32). */
#define SVC_SLOW_DS_MAX 32u
typedef struct {
    uint64_t at;
    uint32_t n;
    char *producer[SVC_SLOW_DS_MAX], *ds[SVC_SLOW_DS_MAX];  /* owned */
} svc_slow_flush;

enum { SVC_TRIG_NONE = 0, SVC_TRIG_START = 1, SVC_TRIG_STOP = 2,
       SVC_TRIG_CLONE = 4 };

struct svc_session {
    uint64_t id;
    int64_t uuid_msb, uuid_lsb;  /* TraceUuid, random per session */
    void *consumer;              /* opaque consumer handle (glue) */
    Perfetto__Protos__TraceConfig *cfg;  /* owned (packed+unpacked copy) */
    size_t nbufs;
    uint32_t *buf_ids;           /* global ids, config order */
    svc_instance *inst;
    size_t ninst;
    svc_seqmap seqs;
    /* Bitmap by producer id (8 KiB, made with the first instance): the
     * producers that were given an instance in it, or in its clone
     * source. Their ids are not handed out again while it lives
     * (svc_producer.c): its buffers and sequence ids know a writer by
     * (producer id, writer id) only. */
    uint8_t *producers_used;
    svc_session_state state;
    bool is_clone;
    uint64_t cloned_from;        /* the source session's id (clones) */
    uint64_t clone_started_ns;   /* clones: BOOTTIME of the clone, and of */
    uint64_t *buf_cloned_ns;     /* each buffer's copy (owned, nbufs) */
    bool emitted_config;         /* first-pass packets sent */
    bool emitted_started, emitted_disabled;
    /* BOOTTIME (ns) of the TracingServiceEvents, taken when they happen
     * (trace processor drops ftrace data older than tracing_started);
     * 0 = not yet. A clone keeps its source's. */
    uint64_t ev_started_ns, ev_flushed_ns, ev_disabled_ns;
    /* Lifecycle events noted and not emitted yet (svc_read.c,
     * emit_lifecycle): the start and end of every flush (the stop's end
     * is ev_flushed_ns, noted here too), and the end of the last read
     * pass that drained the buffers (0: none). */
    svc_ev_ring ev_flush_started, ev_flushed;
    uint64_t ev_read_done_ns;
    svc_slow_flush *slow_flushes;   /* at most SVC_EV_FLUSH_MAX */
    uint32_t nslow_flushes;
    /* Data source start acks (svc_start.c): BOOTTIME when every instance
     * had started (0: not yet; a clone keeps its source's) and whether
     * the trace has that event; the deadline for the acks (monotonic ms,
     * 0: none) and, once it passed, the instances still starting, until
     * the next read pass emits them (NULL: none). */
    uint64_t ev_all_started_ns;
    bool emitted_all_started;
    uint64_t start_ack_deadline_ms;
    svc_slow_flush *slow_start;
    bool notified_disabled;      /* session_disabled op already called */
    /* flush bookkeeping */
    svc_flush *flushes;
    size_t nflushes;
    uint64_t flushes_requested, flushes_succeeded, flushes_failed;
    int final_flush_outcome;     /* TraceStats.FinalFlushOutcome */
    uint64_t invalid_packets;
    /* timers (0 = none), monotonic ms */
    uint64_t duration_deadline_ms;
    uint64_t stop_deadline_ms;   /* waiting for NotifyDataSourceStopped */
    uint64_t next_file_write_ms;
    uint64_t next_periodic_flush_ms;
    uint32_t flush_period_ms;    /* 0 = no periodic flush */
    /* write_into_file */
    int out_fd;                  /* -1 unless write_into_file; owned */
    int64_t out_base;            /* offset of its first byte in the file
                                    (svc__file_base) */
    svc_prealloc prealloc;       /* space reserved ahead (not for clones) */
    uint32_t file_write_period_ms;
    uint64_t max_file_size_bytes;
    uint64_t bytes_written_to_file;
    /* Records framed into the file and, of those, the ones whose last
     * previous_packet_dropped is non-zero (the trailer's or the packet's
     * own): reported with bytes_written_to_file in GetTraceStats
     * (TraceStats.shmtrace_file), so the consumer need not read the file
     * back. file_failed: a write of the file failed (sticky);
     * file_errno: the errno of the first failure (svc__file_fail), which
     * the session's end reports with the bytes the file holds. */
    uint64_t packets_written_to_file;
    uint64_t flagged_written_to_file;
    bool file_failed;
    int file_errno;
    bool file_full;
    uint64_t file_full_packets;  /* read but not written: file full */
    /* A periodic file pass runs in steps of SVC_FILE_STEP_BYTES (svc_tick,
     * svc_read.c), so commits are served between them: file_pass_open
     * while a pass has steps left. file_mark_written: the session's
     * buffers' bytes_written summed when the last pass began; a pass starts
     * early once half of the smallest buffer (file_early_bytes) has been
     * written since, so a ring that fills faster than the period is
     * drained before it wraps. file_done_written: the same sum when the
     * last pass ended (the idle pass counts from there: what a pass read
     * while it ran is not waiting). file_burst: a pass began early since
     * the last idle pass (the producers outran the period), so the idle
     * pass writes whatever is left of that burst, however little. */
    bool file_pass_open;
    bool file_burst;
    uint64_t file_mark_written;
    uint64_t file_done_written;
    uint64_t file_early_bytes;
    /* triggers, incremental state clearing (svc_trigger.c) */
    svc_trig_state trig;
    /* Clock snapshots taken and not emitted yet, oldest first; a sync
     * marker due at the next read pass; the period and next time
     * (svc_clocks.c; 0 = no more). */
    /* O_DIRECT file writes (svc_direct.c): on; the file offset of the
     * next direct write (aligned); the bytes past it, which go with the
     * next batch. */
    bool direct;
    int64_t direct_off;
    uint32_t direct_tail_len;
    uint8_t direct_tail[SVC_FILE_DIRECT_ALIGN];
    svc_clock_snap clock_snaps[SVC_CLOCK_SNAPS];
    uint32_t nclock_snaps;
    bool sync_marker_due;
    /* A TraceStats packet is due at the next pass that drains every
     * buffer: set once per snapshot period, at disable and in a clone
     * (svc_clocks.c, svc_flush.c), as Perfetto's should_emit_stats. */
    bool stats_due;
    uint32_t snapshot_interval_ms;
    uint64_t next_snapshot_ms;
    /* prefer_suspend_clock_for_duration / _for_snapshot (svc_clocks.c):
     * duration_deadline_ms / next_snapshot_ms count time suspended, on a
     * timeline that is MONOTONIC ms plus the time suspended since the
     * session started (suspend_base_ns: BOOTTIME - MONOTONIC then). */
    bool duration_suspend_aware, snapshot_suspend_aware;
    int64_t suspend_base_ns;
    /* Its consumer's uid (SO_PEERCRED): only that uid (and root, see
     * root_access) may clone it, query it or see it in stats.
     * Detach/Attach (svc_attach.c): detached sessions have no consumer
     * and are found again by (consumer_uid, detach_key). */
    uid_t consumer_uid;
    char *detach_key;            /* owned; NULL unless detached */
    uint64_t start_realtime_ns;  /* for QueryServiceState */
    /* packets handed out (for stats/progress) */
    uint64_t packets_read;
    /* loss accounting outside the buffers (svc_loss.c) */
    struct svc_xloss *xloss;
    size_t nxloss, xloss_cap;
    uint32_t *xhash;             /* key -> index + 1, open addressing */
    size_t xhash_cap;
    /* reused across reads (svc_read.c): packet scratch; the file
     * batches, used in turn: fwb[fwb_cur] being filled, others maybe in
     * flight on the writer thread (svc_fwrite.h), the oldest first from
     * fwb_cur on */
    uint8_t *scratch;
    size_t scratch_cap;
    svc_fw_batch fwb[SVC_FILE_BATCHES];
    int fwb_cur;
    size_t fwb_slot;             /* bytes per batch in fwb_arena (a
                                    direct session's are larger) */
    uint8_t *fwb_arena;          /* their memory, on 2 MiB pages; NULL
                                    until first used or if unmappable */
    /* what its batches held so far: slices of large packets, staged bytes
     * (which way its file went: the eager pass's size, svc_flush.c) */
    uint64_t file_slice_bytes, file_staged_bytes;
    /* where its batches of copied packets go (svc_read.c, copied_out):
     * the decision, the main thread's CPU time, the clock and the file's
     * counts when the window it was made on began, and how many such
     * batches the writer thread took */
    bool file_copied_out;
    uint64_t load_cpu_ns, load_wall_ns, load_packets, load_bytes;
    uint64_t file_copied_out_batches;
};

typedef struct {
    uint32_t id;                 /* 0 = free slot */
    tb_buffer *buf;
    svc_session *session;
} svc_bufslot;

struct svc_producer {
    uint16_t id;
    void *conn;                  /* opaque connection handle (glue) */
    uid_t uid;
    pid_t pid;
    char *name;
    char *sdk_version;           /* owned, NULL if not sent */
    uint32_t page_hint_bytes, size_hint_bytes;
    bool scraping_enabled;
    /* SMB, created on the first SetupDataSource */
    int smb_fd;                  /* -1 until set up */
    uint8_t *smb_base;
    size_t smb_size, smb_page_size;
    void *smb_reader;            /* opaque, see svc_commit.c */
    svc_dsreg *ds;
    size_t nds;
    size_t ds_bytes;             /* names + descriptors kept for ds[] */
    uint32_t *writer_buf;        /* [writer_buf_cap]: writer_id -> buffer
                                    id, 0 = unregistered; grown to cover the
                                    highest id registered (ids come from 1
                                    up: a few entries, not 32768) */
    size_t writer_buf_cap;
    uint32_t *allowed;           /* global buffer ids it may write */
    size_t nallowed;
    uint64_t last_flush_acked;
    bool reports_loss;           /* sent shmtrace_loss_reporting */
};

struct svc_service {
    svc_ops ops;
    void *ops_ctx;
    uid_t uid;                   /* the daemon's own uid */
    bool root_access;            /* uid 0 consumers may use any session */
    uint32_t max_sessions_per_uid;   /* 0: no limit (svc_set_uid_limits) */
    uint64_t max_buffer_kb_per_uid;  /* 0: only the service's budget */
    uint64_t max_total_buffer_kb;    /* svc_set_buffer_budget */
    uint64_t reserved_buffer_kb;     /* of it, for root and svc->uid only */
    size_t file_step_bytes;      /* per step of a file pass (svc_flush.c) */
    size_t file_in_place_min;    /* packets written in place (svc_read.c) */
    bool file_direct;            /* new sessions' files with O_DIRECT */
    svc_file_copied_mode file_copied_mode;      /* ibid., copied_out */
    uint8_t *fwb_spare;          /* a gone session's batch arena (ibid.) */
    /* The clocks AUTO's windows read (svc_read.c, copied_out_window):
     * NULL, CLOCK_MONOTONIC and the main thread's CPU time; a test sets
     * its own (svc__set_load_clock), so that what it asserts follows from
     * the load it describes, not from the machine's speed. */
    svc_load_clock_fn load_clock;
    void *load_clock_ctx;
    /* BOOTTIME - MONOTONIC in ns (svc__suspend_offset_ns); a test sets
     * its own (svc__set_suspend_clock) to play a suspend. */
    int64_t (*suspend_clock)(void *ctx);
    void *suspend_clock_ctx;
    uint64_t file_passes_hurried; /* passes finished in one go (ibid.) */
    uint64_t last_commit_ms;     /* when the last CommitData came in */
    svc_producer **producers;
    size_t nproducers;
    svc_session **sessions;
    size_t nsessions;
    svc_bufslot *bufs;
    size_t nbufslots;
    uint16_t last_producer_id;
    uint64_t producers_seen;
    uint64_t data_sources_seen;
    uint32_t last_buffer_id;
    uint64_t last_session_id;
    uint64_t last_instance_id;
    uint64_t last_flush_id;
    uint64_t chunks_discarded;
    uint64_t patches_discarded;
    uint64_t total_buffer_kb;
    /* Triggers seen in the last 24 h that matched a session, for
     * max_per_24_h (svc_trigger.c): a ring of (boot ns, name hash). */
    struct { uint64_t ns, hash; } *trig_hist;
    size_t trig_hist_head, trig_hist_len, trig_hist_cap;
    uint64_t rng;                /* xorshift state for skip_probability */
    svc_fwriter *fw;             /* file writer thread; NULL: writes inline */
};

/* CLOCK_BOOTTIME now, in ns (the clock of the service's packets). */
static inline uint64_t svc__boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Frees the pairs of e. */
static inline void svc__slow_flush_free(svc_slow_flush *e)
{
    for (uint32_t i = 0; i < e->n; i++) {
        free(e->producer[i]);
        free(e->ds[i]);
    }
    e->n = 0;
}

/* Frees *ep (a session's slow_start) and its pairs; *ep = NULL. */
static inline void svc__slow_list_drop(svc_slow_flush **ep)
{
    if (*ep)
        svc__slow_flush_free(*ep);
    free(*ep);
    *ep = NULL;
}

/* Appends (producer, data source) to e (caller keeps e->n below
 * SVC_SLOW_DS_MAX), copying both names (NULL: ""); false when memory
 * runs out (nothing appended). */
static inline bool svc__slow_add(svc_slow_flush *e, const char *producer,
                                 const char *ds)
{
    char *pn = strdup(producer ? producer : "");
    char *dn = strdup(ds ? ds : "");
    if (!pn || !dn) {
        free(pn);
        free(dn);
        return false;
    }
    e->producer[e->n] = pn;
    e->ds[e->n++] = dn;
    return true;
}

/* Notes a lifecycle event at `ns` for the next read pass; when
 * SVC_EV_FLUSH_MAX wait already, the oldest goes. */
static inline void svc__ev_note(svc_ev_ring *r, uint64_t ns)
{
    if (r->n == SVC_EV_FLUSH_MAX) {
        memmove(r->ns, r->ns + 1, (SVC_EV_FLUSH_MAX - 1) * sizeof(r->ns[0]));
        r->n--;
    }
    r->ns[r->n++] = ns;
}

/* svc_service.c: access rule (see root_access), buffer table, errors */
bool svc__may_access(const svc_service *, uid_t viewer, const svc_session *);
tb_buffer *svc__buffer(svc_service *, uint32_t buffer_id,
                       svc_session **session_out);
/* Takes ownership of buf; returns the new global id, or 0 (buf destroyed). */
uint32_t svc__buffer_add(svc_service *, tb_buffer *buf, svc_session *owner);
void svc__buffer_remove(svc_service *, uint32_t buffer_id);
/* snprintf into err (if any) with two numeric arguments. */
void svc__set_err(char *err, size_t errlen, const char *fmt,
                  unsigned long long a, unsigned long long b);

/* svc_read.c: wait for a session's file batches in flight (the first
 * error of their writes); free their memory */
int svc__file_wait(svc_service *, svc_session *);
/* Is the batch its next step fills still in flight? */
bool svc__file_waiting(svc_service *, svc_session *);
/* The rule for batches of copied packets (svc_read.c): to the writer
 * thread when the main thread was busy cpu_ns of wall_ns (at least
 * SVC_FILE_BUSY_PERCENT) and `packets` records of `bytes` in all were
 * framed meanwhile (at least SVC_FILE_COPIED_OUT_MIN on average). */
bool svc__copied_to_thread(uint64_t cpu_ns, uint64_t wall_ns,
                           uint64_t bytes, uint64_t packets);
/* Tests: the clocks AUTO's windows read instead of the system's (fn NULL:
 * the system's again). fn returns the wall time and the main thread's CPU
 * time, in ns, each call. */
void svc__set_load_clock(svc_service *, svc_load_clock_fn fn, void *ctx);
void svc__file_batches_free(svc_service *, svc_session *);
/* The spare batch arena a gone session left (svc_destroy). */
void svc__file_spare_free(svc_service *);
/* Where the next byte written through fd lands: its offset, or with
 * O_APPEND the file's end (0 if neither can be known). */
int64_t svc__file_base(int fd);
/* A write of s's file failed with rc (-errno): file_failed, and the first
 * failure's errno kept for the session's end to report. */
void svc__file_fail(svc_session *s, int rc);

/* svc_regex.c: a consumer's regular expression (producer name filters,
 * trigger producer_name_regex): 0 if the service will match with it, else
 * -EINVAL and why (too long, a backreference, unbalanced, expanding past
 * the service's limit, or not valid ERE). */
int svc_regex_check(const char *re, char *why, size_t whylen);
/* Does the whole of subject match re (as "^(re)$")? false for a pattern
 * svc_regex_check refuses and for subjects over 1024 bytes. */
bool svc_regex_full_match(const char *re, const char *subject);
/* svc_session.c: every producer_name_regex_filter of data source `index`
 * checked (svc_regex_check); -EINVAL with err naming it otherwise. */
int svc__check_name_regexes(const Perfetto__Protos__TraceConfig__DataSource *d,
                            size_t index, char *err, size_t errlen);

/* svc_flush.c: flush acks, scraping a session, a producer going away */
void svc__flush_ack(svc_service *, svc_producer *, uint64_t flush_id);
void svc__scrape_session(svc_service *, svc_session *);
/* svc_session_flush_for_clone's flush of s (svc_flush.c): 1 started, 0
 * none (not started, a clone, or out of memory). */
int svc__flush_for_clone(svc_service *, svc_session *s, uint64_t token);
size_t svc__producer_gone(svc_service *, svc_producer *);

/* svc_producer.c */
void svc__dsreg_free(svc_dsreg *);
svc_producer *svc__producer_by_id(svc_service *, uint16_t id);
bool svc__producer_may_write(const svc_producer *, uint32_t buffer_id);
uint32_t svc__writer_buffer(const svc_producer *, uint16_t writer_id);
int svc__producer_allow(svc_producer *, uint32_t buffer_id);
/* Producer id in session s's producers_used (made if needed): 0 or
 * -ENOMEM; is it there? */
int svc__session_use_producer(svc_session *, uint16_t producer_id);
bool svc__session_used_producer(const svc_session *, uint16_t producer_id);
void svc__producer_disallow(svc_producer *, uint32_t buffer_id);

/* svc_session.c: reactions to producer events */
void svc__session_match_new_ds(svc_service *, svc_producer *,
                               const svc_dsreg *);
void svc__session_drop_ds(svc_service *, svc_producer *, const char *name);
void svc__session_rematch(svc_service *, svc_session *);
void svc__session_instance_stopped(svc_service *, svc_producer *,
                                   uint64_t instance_id);

/* svc_direct.c: O_DIRECT session files. open: at session creation,
 * sets s->direct if the file takes it; cut: a batch handed out is cut to
 * whole blocks, the rest kept as the tail; start: a new batch begins with
 * the tail (returns its length); pause / resume: the tail written through
 * the page cache and O_DIRECT off, until resume (the file read back);
 * finish: the tail written, O_DIRECT off for good, the position at the
 * end (< 0: the tail's write failed). */
void svc__direct_open(svc_session *);
void svc__direct_cut(svc_session *, svc_fw_batch *);
size_t svc__direct_start(const svc_session *, svc_fw_batch *);
int svc__direct_pause(svc_session *);
void svc__direct_resume(svc_session *);
int svc__direct_finish(svc_session *);

/* svc_clocks.c: clock snapshots and sync markers for the read pass. */
extern const uint32_t svc__clock_ids[SVC_CLOCK_IDS];
void svc__clocks_capture(svc_clock_snap *out);
/* Takes a snapshot for the next read pass, unless the last pending one
 * is still good (no clock drifted 10 ms against BOOTTIME since). */
void svc__clocks_snapshot(svc_session *);
/* At session start: the period, a snapshot and a sync marker now. */
void svc__clocks_start(svc_session *, uint64_t now_ms);
/* Suspend-aware timers (svc_clocks.c). The time the machine has spent
 * suspended so far, as BOOTTIME - MONOTONIC in ns. */
int64_t svc__suspend_offset_ns(const svc_service *);
/* Tests: fn returns that offset instead of the clocks (NULL: the clocks). */
void svc__set_suspend_clock(svc_service *, int64_t (*fn)(void *ctx),
                            void *ctx);
/* Arms the session's suspend-aware timers from its config (at start). */
void svc__suspend_start(const svc_service *, svc_session *);
/* `now` (MONOTONIC ms) on the timeline of a timer of s that counts time
 * suspended when `aware`, else now itself. */
uint64_t svc__timer_now(const svc_service *, const svc_session *,
                        uint64_t now, bool aware);
/* A deadline d of that timeline as a MONOTONIC deadline, for the poll
 * timeout (0 stays 0). */
uint64_t svc__timer_deadline(const svc_service *, const svc_session *,
                             uint64_t d, bool aware, uint64_t now);
/* From svc_tick: the periodic snapshot and marker when due. */
void svc__clocks_tick(svc_session *, uint64_t now_ms);
/* A new clone: the source's pending snapshots, and one now. */
void svc__clocks_clone(svc_session *clone, const svc_session *src);

/* svc_trigger.c: config checks, enable-time setup, timers, read pass,
 * clone hand-over, free */
int svc__trigger_check_config(const Perfetto__Protos__TraceConfig *,
                              char *err, size_t errlen);
/* At enable: mode, timeouts (may edit s->cfg->duration_ms as Perfetto
 * does). Returns true if the session must wait for a START trigger. */
bool svc__trigger_setup(svc_service *, svc_session *);
uint64_t svc__trigger_deadline(const svc_session *);
void svc__trigger_tick(svc_service *, svc_session *, uint64_t now);

/* svc_start.c: data source start acks. Perfetto's service waits this long
 * for NotifyDataSourceStarted before naming the data sources still
 * starting in the trace (kAllDataSourceStartedTimeout). */
#define SVC_START_ACK_TIMEOUT_MS 20000u
/* Every instance of a started session has started (none start_pending,
 * or none at all): notes the time and tells the consumer, once. Called at
 * the start and whenever an instance acks or goes away. */
void svc__start_check(svc_service *, svc_session *);
uint64_t svc__start_deadline(const svc_session *);
void svc__start_tick(svc_service *, svc_session *, uint64_t now);
/* The session returns no data yet (waiting for a trigger / snapshots only). */
bool svc__trigger_withholds(const svc_session *);
/* Appends the trigger packets not emitted yet (service header filled by
 * the caller's helper): returns <0 on error. */
typedef int (*svc_trig_emit_fn)(void *ctx, const svc_trig_info *, bool clone);
int svc__trigger_emit(svc_session *, bool first_pass, svc_trig_emit_fn,
                      void *ctx);
void svc__trigger_clone(svc_session *dst, svc_session *src,
                        const svc_trig_info *clone_trigger);
void svc__trigger_free(svc_trig_state *);
void svc__trigger_service_free(svc_service *);

/* svc_seqmap (svc_read.c) */
uint32_t svc__seq_id(svc_seqmap *, uint16_t producer_id, uint16_t writer_id,
                     uint32_t buffer_index);
void svc__seqmap_free(svc_seqmap *);
int svc__seqmap_copy(svc_seqmap *dst, const svc_seqmap *src);

/* svc_loss.c: exact loss accounting (shmtrace_sequence_loss) */
typedef struct svc_xloss svc_xloss;
void svc__loss_commit(svc_service *, svc_producer *,
                      const Perfetto__Protos__CommitDataRequest *);
void svc__loss_producer_gone(svc_service *, svc_producer *);
/* Producer p got a data source instance in session s: its pid is kept
 * (for its aggregates' pid, svc__loss_fill) for as long as the session,
 * whether p stays or not. */
void svc__loss_producer_joined(svc_session *s, const svc_producer *p);
void svc__loss_invalid(svc_session *, uint32_t key, uint32_t buffer_index,
                       uint64_t bytes);
void svc__loss_file_full(svc_session *, uint32_t key, uint32_t buffer_index,
                         uint64_t bytes);
int svc__loss_fill(svc_service *, svc_session *,
                   Perfetto__Protos__TraceStats *);
/* Did writer key (producer_id << 16 | writer_id) lose packets outside the
 * buffers (the session's loss table: producer reports, invalid,
 * file_full)? Losses of writers without an entry of their own are not
 * known per writer (false). */
bool svc__loss_writer_lost(const svc_session *, uint32_t key);
void svc__loss_free(svc_session *);
int svc__loss_copy(svc_session *dst, const svc_session *src);

/* svc_session.c: the rule for a descriptor a consumer of uid passes for
 * the service to write into (EnableTracing, CloneSession): a regular file
 * or /dev/null open for writing and, from a uid other than the service's,
 * not on FUSE. 0, or a negative errno with a message naming `what`. */
int svc__check_passed_fd(const svc_service *, uid_t uid, int fd,
                         const char *what, char *msg, size_t len);

/* svc_commit.c */
int svc__smb_setup(svc_service *, svc_producer *,
                   const Perfetto__Protos__TraceConfig *);
/* A file pass begins (or the session starts writing a file): remember
 * how much its buffers hold written, for the early pass (svc_flush.c). */
void svc__file_pass_mark(svc_service *, svc_session *);
/* After a commit: starts or hurries file passes whose buffers filled
 * (svc_flush.c). */
void svc__file_check(svc_service *);
void svc__smb_sizes(const svc_producer *, const Perfetto__Protos__TraceConfig *,
                    size_t *page_out, size_t *size_out);
void svc__smb_teardown(svc_producer *);
size_t svc__scrape(svc_service *, svc_producer *, const svc_session *only);

#endif /* SHMTRACE_SVC_INT_H */
