/*
 * tb_int.h - libbuf internals: TraceBufferV2 records, sequences, walks.
 *
 * Included only by the libbuf sources and by the Check tests (through the noinst
 * libtb_internal.la). Nothing here is an ABI: the buffer lives in this
 * process only.
 *
 * MEMORY LAYOUT (spec trace-buffer.md §2)
 *
 * b->mem is one anonymous mmap of b->size bytes (a multiple of 4096, at most
 * 4 GiB). Records tile [0, used_size) back to back, each at a multiple of 16:
 *
 *   Off Type Field          Meaning
 *   0   u32  chunk_id       from the SMB chunk header
 *   4   u32  pri_wri_id     (producer_id << 16) | writer_id; 0 = padding
 *   8   u16  size           reserved payload bytes (fixed for life)
 *   10  u16  payload_size   valid fragment bytes (<= size)
 *   12  u16  payload_avail  unconsumed bytes; the next unread fragment
 *                           starts at payload_size - payload_avail
 *   14  u8   flags          ABI flags 0x1/0x2/0x4 + TB__F_INCOMPLETE (0x80)
 *   15  u8   facts          TB__FACT_* cache (Perfetto keeps a debug
 *                           checksum here; we keep copy-time facts instead)
 *
 * outer(size) = align_up(16 + size, 16). All-zero memory is a padding record
 * of outer size 16, so a fresh or erased area needs no special case.
 * Erasing a record zeroes its header but keeps size and payload_size.
 * Headers are written only by us; payload bytes come from producers and are
 * re-tokenized with bounds checks every time they are read.
 *
 * SEQUENCES (spec §3)
 *
 * b->seqs is a dense array of tb__seq; b->hash maps pri_wri_id -> index + 1
 * (open addressing, linear probing, 0 = empty slot, rebuilt after GC).
 * Each sequence keeps its records as a ring of {chunk_id, offset} sorted by
 * ChunkID (modular order): appends at the tail and erases at the head are
 * O(1); an out-of-order insert shifts (rare: only SMB scraping does it).
 * Keeping chunk_id in the ring lets patches find their chunk by index
 * arithmetic or binary search without touching the buffer. b->uids counts
 * each uid's sequences, bounded per uid (tb_seq.c), and its shares of the
 * per-writer tables (tb_share.c).
 *
 * WALKS (spec §7)
 *
 * The inner walk (tb__walk) visits one sequence in ChunkID order from its
 * first record up to a target record, in read mode (stalls allowed) or erase
 * mode (eviction: forced, no stalls). The outer read walk in tb_buffer.c
 * visits records in buffer order from the read cursor.
 *
 * FAST ERASE
 *
 * Evicting a record that is the head of its sequence, untouched since its
 * copy (no patch, nothing consumed) and not ending in a begin fragment has
 * a result fully determined by facts computed when it was copied (does it
 * hold a non-empty whole packet, does it start with an orphan continuation).
 * Eviction then costs O(1) instead of re-tokenizing the payload; the stats
 * and loss bits are the same as the full erase-mode walk would produce.
 * With an evict callback installed the full walk always runs.
 *
 * Threads: none; the owner serialises every call on a tb_buffer.
 */
#ifndef LIBBUF_TB_INT_H
#define LIBBUF_TB_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <shmtrace/trace_buffer.h>

#define TB__REC_HDR_BYTES 16u
#define TB__ABI_FLAGS 0x07u
#define TB__F_INCOMPLETE 0x80u
#define TB__MAX_PAYLOAD 0xFFFFu
#define TB__MAX_SIZE ((size_t)1 << 32)

/* Sequence GC thresholds (spec §3); the empty sequences kept are shared
 * among uids (tb_seq.c, tb__seq_gc). */
#define TB__KEEP_LAST_EMPTY_SEQ 1024u
#define TB__EMPTY_SEQ_GC_THRESHOLD (TB__KEEP_LAST_EMPTY_SEQ + 128u)
/* Entries of a sequence's ChunkID ring when first made (it doubles from
 * there; a power of two): small, since hostile producers can make one
 * sequence per 16-byte record (tb_seq.c). */
#define TB__SEQ_RING_MIN 2u

/* facts byte of a record: computed at copy time over [0, payload_size). */
#define TB__FACT_VALID  0x01u /* facts match the payload (no patch since) */
#define TB__FACT_WHOLE  0x02u /* >= 1 non-empty whole packet */
#define TB__FACT_ORPHAN 0x04u /* first fragment is an end/continue */
#define TB__FACT_BEGIN  0x08u /* last fragment begins a packet */
#define TB__FACT_PATCH_FAILED 0x10u /* a patch for it failed (sticky until
                                       the next successful patch) */

typedef struct {
    uint32_t chunk_id;
    uint32_t pri_wri_id;
    uint16_t size;
    uint16_t payload_size;
    uint16_t payload_avail;
    uint8_t flags;
    uint8_t facts;
} tb__rec;
_Static_assert(sizeof(tb__rec) == TB__REC_HDR_BYTES, "record header size");

/* Tests only (tests/check_tb_malicious.c, fuzz/fuzz_tb.c):
 * tb_copy_chunk_shared calls it after tokenizing the source and before
 * copying it, where a producer racing the service could rewrite its shared
 * memory. libbuf's own definition is weak and does nothing; those tests
 * define theirs, which their static link of libtb_core.la takes instead.
 * Hidden (-fvisibility=hidden): no program can replace it in libbuf.so,
 * and the service holds no function pointer for it. */
void tb__shared_race_hook(void);

/* Fragment roles (smb-abi.md §6). */
enum { TB__WHOLE = 0, TB__BEGIN, TB__CONT, TB__END };

/* Result of tokenizing one fragment. */
enum {
    TB__FRAG_OK = 1,
    TB__FRAG_NONE = 0,       /* clean end of the payload */
    TB__FRAG_CORRUPT = -1,   /* bad varint or size past the end */
    TB__FRAG_DROP = -2,      /* kPacketSizeDropPacket sentinel */
};

typedef struct {
    uint32_t pos;   /* payload offset of the fragment's varint header */
    uint32_t hdr;   /* varint bytes */
    uint32_t size;  /* fragment data bytes */
    int role;
} tb__frag;

/* A fragment collected during reassembly. */
typedef struct {
    uint32_t rec_off;
    tb__frag frag;
} tb__cfrag;

typedef struct {
    uint32_t chunk_id;
    uint32_t off;
    uint32_t npk;           /* first fragments still unread (tb_loss.c) */
    /* Where the body of the record's last fragment starts, as tokenized
     * at copy time: a patch at or after it changes no fragment header, so
     * the packet starts need no recount (tb_try_patch_chunk);
     * TB__LAST_BODY_UNKNOWN when not known (always recount). */
    uint32_t last_body;
} tb__centry;
#define TB__LAST_BODY_UNKNOWN UINT32_MAX

typedef struct {
    uint32_t key;           /* pri_wri_id */
    uint16_t producer_id;
    uint16_t writer_id;
    uint32_t uid;
    int32_t pid;
    tb__centry *ring;       /* records sorted by ChunkID */
    uint32_t cap;           /* power of two (or 0) */
    uint32_t head;
    uint32_t count;
    uint32_t loss;          /* pending data_loss_reasons */
    uint32_t last_id;       /* last_consumed, valid if has_last */
    uint16_t last_payload_size;
    bool has_last;
    bool last_incomplete;
    bool counted_empty;     /* included in b->empty_seqs */
    uint32_t hist_idx;      /* index + 1 into b->hist, 0 = not looked up */
    uint32_t loss_idx;      /* index + 1 into b->lossv, 0 = not looked up */
    uint64_t skip_gen;      /* stalled in this read generation */
    uint64_t age;           /* when it last became empty */
} tb__seq;

/* The per-writer tables whose own entries are shared among uids
 * (tb_share.c): an index into tb__uid_seqs.held. */
enum { TB__TAB_LOSS = 0, TB__TAB_HIST = 1, TB__NTABS = 2 };

/* Who holds the own entries of one per-writer table (tb_share.c). */
typedef struct {
    uint32_t *owner;        /* per own entry: the uid of its writer */
    size_t owner_cap;
    uint32_t hand;          /* where the next search for an entry to fold
                               starts (a clock hand over the own entries) */
    uint32_t top_uid;       /* when top_known: a uid holding the most own */
    uint32_t top_n;         /* entries, and how many (0: no uid holds any) */
    bool top_known;
} tb__share;

typedef struct {
    bool active;
    uint32_t seq;           /* index into b->seqs */
    uint32_t target_off;
    uint32_t target_outer;
    uint32_t cur_off;       /* head record being tokenized */
    uint32_t frag_off;      /* next fragment position in cur */
} tb__walk;

enum { TB__READ = 0, TB__ERASE = 1 };

struct tb_buffer {
    uint8_t *mem;
    size_t size;
    size_t used_size;
    size_t wr;
    size_t rd;
    /* The read floor (tb_buffer.c): when rd_floor_valid, every record from
     * the oldest position (wr, or 0 when wr == used_size) up to rd_floor
     * in ring order is erased, so tb_begin_read starts there instead of
     * walking the consumed records again (a cache miss each; a whole lap
     * of a large ring per read pass). Raised by the reader while every
     * record it passed was erased (rd_contig); dropped by evict() when it
     * overwrites the floor (the only way records reappear before it);
     * without one, tb_begin_read puts it at the oldest record (nothing
     * lies before that). */
    size_t rd_floor;
    bool rd_floor_valid;
    bool rd_contig;
    /* Read resume (tb_buffer.c): the pass of generation rd_resume_gen
     * stepped from the floor to the write cursor, its last record at
     * rd_resume, and the records it left unread in between are those of
     * the sequences that stalled in it (skip_gen). The next pass walks
     * those sequences first (the prologue: their keys in pro_keys, the
     * region [rd_floor, rd_resume]) and then starts at rd_resume instead
     * of stepping over every record read before. rd_odd: this pass
     * stepped over a record it could not walk (no resume after it). */
    size_t rd_resume;
    bool rd_resume_valid;
    bool rd_odd;
    uint64_t rd_resume_gen;
    uint32_t *pro_keys;
    uint32_t pro_n, pro_i, pro_tries;
    size_t pro_cap;
    bool pro_walk;          /* the active walk is the prologue's */
    bool pro_clean;         /* no stalled sequence left in the region */
    uint64_t rd_visits;     /* records the outer walk looked at (tests) */
    /* Rewind (tb_rewind.c): from this write offset on, a drained ring
     * starts again at 0 (0: never); the read generation of the last
     * refusal; how many the write probe put off (tests, tuning). */
    size_t rewind_at;
    uint64_t rewind_refused_gen;
    uint64_t rewinds_put_off;
    /* ... its scratch: the live records found (tb__rw_item, sorted); the
     * oldest record the last rewind moved and how many rewinds in a row
     * moved it */
    struct tb__rw_item *rw_items;
    size_t rw_cap;
    uint32_t rw_oldest_key, rw_oldest_id, rw_oldest_moves;
    /* Write-side prefetch (tb_write.c): the lines below this offset, from
     * the write cursor on, have been asked for already. */
    size_t pf_end;
    size_t rd_pf_end;       /* the same for reading (tb_buffer.c) */
    /* Victim lookahead (tb_write.c, prefetch_victims): the record headers
     * below these offsets, from the write cursor on, have had their
     * sequence line / ring head and loss entry asked for. Hints only: any
     * value is safe, one outside the window starts again at wr. */
    size_t vic_seq_pf;
    size_t vic_head_pf;
    tb_fill_policy policy;
    bool read_only;
    bool discard_stop;
    uint64_t generation;
    tb_stats stats;

    tb__seq *seqs;
    uint32_t nseqs;
    size_t seqs_cap;
    uint32_t *hash;         /* index + 1, 0 = empty */
    uint32_t hash_cap;      /* power of two */
    uint32_t empty_seqs;
    uint64_t seq_age;
    /* Sequences per uid (tb_seq.c), sorted by uid: at most max_seqs_per_uid
     * each (TB_MAX_SEQS_PER_UID unless a test set its own). */
    struct tb__uid_seqs *uids;
    uint32_t nuids;
    size_t uids_cap;
    uint32_t max_seqs_per_uid;

    tb__walk walk;          /* the read walk */
    tb_slice *slices;       /* slices of the packet last returned */
    size_t slices_cap;
    tb__cfrag *cfrags;      /* reassembly scratch */
    size_t cfrags_cap;

    tb_evict_fn evict_fn;
    void *evict_ctx;
    tb_write_fence_fn fence_fn;  /* tb_set_write_fence; NULL: none */
    void *fence_ctx;
    tb_write_probe_fn probe_fn;  /* tb_set_write_probe; NULL: none */
    void *probe_ctx;

    /* Per-writer tables, bounded (trace_buffer.h): at most
     * TB_*_MAX_WRITERS entries each, the last one maybe the overflow
     * entry (key 0) that holds the writers without an entry of their
     * own; once full, the own entries are shared fairly among uids
     * (tb_share.c). */
    tb_writer_stats *hist;  /* per-writer histograms (tb_write.c) */
    size_t nhist;
    size_t hist_cap;
    uint32_t *hhash;        /* key -> index + 1 into hist, open addressing */
    uint32_t hhash_cap;
    uint32_t hist_over;     /* index + 1 of the overflow entry, 0 = none */

    tb_seq_loss *lossv;     /* per-writer loss accounting (tb_loss.c) */
    uint32_t nloss;
    size_t loss_cap;
    uint32_t *lhash;        /* key -> index + 1, open addressing */
    uint32_t lhash_cap;
    uint32_t loss_over;     /* index + 1 of the aggregate entry, 0 = none */
    uint8_t *loss_gap;      /* per entry of lossv, made on first use: a
                               chunk of that writer was refused for its
                               uid's sequence bound (tb_loss.c) */
    size_t loss_gap_n;      /* entries loss_gap covers */
    /* Which uid holds each own entry of the two tables (tb_share.c); last,
     * so that no field the copy path uses moved for them. */
    tb__share hist_share;
    tb__share loss_share;
};

static inline size_t tb__outer(size_t payload)
{
    return (TB__REC_HDR_BYTES + payload + 15u) & ~(size_t)15u;
}

/* Before storing into [off, off + n) of b->mem where returned packet
 * bytes may lie: the owner's write fence, if any (trace_buffer.h). */
static inline void tb__fence(const tb_buffer *b, size_t off, size_t n)
{
    if (b->fence_fn)
        b->fence_fn(b->fence_ctx, b->mem + off, n);
}

static inline tb__rec *tb__rec_at(const tb_buffer *b, size_t off)
{
    return (tb__rec *)(void *)(b->mem + off);
}

static inline uint8_t *tb__payload(const tb_buffer *b, size_t off)
{
    return b->mem + off + TB__REC_HDR_BYTES;
}

/* Modular ChunkID order: <0 if a precedes b. */
static inline int tb__id_cmp(uint32_t a, uint32_t b)
{
    if (a == b)
        return 0;
    return ((int32_t)(a - b) < 0) ? -1 : 1;
}

static inline tb__centry *tb__ring_at(const tb__seq *s, uint32_t i)
{
    return &s->ring[(s->head + i) & (s->cap - 1)];
}

/* Fragment tokenizer (untrusted bytes; every read bounded by
 * payload_size). Inline: it is the inner loop of both copy and read. */
/* Parses a varint of at most 10 bytes from [p, end). Returns the number of
 * bytes used, or 0 if it is truncated or longer than 10 bytes. */
static inline uint32_t tb__parse_varint(const uint8_t *p, const uint8_t *end,
                             uint64_t *value)
{
    if (p < end && !(p[0] & 0x80u)) { /* 1-byte fast path */
        *value = p[0];
        return 1;
    }
    uint64_t v = 0;
    for (uint32_t i = 0; i < 10 && p + i < end; i++) {
        uint8_t byte = p[i];
        v |= (uint64_t)(byte & 0x7Fu) << (7u * i);
        if (!(byte & 0x80u)) {
            *value = v;
            return i + 1;
        }
    }
    return 0;
}

static inline int tb__frag_role(bool first, bool last, uint8_t flags)
{
    bool cont_from_prev = flags & TB_CHUNK_FIRST_PACKET_CONTINUES_FROM_PREV;
    bool cont_on_next = flags & TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT;
    if (last && cont_on_next)
        return (first && cont_from_prev) ? TB__CONT : TB__BEGIN;
    if (first && cont_from_prev)
        return TB__END;
    return TB__WHOLE;
}

/* Tokenizes the fragment at *off. On TB__FRAG_OK advances *off past it and
 * fills *out; otherwise leaves *off unchanged. */
static inline int tb__next_frag(const uint8_t *payload, uint32_t payload_size,
                  uint32_t *off, uint8_t flags, tb__frag *out)
{
    uint32_t pos = *off;
    if (pos >= payload_size)
        return TB__FRAG_NONE;
    const uint8_t *end = payload + payload_size;
    uint64_t size = 0;
    uint32_t hdr = tb__parse_varint(payload + pos, end, &size);
    if (hdr == 0)
        return TB__FRAG_CORRUPT;
    if (size == TB_PACKET_SIZE_DROP_PACKET)
        return TB__FRAG_DROP;
    if (size > (uint64_t)(payload_size - pos - hdr))
        return TB__FRAG_CORRUPT;
    uint32_t next = pos + hdr + (uint32_t)size;
    out->pos = pos;
    out->hdr = hdr;
    out->size = (uint32_t)size;
    out->role = tb__frag_role(pos == 0, next >= payload_size, flags);
    *off = next;
    return TB__FRAG_OK;
}


/* The growable arrays of a buffer (sequences, loss entries, writer stats,
 * slices, fragments, rewind items, stalled keys): arr, of *cap elements of
 * elem bytes, made to hold at least `need`, doubling from `first`. Returns
 * the array to use from now on, or NULL (arr and *cap untouched) when
 * memory or size_t runs out; *cap is updated only on success. */
static inline void *tb__grow(void *arr, size_t *cap, size_t need,
                             size_t elem, size_t first)
{
    if (need <= *cap)
        return arr;
    size_t c = *cap ? *cap : first;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem)
        return NULL;
    void *n = realloc(arr, c * elem);
    if (n)
        *cap = c;
    return n;
}

/* tb_mem.c: a ring of size bytes (not necessarily zeroed: see there). */
uint8_t *tb__mem_alloc(size_t size);
void tb__mem_free(uint8_t *mem, size_t size);

/* Whole packets among n > 0 fragments tiling a payload, from the copy-time
 * summary: the non-empty fragments less a non-empty first one that does not
 * start a packet (role `first`) and a non-empty last one that does not end
 * one (role `last`). Shared by tb__facts_from_summary and
 * tb__starts_from_summary. */
static inline uint32_t tb__whole_in_summary(int first, int last, uint32_t n,
                                            uint32_t first_size,
                                            uint32_t last_size,
                                            uint32_t nonempty)
{
    uint32_t whole = nonempty;
    if (first != TB__WHOLE && first_size > 0)
        whole--;
    if (n > 1 && last != TB__WHOLE && last_size > 0)
        whole--;
    return whole;
}

/* tb_frag.c */
uint8_t tb__facts_from_summary(uint32_t n, uint32_t first_size,
                               uint32_t last_size, uint32_t nonempty,
                               uint8_t flags);
uint8_t tb__compute_facts(const uint8_t *payload, uint32_t payload_size,
                          uint8_t flags);

/* tb_loss.c */
tb_seq_loss *tb__loss_entry(tb_buffer *b, tb__seq *s, uint32_t key,
                            uint32_t uid);
/* s's entry: cached after the first lookup (the hot paths come here). */
static inline tb_seq_loss *tb__loss_of(tb_buffer *b, tb__seq *s)
{
    return s->loss_idx ? &b->lossv[s->loss_idx - 1]
                       : tb__loss_entry(b, s, s->key, s->uid);
}
void tb__lose(tb_buffer *b, tb__seq *s, uint32_t key, int cause,
              uint64_t packets, uint64_t bytes);
uint32_t tb__starts_from_summary(uint32_t n, uint32_t first_size,
                                 uint32_t last_size, uint32_t nonempty,
                                 uint8_t flags);
uint32_t tb__count_starts(const uint8_t *payload, size_t size,
                          uint32_t nfrags, uint8_t flags, uint32_t from,
                          uint32_t *bad);
void tb__loss_gap_set(tb_buffer *b, uint32_t key, uint32_t uid);
uint32_t tb__loss_gap_take(tb_buffer *b, tb__seq *s);
void tb__loss_free(tb_buffer *b);
int tb__loss_clone(tb_buffer *dst, const tb_buffer *src);

/* tb_seq.c */
/* A uid's entry in b->uids: kept while it has a sequence, holds an own
 * entry of a per-writer table, or is marked. */
typedef struct tb__uid_seqs {
    uint32_t uid;
    uint32_t nseqs;         /* its sequences in b->seqs */
    uint32_t held[TB__NTABS]; /* own entries of its writers per table
                               (tb_share.c) */
    bool agg_gap;           /* a writer of it whose refusal for the bound
                               is counted in the loss aggregate (tb_loss.c) */
} tb__uid_seqs;

tb__seq *tb__seq_find(const tb_buffer *b, uint32_t key);
int tb__seq_create(tb_buffer *b, uint32_t key, uint16_t producer_id,
                   uint16_t writer_id, uint32_t uid, int32_t pid,
                   tb__seq **out);
uint32_t tb__default_max_seqs_per_uid(size_t size);
void tb__set_max_seqs_per_uid(tb_buffer *b, uint32_t n);
uint32_t tb__uid_num_sequences(const tb_buffer *b, uint32_t uid);
tb__uid_seqs *tb__uid_find(const tb_buffer *b, uint32_t uid);
tb__uid_seqs *tb__uid_get(tb_buffer *b, uint32_t uid);
void tb__uid_release(tb_buffer *b, uint32_t uid);
int tb__uid_mark_agg_gap(tb_buffer *b, uint32_t uid);
int tb__seq_insert(tb__seq *s, uint32_t pos, uint32_t chunk_id,
                   uint32_t off);
uint32_t tb__seq_lower_bound(const tb__seq *s, uint32_t chunk_id);
bool tb__seq_find_chunk(const tb__seq *s, uint32_t chunk_id,
                        uint32_t *idx);
void tb__seq_erase_head(tb_buffer *b, tb__seq *s);
void tb__seq_gc(tb_buffer *b);
void tb__seq_free_all(tb_buffer *b);
int tb__seq_clone_all(tb_buffer *dst, const tb_buffer *src);
uint32_t tb__num_sequences(const tb_buffer *b);

/* tb_share.c: fair shares of the per-writer tables among uids. */
#define TB__NO_ENTRY UINT32_MAX
uint32_t tb__share_held(const tb_buffer *b, int tab, uint32_t uid);
int tb__share_add(tb_buffer *b, int tab, uint32_t idx, uint32_t uid);
uint32_t tb__share_pick(tb_buffer *b, int tab, uint32_t uid, uint32_t nown,
                        bool (*spare)(const tb_buffer *b, uint32_t idx));
void tb__share_move(tb_buffer *b, int tab, uint32_t idx, uint32_t uid);
int tb__share_clone(tb__share *dst, const tb__share *src, uint32_t nown);
void tb__share_free(tb__share *sh);
/* Slot of key in an index hash of cap slots (a power of two): the
 * multiplicative hash's bits from `shift` up (each table its own). */
static inline uint32_t tb__index_slot(uint32_t key, unsigned shift,
                                      uint32_t cap)
{
    return (uint32_t)((key * 0x9E3779B1u) >> shift) & (cap - 1);
}
/* Puts index idx (stored as idx + 1) for key into the first free slot
 * from its home (linear probing; the hash has room). */
static inline void tb__index_put(uint32_t *hash, uint32_t cap,
                                 unsigned shift, uint32_t key, uint32_t idx)
{
    uint32_t j = tb__index_slot(key, shift, cap);
    while (hash[j] != 0)
        j = (j + 1) & (cap - 1);
    hash[j] = idx + 1;
}
/* Index + 1 of key in an index hash (key_at gives the key of an index),
 * 0 if it is not there or the hash has no slots (cap 0). */
uint32_t tb__index_find(const uint32_t *hash, uint32_t cap, unsigned shift,
                        uint32_t key, const tb_buffer *b,
                        uint32_t (*key_at)(const tb_buffer *b, uint32_t idx));
void tb__index_remove(uint32_t *hash, uint32_t cap, unsigned shift,
                      uint32_t key, uint32_t idx, const tb_buffer *b,
                      uint32_t (*key_at)(const tb_buffer *b, uint32_t idx));

/* Hash slot of key in b->hash (cap a power of two). */
static inline uint32_t tb__seq_hash_slot(uint32_t key, uint32_t cap)
{
    return (uint32_t)((key * 0x9E3779B1u) >> 7) & (cap - 1);
}

/* Prefetch hints for the copy path (tb_write.c), without effects: the
 * lines of key's sequence (first hash probe only: a miss just fetches a
 * useless line), and of its first ring entry and loss entry. Inline:
 * GCC's IPA pure-const pass may take an out-of-line function that only
 * reads and prefetches for one without effects and delete its calls. */
/* The sequence in the first hash probe of key (maybe another one). */
__attribute__((always_inline)) static inline const tb__seq *
tb__seq_first_probe(const tb_buffer *b, uint32_t key)
{
    if (b->hash_cap == 0)
        return NULL;
    uint32_t v = b->hash[tb__seq_hash_slot(key, b->hash_cap)];
    return v ? &b->seqs[v - 1] : NULL;
}

__attribute__((always_inline)) static inline void tb__seq_prefetch(
        const tb_buffer *b, uint32_t key)
{
    const tb__seq *s = tb__seq_first_probe(b, key);
    if (!s)
        return;
    const uint8_t *p = (const uint8_t *)(const void *)s;
    __builtin_prefetch(p, 1);
    __builtin_prefetch(p + offsetof(tb__seq, loss_idx), 1);
}

__attribute__((always_inline)) static inline void tb__seq_prefetch_head(
        const tb_buffer *b, uint32_t key)
{
    const tb__seq *s = tb__seq_first_probe(b, key);
    if (!s || s->key != key || s->count == 0)
        return;
    __builtin_prefetch(tb__ring_at(s, 0), 1);
    if (s->loss_idx) {
        const tb_seq_loss *e = &b->lossv[s->loss_idx - 1];
        __builtin_prefetch(&e->lost_packets[TB_CAUSE_OVERWRITE], 1);
        __builtin_prefetch(&e->lost_bytes[TB_CAUSE_OVERWRITE], 1);
    }
}

/* The window of ring lines to prefetch next: from `start` up to
 * `start + ahead` (within `limit`), each line once: *cursor remembers how
 * far earlier calls got, and starts again at `start` when it lies behind
 * it or beyond the window (first call, wrap, rewind, a new read pass). At
 * most `max` bytes of lines per call. Returns the window's end, sets
 * *from to its start (64-byte aligned; empty when *from >= the end). The
 * write and read sides each have a cursor and issue their own prefetches
 * (tb_write.c: into L2 for writing; tb_buffer.c: into L1 or L2 for
 * reading, by the record's age; each says how far and why). */
__attribute__((always_inline)) static inline size_t tb__prefetch_window(
        size_t *cursor, size_t start, size_t ahead, size_t limit, size_t max,
        size_t *from)
{
    size_t f = *cursor;
    size_t end = (start + ahead) & ~(size_t)63;
    if (end > limit)
        end = limit;
    if (f < start || f > end)
        f = start & ~(size_t)63;
    if (end > f + max)
        end = f + max;
    if (end > f)
        *cursor = end;
    *from = f;
    return end;
}

/* tb_rewind.c: the rewind threshold of a new ring of `size` bytes (0:
 * never); the rewind itself, before a chunk is stored; a threshold of
 * one's own (tests, fuzz_tb). */
size_t tb__default_rewind_at(size_t size);
void tb__maybe_rewind(tb_buffer *b);
void tb__set_rewind_at(tb_buffer *b, size_t bytes);

/* tb_walk.c */
void tb__walk_start(tb_buffer *b, tb__walk *w, uint32_t seq_idx,
                    uint32_t target_off);
bool tb__walk_next(tb_buffer *b, tb__walk *w, int mode, tb_packet *out);
/* tb__walk_next in read mode, for the common case only: the next fragment
 * of the walk's current record is a non-empty whole packet. false (and
 * nothing changed) in every other case, which tb__walk_next then takes. */
bool tb__walk_next_whole(tb_buffer *b, tb__walk *w, tb_packet *out);
void tb__erase_target(tb_buffer *b, uint32_t off);

#endif /* LIBBUF_TB_INT_H */
