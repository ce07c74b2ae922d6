/*
 * svc_fixture.h - fixtures for Check tests of the service core without
 * sockets (check_svc_session.c): a service whose svc_ops callbacks only
 * count what the service asked for, producers registering "test.ds", a
 * TraceConfig held in one struct, chunks written into a producer's SMB by
 * hand with the ABI layout (smb-abi.md §2-§4) and committed, and a reader
 * that unpacks what a session (or a trace file) holds.
 *
 * The usual set-up is one call: svf_start(&f, n) makes the service and n
 * producers ("one", "two", "three"; pids 11, 12, 13) and a config of one
 * 64 KiB ring buffer; the test may change f.c before svf_enable() starts
 * the session. SVF_TEST(name, n) wraps that around a test body. Packets
 * carry TracePacket.for_testing.seq_value, so a test reads back which
 * values arrived (svf_readout.values, *_of_value[]).
 * Header only (static functions); check_svc_ipc.c, which reaches the
 * service through its sockets, uses the config, chunk and commit builders.
 */
#ifndef TESTS_SVC_FIXTURE_H
#define TESTS_SVC_FIXTURE_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_int.h"
#include "svc_service.h"
#include "trace.pb-c.h"

/* ------------------------------------------------------------ recorder */

/* What the service asked of producers and consumers, by callback. */
typedef struct {
    int setup_tracing, setup_ds, start_ds, stop_ds, flush, flush_done_ok,
        flush_done_fail, disabled, clone_flush_done, clone_flush_gone,
        all_started;
    int smb_fd;
    uint32_t last_target_buffer;
    uint64_t last_session_id, last_instance, last_flush_id,
        last_flush_flags, last_clone_token;
    /* the last StartDataSource's config, as the service set it */
    Perfetto__Protos__DataSourceConfig last_ds;
} svf_rec_t;

static svf_rec_t svf_rec;

static inline int svf_r_setup_tracing(void *c, void *conn, int fd,
                                      uint32_t kb)
{
    svf_rec.setup_tracing++;
    svf_rec.smb_fd = fd;
    return 0;
}
static inline int svf_r_setup_ds(void *c, void *conn, uint64_t id,
                                 const Perfetto__Protos__DataSourceConfig *cfg)
{
    svf_rec.setup_ds++;
    return 0;
}
static inline int svf_r_start_ds(void *c, void *conn, uint64_t id,
                                 const Perfetto__Protos__DataSourceConfig *cfg)
{
    svf_rec.start_ds++;
    svf_rec.last_target_buffer = cfg->target_buffer;
    svf_rec.last_session_id = cfg->tracing_session_id;
    svf_rec.last_instance = id;
    svf_rec.last_ds = *cfg;        /* shallow: scalar fields only read */
    return 0;
}
static inline int svf_r_stop_ds(void *c, void *conn, uint64_t id)
{
    svf_rec.stop_ds++;
    return 0;
}
static inline int svf_r_flush(void *c, void *conn, const uint64_t *ids,
                              size_t n, uint64_t fid, uint64_t flags)
{
    svf_rec.flush++;
    svf_rec.last_flush_id = fid;
    svf_rec.last_flush_flags = flags;
    return 0;
}
static inline void svf_r_clone_flush_done(void *c, uint64_t tok, bool gone)
{
    svf_rec.clone_flush_done++;
    svf_rec.clone_flush_gone += gone;
    svf_rec.last_clone_token = tok;
}
static inline void svf_r_flush_done(void *c, void *consumer, uint64_t tok,
                                    bool ok)
{
    if (ok)
        svf_rec.flush_done_ok++;
    else
        svf_rec.flush_done_fail++;
}
static inline void svf_r_disabled(void *c, void *consumer, svc_session *s,
                                  const char *err)
{
    svf_rec.disabled++;
}

static inline void svf_r_all_started(void *c, void *consumer,
                                     svc_session *s)
{
    svf_rec.all_started++;
}

static const svc_ops svf_ops = {
    .setup_tracing = svf_r_setup_tracing,
    .setup_data_source = svf_r_setup_ds,
    .start_data_source = svf_r_start_ds,
    .stop_data_source = svf_r_stop_ds,
    .flush = svf_r_flush,
    .flush_done = svf_r_flush_done,
    .session_disabled = svf_r_disabled,
    .clone_flush_done = svf_r_clone_flush_done,
    .all_ds_started = svf_r_all_started,
};

/* A service with a zeroed recorder. */
static inline svc_service *svf_new(void)
{
    memset(&svf_rec, 0, sizeof(svf_rec));
    svc_service *svc = svc_create(&svf_ops, NULL, getuid());
    ck_assert_ptr_nonnull(svc);
    return svc;
}

/* ------------------------------------------------------------ config */

/* A TraceConfig with room for two buffers (one in use) and one data
 * source "test.ds"; tests set fields of cfg, buf[], ds, dsc directly. */
typedef struct {
    Perfetto__Protos__TraceConfig cfg;
    Perfetto__Protos__TraceConfig__BufferConfig buf[2], *bufp[2];
    Perfetto__Protos__TraceConfig__DataSource ds, *dsp[1];
    Perfetto__Protos__DataSourceConfig dsc;
} svf_cfg;

static inline void svf_cfg_init(svf_cfg *c, uint32_t size_kb,
                                int fill_policy)
{
    memset(c, 0, sizeof(*c));
    perfetto__protos__trace_config__init(&c->cfg);
    for (int i = 0; i < 2; i++) {
        perfetto__protos__trace_config__buffer_config__init(&c->buf[i]);
        c->buf[i].has_size_kb = true;
        c->buf[i].size_kb = size_kb;
        c->buf[i].has_fill_policy = true;
        c->buf[i].fill_policy = fill_policy;
        c->bufp[i] = &c->buf[i];
    }
    c->cfg.n_buffers = 1;
    c->cfg.buffers = c->bufp;
    perfetto__protos__trace_config__data_source__init(&c->ds);
    perfetto__protos__data_source_config__init(&c->dsc);
    c->dsc.name = "test.ds";
    c->ds.config = &c->dsc;
    c->dsp[0] = &c->ds;
    c->cfg.n_data_sources = 1;
    c->cfg.data_sources = c->dsp;
}

/* Sets write_into_file (the session then needs a file descriptor). */
static inline void svf_cfg_file(svf_cfg *c)
{
    c->cfg.has_write_into_file = true;
    c->cfg.write_into_file = true;
}

/* Connects producer `name` (uid 1000) and registers "test.ds", which acks
 * its start (will_notify_on_start) if `acks_start`. */
static inline svc_producer *svf_connect_producer(svc_service *svc,
        const char *name, pid_t pid, bool acks_start)
{
    svc_producer_params pp = { .name = name };
    svc_producer *p = svc_producer_connect(svc, NULL, 1000, pid, &pp);
    ck_assert_ptr_nonnull(p);
    Perfetto__Protos__DataSourceDescriptor d =
        PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = "test.ds";
    d.has_will_notify_on_start = acks_start;
    d.will_notify_on_start = acks_start;
    ck_assert_int_eq(svc_producer_register_ds(svc, p, &d, NULL, 0), 0);
    return p;
}

static inline svc_producer *svf_add_producer(svc_service *svc,
                                             const char *name, pid_t pid)
{
    return svf_connect_producer(svc, name, pid, false);
}

/* A check made once per packet or chunk: Check records the place of every
 * ck_assert (a write() each), which in loops over hundreds of thousands of
 * packets was most of a test's time; only a failing check reaches it. */
#define SVF_CHECK(cond)                                                    \
    do {                                                                   \
        if (!(cond))                                                       \
            ck_assert(cond);                                               \
    } while (0)

/* ------------------------------------------------------------ SMB */

/* Fills the page at pg with one Div1 chunk holding packets with seq_value
 * first..first+n-1, then publishes its header word: state 3 (Complete) or
 * 1 (BeingWritten). */
static inline void svf_fill_chunk(uint8_t *pg, uint16_t writer,
                                  uint32_t chunk_id, uint32_t first,
                                  unsigned n, unsigned state)
{
    uint8_t *ch = pg + 8;
    uint8_t *pay = ch + 8;
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t v = first + i;
        /* TracePacket { for_testing (900) { seq_value (2): v } } */
        uint8_t pkt[] = {0xA2, 0x38, 0x03, 0x10,
                         (uint8_t)(0x80 | (v & 0x7f)), (uint8_t)(v >> 7)};
        pay[off++] = sizeof(pkt);
        memcpy(pay + off, pkt, sizeof(pkt));
        off += sizeof(pkt);
    }
    memcpy(ch, &chunk_id, 4);
    memcpy(ch + 4, &writer, 2);
    uint16_t packets = (uint16_t)n;
    memcpy(ch + 6, &packets, 2);
    uint32_t word = (1u << 28) | state;
    atomic_store((_Atomic uint32_t *)(void *)pg, word);
}

/* svf_fill_chunk at page `page` of producer p's SMB. */
static inline void svf_write_chunk(svc_producer *p, uint32_t page,
                                   uint16_t writer, uint32_t chunk_id,
                                   uint32_t first, unsigned n, unsigned state)
{
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    SVF_CHECK(base != NULL);
    svf_fill_chunk(base + (size_t)page * psz, writer, chunk_id, first, n,
                   state);
}

/* Makes packet 1 of the chunk at page 0 (written by svf_write_chunk)
 * claim trusted_packet_sequence_id, field 10 (0x50): it is invalid. */
static inline void svf_poison_second_packet(svc_producer *p)
{
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    uint8_t *pay = base + 16;
    size_t second = 1 + pay[0];
    pay[second + 1] = 0x50;         /* tag byte of packet 1 */
    pay[second + 2] = 0x01;
    pay[second + 3] = 0x08;         /* then field 1 varint... */
    pay[second + 4] = 0x01;
    pay[second + 5] = 0x08;
    pay[second + 6] = 0x01;
}

/* The header word of page `page` (state and layout). */
static inline uint32_t svf_page_word(svc_producer *p, uint32_t page)
{
    size_t size, psz;
    uint8_t *base = svc_producer_smb(p, &size, &psz);
    return atomic_load((_Atomic uint32_t *)(void *)(base + page * psz));
}

/* A CommitDataRequest moving one chunk and acking flush_id if not 0. */
typedef struct {
    Perfetto__Protos__CommitDataRequest req;
    Perfetto__Protos__CommitDataRequest__ChunksToMove m, *mp;
} svf_commit_msg;

static inline void svf_commit_msg_init(svf_commit_msg *c, uint32_t page,
                                       uint32_t chunk, uint32_t target,
                                       uint64_t flush_id)
{
    perfetto__protos__commit_data_request__init(&c->req);
    perfetto__protos__commit_data_request__chunks_to_move__init(&c->m);
    c->m.has_page = c->m.has_chunk = c->m.has_target_buffer = true;
    c->m.page = page;
    c->m.chunk = chunk;
    c->m.target_buffer = target;
    c->mp = &c->m;
    c->req.n_chunks_to_move = 1;
    c->req.chunks_to_move = &c->mp;
    if (flush_id) {
        c->req.has_flush_request_id = true;
        c->req.flush_request_id = flush_id;
    }
}

/* CommitData of that request, straight into the service. */
static inline void svf_commit(svc_service *svc, svc_producer *p,
                              uint32_t page, uint32_t chunk, uint32_t target,
                              uint64_t flush_id)
{
    svf_commit_msg c;
    svf_commit_msg_init(&c, page, chunk, target, flush_id);
    int rc = svc_producer_commit(svc, p, &c.req);
    if (rc != 0)                         /* per chunk: see SVF_CHECK */
        ck_assert_int_eq(rc, 0);
}

/* ------------------------------------------------------------ reading */

typedef struct {
    int n, n_service, n_stats, n_config, n_uuid, n_sysinfo;
    char sys_release[128], sys_machine[64], sys_version[160];
    uint32_t sys_page_size, sys_num_cpus;
    uint64_t sys_ram_bytes;
    uint32_t seq_of_value[64];
    int32_t pid_of_value[64];
    uint32_t dropped_of_value[64];
    int values;
    uint64_t invalid_packets;
    uint64_t chunks_discarded;
    uint64_t abi_violations;
    /* ClockSnapshot packets: how many, BOOTTIME of the first and last,
     * and whether their BOOTTIMEs ever went back; sync markers: how many,
     * and how many were not exactly {trusted_uid, sequence 1, marker}. */
    int n_clock, n_sync, n_sync_bad;
    bool clock_went_back;
    uint64_t clock_first_boot, clock_last_boot;
    /* TracingServiceEvents: how many of each field number (larger ones
     * in [15]), the first SVF_EV_SEQ in order, and whether a timestamp
     * ever went back. */
#define SVF_EV_SEQ 256
    int n_ev[16];
    int ev_seq[SVF_EV_SEQ], n_ev_seq;
    /* last_flush_slow_data_sources: entries of the last one, and its
     * first entry as "producer/data source" */
    int slow_ds;
    char slow_first[96];
    /* slow_starting_data_sources: the same of the last one */
    int slow_start_ds;
    char slow_start_first[96];
    bool ev_went_back;
    uint64_t ev_last_ts;
} svf_readout;

/* Whether `data` is exactly the sync marker packet of `uid`:
 * 18 <uid varint> 50 01 A2 02 10 <16 marker bytes>. */
static inline bool svf_is_exact_sync_marker(const uint8_t *data, size_t size,
                                            int32_t uid)
{
    static const uint8_t marker[16] = {
        0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba,
        0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79,
    };
    uint8_t want[32];
    size_t n = 0;
    uint64_t v = (uint64_t)(int64_t)uid;
    want[n++] = 0x18;
    do {
        want[n++] = (uint8_t)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    want[n++] = 0x50;
    want[n++] = 0x01;
    want[n++] = 0xA2;
    want[n++] = 0x02;
    want[n++] = 0x10;
    memcpy(want + n, marker, 16);
    n += 16;
    return size == n && memcmp(data, want, n) == 0;
}

/* svc_session_read callback: every packet has the trusted fields. */
static inline int svf_collect(void *ctx, const uint8_t *data, size_t size)
{
    svf_readout *r = ctx;
    Perfetto__Protos__TracePacket *p =
        perfetto__protos__trace_packet__unpack(NULL, size, data);
    SVF_CHECK(p != NULL);
    SVF_CHECK(p->has_trusted_packet_sequence_id);
    SVF_CHECK(p->has_trusted_uid);
    r->n++;
    if (p->trusted_packet_sequence_id == 1) {
        r->n_service++;
        if (p->trace_stats) {
            r->n_stats++;
            r->invalid_packets = p->trace_stats->invalid_packets;
            r->chunks_discarded = p->trace_stats->chunks_discarded;
            if (p->trace_stats->n_buffer_stats)
                r->abi_violations =
                    p->trace_stats->buffer_stats[0]->abi_violations;
        }
        if (p->trace_config)
            r->n_config++;
        if (p->clock_snapshot) {
            uint64_t boot = 0;
            for (size_t i = 0; i < p->clock_snapshot->n_clocks; i++)
                if (p->clock_snapshot->clocks[i]->clock_id == 6)
                    boot = p->clock_snapshot->clocks[i]->timestamp;
            if (r->n_clock++ == 0)
                r->clock_first_boot = boot;
            else if (boot < r->clock_last_boot)
                r->clock_went_back = true;
            r->clock_last_boot = boot;
        }
        if (p->service_event) {
            int k = (int)p->service_event->event_type_case;
            r->n_ev[k >= 0 && k < 15 ? k : 15]++;
            if (r->n_ev_seq < SVF_EV_SEQ)
                r->ev_seq[r->n_ev_seq++] = k;
            /* a oneof: the pointer only for its own case */
            const Perfetto__Protos__TracingServiceEvent__DataSources *sl =
                k == 8 ? p->service_event->last_flush_slow_data_sources
                       : NULL;
            if (sl) {
                r->slow_ds = (int)sl->n_data_source;
                if (sl->n_data_source)
                    snprintf(r->slow_first, sizeof(r->slow_first), "%s/%s",
                             sl->data_source[0]->producer_name,
                             sl->data_source[0]->data_source_name);
            }
            const Perfetto__Protos__TracingServiceEvent__DataSources *ss =
                k == 7 ? p->service_event->slow_starting_data_sources : NULL;
            if (ss) {
                r->slow_start_ds = (int)ss->n_data_source;
                if (ss->n_data_source)
                    snprintf(r->slow_start_first,
                             sizeof(r->slow_start_first), "%s/%s",
                             ss->data_source[0]->producer_name,
                             ss->data_source[0]->data_source_name);
            }
            if (p->timestamp < r->ev_last_ts)
                r->ev_went_back = true;
            r->ev_last_ts = p->timestamp;
        }
        if (p->has_synchronization_marker) {
            r->n_sync++;
            r->n_sync_bad += !svf_is_exact_sync_marker(data, size,
                                                       p->trusted_uid);
        }
        if (p->trace_uuid)
            r->n_uuid++;
        if (p->system_info) {
            const Perfetto__Protos__SystemInfo *si = p->system_info;
            r->n_sysinfo++;
            if (si->utsname && si->utsname->release)
                snprintf(r->sys_release, sizeof(r->sys_release), "%s",
                         si->utsname->release);
            if (si->utsname && si->utsname->machine)
                snprintf(r->sys_machine, sizeof(r->sys_machine), "%s",
                         si->utsname->machine);
            if (si->tracing_service_version)
                snprintf(r->sys_version, sizeof(r->sys_version), "%s",
                         si->tracing_service_version);
            r->sys_page_size = si->page_size;
            r->sys_num_cpus = si->num_cpus;
            r->sys_ram_bytes = si->system_ram_bytes;
        }
    } else if (p->for_testing) {
        uint32_t v = p->for_testing->seq_value;
        if (v < 64) {
            r->seq_of_value[v] = p->trusted_packet_sequence_id;
            r->pid_of_value[v] = p->trusted_pid;
            r->dropped_of_value[v] = p->previous_packet_dropped;
        }
        r->values++;
    }
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
    return 0;
}

/* Reads all a session holds in one unbounded pass. */
static inline void svf_read_all(svc_service *svc, svc_session *s,
                                svf_readout *r)
{
    memset(r, 0, sizeof(*r));
    bool more = false;
    ck_assert_int_eq(svc_session_read(svc, s, 0, svf_collect, r, &more), 0);
    ck_assert(!more);
}

static inline long svf_file_size(int fd)
{
    return (long)lseek(fd, 0, SEEK_END);
}

/* An unlinked temporary file for file mode; *mine gets a second
 * descriptor of it that stays the test's once the session owns the
 * first (returned). */
static inline int svf_temp_file(int *mine)
{
    char path[] = "/tmp/svcfileXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    *mine = dup(fd);
    ck_assert_int_ge(*mine, 0);
    return fd;
}

/* Bytes the filesystem allocated to fd. */
static inline long long svf_allocated(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    return (long long)st.st_blocks * 512;
}

/* Can /tmp reserve space ahead (fallocate FALLOC_FL_KEEP_SIZE; tmpfs and
 * ext4 can)? If not, says so on stderr for `who`, whose checks of the
 * reservation then pass unchecked (svc_prealloc.c turns itself off). */
static inline bool svf_can_reserve(const char *who)
{
    int mine;
    int fd = svf_temp_file(&mine);
    bool ok = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4096) == 0;
    int e = errno;
    close(fd);
    close(mine);
    if (!ok)
        fprintf(stderr, "%s: /tmp cannot fallocate (%s): reservation not "
                "checked\n", who, strerror(e));
    return ok;
}

/* The whole file fd (malloc'ed, one byte more than *size; the caller
 * frees it). */
static inline uint8_t *svf_file_bytes(int fd, long *size)
{
    *size = svf_file_size(fd);
    uint8_t *buf = malloc((size_t)*size + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(pread(fd, buf, (size_t)*size, 0), *size);
    return buf;
}

/* Parses a file of Trace.packet records (tag 0x0A, varint length, packet)
 * into r with svf_collect(); every record lies inside the file; r->n
 * counts them. */
static inline void svf_read_file_records(int fd, svf_readout *r)
{
    memset(r, 0, sizeof(*r));
    long size;
    uint8_t *buf = svf_file_bytes(fd, &size);
    long off = 0;
    while (off < size) {
        SVF_CHECK(buf[off] == 0x0A);
        off++;
        uint64_t len = 0;
        int shift = 0;
        while (off < size && (buf[off] & 0x80)) {
            len |= (uint64_t)(buf[off++] & 0x7f) << shift;
            shift += 7;
        }
        SVF_CHECK(off < size);
        len |= (uint64_t)buf[off++] << shift;
        SVF_CHECK(len <= (uint64_t)(size - off));
        svf_collect(r, buf + off, len);
        off += (long)len;
    }
    ck_assert_int_eq(off, size);
    free(buf);
}

/* ------------------------------------------------------------ fixture */

#define SVF_MAX_PRODUCERS 3

/* A started service: svf_start() connects the producers and fills the
 * config; svf_enable() starts the session (s, and buf its buffer 0). */
typedef struct {
    svc_service *svc;
    svc_producer *p[SVF_MAX_PRODUCERS];
    svf_cfg c;
    svc_session *s;
    uint32_t buf;
} svf_fx;

static inline void svf_start(svf_fx *f, int nproducers)
{
    static const char *const names[SVF_MAX_PRODUCERS] = {"one", "two",
                                                         "three"};
    ck_assert_int_le(nproducers, SVF_MAX_PRODUCERS);
    memset(f, 0, sizeof(*f));
    f->svc = svf_new();
    for (int i = 0; i < nproducers; i++)
        f->p[i] = svf_add_producer(f->svc, names[i], 11 + i);
    svf_cfg_init(&f->c, 64, 0);
}

/* Enables the session of f->c (file mode writes into fd, else -1). */
static inline svc_session *svf_enable_fd(svf_fx *f, int fd)
{
    f->s = svc_session_enable(f->svc, NULL, &f->c.cfg, fd, NULL, 0);
    ck_assert_ptr_nonnull(f->s);
    f->buf = f->s->buf_ids[0];
    return f->s;
}

static inline svc_session *svf_enable(svf_fx *f)
{
    return svf_enable_fd(f, -1);
}

/* Writes a complete chunk of n packets from value `first` at `page` and
 * commits it into the session's buffer. */
static inline void svf_put(svf_fx *f, svc_producer *p, uint32_t page,
                           uint16_t writer, uint32_t chunk_id, uint32_t first,
                           unsigned n)
{
    svf_write_chunk(p, page, writer, chunk_id, first, n, 3);
    svf_commit(f->svc, p, page, 0, f->buf, 0);
}

/* A test on a service started by svf_start(f, nproducers): the body gets
 * the fixture f, may change f->c, enables the session itself; the service
 * is destroyed after the body. Registered like a START_TEST test:
 *   SVF_TEST(test_x, 1)
 *   {
 *       svc_session *s = svf_enable(f);
 *       ...
 *   }
 */
#define SVF_TEST(name, nproducers)                                         \
    static void name##_on(svf_fx *f);                                      \
    START_TEST(name)                                                       \
    {                                                                      \
        svf_fx fx;                                                         \
        svf_start(&fx, (nproducers));                                      \
        name##_on(&fx);                                                    \
        svc_destroy(fx.svc);                                               \
    }                                                                      \
    END_TEST                                                               \
    static void name##_on(svf_fx *f)

#endif /* TESTS_SVC_FIXTURE_H */
