/*
 * tb_write.c - libbuf write side: CopyChunkUntrusted, eviction, patches
 * (spec trace-buffer.md §4, §5, §6, §8).
 *
 * Copy path, in order: refuse (clone / DISCARD stopped); tokenize the
 * untrusted payload to find F = bytes of the valid fragments (stop at the
 * drop sentinel or at the first malformed fragment); reserve R = F bytes
 * (complete) or the whole payload (scraped); find the sequence (hash);
 * check against last_consumed; re-commit in place / relocate if the ChunkID
 * is still in the buffer; wrap if R does not fit before the end; evict the
 * range the record will occupy; write the header and copy F bytes; insert
 * {chunk_id, offset} into the sequence's ring (append at the tail unless
 * out of order). Copy-time facts (TB__FACT_*) are computed from the stored
 * copy, so a producer racing the copy cannot make them lie.
 *
 * Eviction of [wr, wr + n): every chunk record starting in the range is
 * erased through its sequence (tb__erase_target); a record straddling the
 * range end leaves a padding record behind.
 *
 * Cost: a copy is a memcpy plus O(1) bookkeeping in the common case:
 * eviction takes the fast erase path (tb_walk.c), the sequence is found by
 * hash, its ring appends at the tail. What remains is memory latency, hidden
 * by prefetching: the source lines (to L1) before tokenizing them, and
 * after each copy the destination lines of the next 16 KiB of the ring (to
 * L2: where the next evictions also read the old headers), so that traffic
 * overlaps the next calls without holding the L1 miss buffers the
 * tokenizer needs (prefetch_write_ahead).
 * With many writers the sequences' metadata is not cached either (the
 * ring's stream evicts it between two chunks of one writer), so it is
 * prefetched in steps (tb__seq_prefetch, tb__seq_prefetch_head): at the
 * end of a copy, when there are more than 64 sequences, walking the old
 * record headers ahead of the write cursor, the sequence lines of the
 * records 5-10 KiB ahead and the ring head and loss entries of those up to
 * 5 KiB ahead (prefetch_victims); at the start of the next copy the
 * writer's sequence and, again, the next victim's ring head and loss
 * entry; the tokenizer's work then hides those misses.
 *
 * Deviations from Perfetto (none reachable by a well-formed producer): a
 * payload larger than 65535 bytes and pri_wri_id 0 (producer 0, writer 0)
 * are refused as ABI violations instead of truncated / taken for padding;
 * flag bits other than 0x1/0x2/0x4 are ignored.
 * Beyond Perfetto: a chunk that would make a new sequence for a uid that
 * has TB_MAX_SEQS_PER_UID already is refused (new_seq; why and what it
 * costs: tb_seq.c), and GC may then run before the refusal, not only at
 * the end of a copy. The check costs the copy path nothing: it runs only
 * where a sequence is made, off the path of a writer that has one.
 * The per-writer histograms (hist_entry) are bounded like the loss table
 * and shared among uids the same way (tb_share.c), also off that path.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

_Static_assert(TB_HIST_MAX_WRITERS >= 2 &&
               TB_HIST_MAX_WRITERS < UINT32_MAX / 2, "histogram bound");

/* After each copy: ask for the ring's lines up to 16 KiB past the write
 * cursor (the next records most likely go there), each line once (b->pf_end
 * remembers how far earlier calls got), so the memory traffic of the next
 * copies overlaps this call's bookkeeping and the next calls' tokenizing
 * instead of stalling their memcpy. Into L2 (locality 2, prefetcht1), not
 * L1: lines fetched to L1 hold its miss buffers until they arrive from
 * DRAM, and the tokenizer, a chain of dependent loads through the source's
 * fragment headers, then waits behind them (with the earlier 4 KiB
 * window, prefetcht0 instead: -22% / -35% with 1 / 1000 writers).
 * How far ahead (bench_tb --quick, Perfetto's workload, ratios to memcpy
 * in the same run, 2026-12-05): the next 4 KiB only, as until then,
 * 0.73-0.82x / 0.72-0.77x; up to 16 KiB, each line once, 1.05-1.10x /
 * 0.90x. Against a memcpy run a minute apart: 4 KiB to 8 KiB ahead
 * 0.90-1.00x / 0.70-0.86x; 24, 32 and 64 KiB no better than 16; no
 * prefetch 0.40-0.46x. In shmtraced too (1 KiB packets, 1 producer,
 * 256 MB, three rounds of 4 recordings alternating, 2026-12-05): without
 * it the service took 397 ns of CPU per packet (median) against 342.
 * Tried and not kept (2026-12-05): non-temporal stores for the payload's
 * full lines (SSE2 movntdq; the first and last line cached), with the
 * write-ahead prefetch replaced by one of the next victim's header. On
 * their own such stores wrote 4 KiB pieces into a 64 MiB ring at 1.6-1.8x
 * memcpy's speed, but here write1 ran at 0.67x and write1000 at 0.68x of
 * this code (bench/ab_libbuf.sh, 8 rounds each): eviction's header reads
 * lost their prefetch, and a prefetch issued amid the streaming stores
 * stalled (perf: 16% of the copy's samples on each). An sfence after each
 * copy, which another thread reading the ring would need, alone took a
 * micro from 35 to 15 GB/s.
 * Also tried (2026-12-05, AMD EPYC VM, ab_libbuf 10 rounds each), not
 * kept: asking for these lines four per loop turn instead of one, 0.80x
 * of this code in write1 (not explained; a guess: prefetcht1s back to
 * back wait for miss buffers that single ones did not).
 * Keeping the ChunkID of each sequence's last ring entry in tb__seq, so
 * that the order check below needs no load from that entry's line (16%
 * of this function's samples with 1000 writers): write1000 1.000x, no
 * time saved (that load's samples went, the function's share stayed:
 * the wait seems to move to the next miss); prefetching the entry to
 * append and the loss entry as well, 0.98x. Two- and four-byte varints
 * decoded without the byte loop, and the source prefetch four lines per
 * turn: callgrind counts 1279 -> 922 instructions per chunk (bench_tb
 * write1) with the write ahead unrolled too, but without that the time
 * moved within the noise (write1 1.011x, write1000 0.956x, read 0.976x,
 * while HEAD against itself gave 0.965-0.977x in the same hour): with
 * this workload a chunk's time is its memory traffic.
 * On the next host (AMD EPYC family 26, 2 MiB L2; 2026-12-05 15:55-16:13
 * UTC, bench/ab_libbuf.sh, 8-10 rounds against this code), where this
 * loop holds about a third of this function's samples: 8 / 32 / 64 KiB
 * ahead write1 1.014 / 0.959 / 0.861x; into L1, prefetchnta, prefetchw:
 * write1 0.967-1.021x, write1000 1.003-1.034x; the window asked for in
 * two halves (start and end of a copy) or at the start only: write1
 * 0.891 / 0.990x, write1000 1.041 / 0.949x. None kept: single rounds
 * there spread by +-30%.
 * Also on that host (2026-12-05 19:0x UTC), with the victim lookahead
 * below: asking at the start of a copy for the writer's ring tail entry,
 * the slot to append and its histogram lines (through the sequence
 * fetched a moment before: a demand load the tokenizer overlaps): write1000
 * 1.072x, then 1.009x (16 rounds each), then 1.028x over 24 where A/A gave
 * 0.995x; with the tail entry asked for too 1.022x (16), 0.990x (24);
 * write1 1.005 / 1.077x (12). Not kept: no gain beyond the noise, as on
 * the earlier host. */
#ifndef TB__WRITE_PREFETCH_AHEAD
#define TB__WRITE_PREFETCH_AHEAD 16384u
#endif
static void prefetch_write_ahead(tb_buffer *b)
{
    /* no cap of its own: a call asks for at most its window */
    size_t from, end = tb__prefetch_window(&b->pf_end, b->wr,
                                           TB__WRITE_PREFETCH_AHEAD, b->size,
                                           TB__WRITE_PREFETCH_AHEAD, &from);
    for (size_t a = from; a < end; a += 64)
        __builtin_prefetch(b->mem + a, 1, 2); /* prefetcht1: into L2 */
}

/* Victim lookahead. With many writers the metadata of the records that
 * eviction will erase next is in memory, not in any cache: a record's ring
 * entry was last touched when the record was appended, a lap of the ring
 * ago. Its sequence line, its ring head entry and its loss entry are
 * needed, one behind the other, when eviction erases it (tb__erase_target).
 * So after each copy two cursors walk the old record headers ahead of the
 * write cursor (lines the write-ahead prefetch asked for a copy or more
 * earlier): up to TB__VIC_SEQ_AHEAD bytes ahead, each record's sequence
 * line is asked for; up to TB__VIC_HEAD_AHEAD, by when that line has come,
 * its ring head and loss entry (tb__seq_prefetch_head). Each record is
 * visited once per stage; at most TB__VIC_STEP records per call.
 * The cursors are hints: the records between wr and a cursor keep their
 * sizes until wr reaches them (eviction starts at wr and leaves every old
 * boundary past the new record's end in place; patches, re-commits and
 * reads change no size), so a cursor stays on a record boundary; one
 * behind wr or past the window (a wrap, a rewind, the first call) starts
 * again at wr. Every header read is bounds-checked against used_size, and
 * a key that is not a live sequence's only fetches a useless line.
 * Until then only the next victim's metadata was asked for, at the end of
 * the previous copy: with 1000 writers tb__erase_target still waited on
 * its ring head entry in 89% of its samples (8% of bench_tb --only
 * write1000's). Measured (2026-12-05 18:4x UTC, AMD EPYC family 26,
 * bench/ab_libbuf.sh against the code before, same process), 10 / 5 KiB
 * ahead: write1000 1.078x median over 20 rounds (ahead in 17), 1.092x and
 * 1.100x over 12 and 10 in other runs, where A/A gave 0.933-1.014x;
 * write1 1.010x (20 rounds), 0.970-0.984x (10); svc1k 1.025x. Other
 * distances, write1000: 12 / 6 KiB 1.021-1.100x, 8 / 4 KiB 1.056-1.079x,
 * 6 / 3 KiB 1.067x, 12 / 4 KiB 1.047x, 12 / 8 KiB 0.995x; 16 KiB and more
 * ahead 0.65-0.82x (the header reads then outrun the write-ahead
 * prefetch: demand misses). */
#ifndef TB__VIC_SEQ_AHEAD
#define TB__VIC_SEQ_AHEAD 10240u
#endif
#ifndef TB__VIC_HEAD_AHEAD
#define TB__VIC_HEAD_AHEAD 5120u
#endif
#define TB__VIC_STEP 8
/* With few sequences their metadata stays cached (64 writers' chunks of
 * 4 KiB put 256 KiB of ring between two chunks of one writer, against a
 * 2 MiB L2) and the walk is only work: write1 0.965-0.967x of the code
 * before in two runs of 24 rounds with it always on (A/A 1.007-1.016x),
 * 1.007x with it off up to 64 sequences (write1000 1.058x, svc1k 1.028x,
 * 2026-12-05 19:15 UTC). With few sequences, the end-of-copy ask for the
 * next victim's metadata that the walk replaced (see its call) changed
 * nothing (write1 1.010x, write1000 1.054x): not restored. As kept,
 * against the code before (19:55-19:58 UTC, runs of 20 rounds, each
 * followed by an A/A run of the code before against itself): write1000
 * 1.069 / 1.069 / 1.155x (A/A 0.998 / 0.994 / 0.981x) and 1.010x once,
 * write1 1.015 / 0.989x (A/A 0.997 / 1.026x), svc1k 0.999x. */
#define TB__VIC_MIN_SEQS 64u

__attribute__((always_inline)) static inline size_t
prefetch_victims_stage(const tb_buffer *b, size_t cur, size_t ahead,
                       bool head)
{
    size_t end = b->wr + ahead;
    if (cur < b->wr || cur > end)
        cur = b->wr;
    for (int n = 0; n < TB__VIC_STEP && cur < end &&
                    cur + TB__REC_HDR_BYTES <= b->used_size; n++) {
        const tb__rec *r = tb__rec_at(b, cur);
        uint32_t key = r->pri_wri_id;
        if (key != 0) {
            if (head)
                tb__seq_prefetch_head(b, key);
            else
                tb__seq_prefetch(b, key);
        }
        cur += tb__outer(r->size);
    }
    return cur;
}

static void prefetch_victims(tb_buffer *b)
{
    b->vic_seq_pf = prefetch_victims_stage(b, b->vic_seq_pf,
                                           TB__VIC_SEQ_AHEAD, false);
    b->vic_head_pf = prefetch_victims_stage(b, b->vic_head_pf,
                                            TB__VIC_HEAD_AHEAD, true);
}

static void evict(tb_buffer *b, size_t start, size_t n)
{
    size_t end = start + n, off = start, straddle_end = 0;
    /* The new record's bytes, and the padding header that may follow them
     * inside an old record's payload. */
    tb__fence(b, start, end + TB__REC_HDR_BYTES <= b->size
                        ? n + TB__REC_HDR_BYTES : n);
    /* New records go here: a read floor inside no longer has only erased
     * records before it (tb_int.h). */
    if (b->rd_floor_valid && b->rd_floor >= start && b->rd_floor < end)
        b->rd_floor_valid = false;
    while (off < end && off < b->used_size) {
        tb__rec *r = tb__rec_at(b, off);
        size_t outer = tb__outer(r->size);
        if (r->pri_wri_id == 0)
            b->stats.padding_bytes_cleared += outer;
        else
            tb__erase_target(b, (uint32_t)off);
        if (off + outer > end)
            straddle_end = off + outer;
        off += outer;
    }
    if (straddle_end) {
        tb__rec *pad = tb__rec_at(b, end);
        memset(pad, 0, sizeof(*pad));
        pad->size = (uint16_t)(straddle_end - end - TB__REC_HDR_BYTES);
        b->stats.padding_bytes_written += straddle_end - end;
    }
}

/* Loss accounting of a refused chunk, or of the fragments of a chunk that
 * did not tokenize (tb_loss.c): `starts` first fragments offered and lost
 * to `cause`, `bad` declared fragments lost to ABI_VIOLATION, for key's
 * writer (its sequence s, or NULL to look it up; uid: the chunk's). Cold:
 * only refusals come here. */
static __attribute__((noinline, cold)) void refuse(tb_buffer *b,
        tb__seq *s, uint32_t key, uint32_t uid, int cause, uint32_t starts,
        uint32_t bad, uint64_t bytes)
{
    tb_seq_loss *e = key ? tb__loss_entry(b, s, key, uid) : NULL;
    if (!e)
        return;
    e->packets_offered += (uint64_t)starts + bad;
    e->lost_packets[cause] += starts;
    e->lost_bytes[cause] += bytes;
    e->lost_packets[TB_CAUSE_ABI_VIOLATION] += bad;
}

/* Whether, tokenizing payload[0, size) from its start, a fragment begins
 * exactly at `at` (a re-admitted chunk must resume on a boundary). */
static bool frag_boundary(const uint8_t *payload, uint32_t size,
                          uint8_t flags, uint32_t at)
{
    uint32_t off = 0;
    tb__frag f;
    while (off < at)
        if (tb__next_frag(payload, size, &off, flags, &f) != TB__FRAG_OK)
            return false;
    return off == at;
}

/* Patched bytes can move fragment boundaries (a patch over a fragment
 * header): count again the packet starts the reader will meet from where
 * it stands, tokenizing as it will, so that the loss accounting stays exact
 * (new starts are offered, vanished ones lost; found by fuzz_tb). */
static void recount_starts(tb_buffer *b, tb__seq *s, uint32_t idx)
{
    tb__centry *ce = tb__ring_at(s, idx);
    tb__rec *r = tb__rec_at(b, ce->off);
    const uint8_t *p = tb__payload(b, ce->off);
    uint32_t off = (uint32_t)r->payload_size - r->payload_avail, npk = 0;
    uint32_t last_body = TB__LAST_BODY_UNKNOWN;
    tb__frag f;
    while (tb__next_frag(p, r->payload_size, &off, r->flags, &f) ==
           TB__FRAG_OK) {
        last_body = f.pos + f.hdr;
        if ((f.role == TB__WHOLE && f.size > 0) || f.role == TB__BEGIN)
            npk++;
    }
    /* The new boundaries hold from here on; known only if they reach the
     * end of the payload. */
    ce->last_body = off == r->payload_size ? last_body
                                           : TB__LAST_BODY_UNKNOWN;
    if (npk > ce->npk) {
        tb_seq_loss *le = tb__loss_of(b, s);
        if (le)
            le->packets_offered += npk - ce->npk;
    } else if (npk < ce->npk) {
        tb__lose(b, s, s->key, TB_CAUSE_ABI_VIOLATION, ce->npk - npk, 0);
    }
    ce->npk = npk;
}

/* A chunk refused before it was tokenized: tokenize it to count. */
static __attribute__((noinline, cold)) void refuse_raw(tb_buffer *b,
        uint16_t producer_id, uint32_t uid, uint16_t writer_id,
        uint16_t num_fragments, uint8_t chunk_flags, bool chunk_complete,
        const uint8_t *src, size_t size)
{
    uint8_t flags = chunk_flags & TB__ABI_FLAGS;
    if (!chunk_complete && num_fragments > 0) {
        num_fragments--;
        flags &= (uint8_t)~(TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT |
                            TB_CHUNK_NEEDS_PATCHING);
    }
    uint32_t bad = 0;
    uint32_t starts = tb__count_starts(src, src ? size : 0, num_fragments,
                                       flags, 0, &bad);
    uint32_t key = ((uint32_t)producer_id << 16) | writer_id;
    refuse(b, NULL, key, uid, TB_CAUSE_DISCARD, starts, bad,
           src ? size : 0);
}

/* Re-commit of a ChunkID still in the buffer (§6). Returns true when the
 * chunk was handled (rewritten in place or rejected); false when E was
 * relocated: the caller writes a new record skipping *skip bytes. */
static bool recommit(tb_buffer *b, tb__seq *s, uint32_t idx, uint8_t flags,
                     bool complete, const uint8_t *src, uint32_t frags_size,
                     uint32_t *skip)
{
    uint32_t off = tb__ring_at(s, idx)->off;
    tb__rec *e = tb__rec_at(b, off);
    uint8_t old_abi = e->flags & TB__ABI_FLAGS;
    uint32_t done = (uint32_t)e->payload_size - e->payload_avail;
    /* A writer only appends: bytes already read from the earlier copy must
     * come back unchanged, else the reader's position would land inside
     * new fragments and deliver packets never offered (found by fuzz_tb). */
    if (frags_size < e->payload_size || frags_size > e->size ||
        (old_abi & flags) != old_abi ||
        (done && memcmp(tb__payload(b, off), src, done) != 0)) {
        b->stats.abi_violations++;
        refuse(b, s, s->key, s->uid, TB_CAUSE_ABI_VIOLATION,
               tb__count_starts(src, frags_size, UINT32_MAX, flags,
                                e->payload_size, NULL), 0,
               frags_size > e->payload_size ? frags_size - e->payload_size
                                            : 0);
        return true;
    }
    if ((e->flags & TB__F_INCOMPLETE) && e->payload_avail == 0 && complete &&
        frags_size > e->payload_size && idx == 0 &&
        b->policy == TB_RING_BUFFER) {
        b->stats.chunks_relocated++;
        *skip = e->payload_size;
        tb__seq_erase_head(b, s);
        return false;
    }
    if (complete)
        e->flags &= (uint8_t)~TB__F_INCOMPLETE;
    if (frags_size == e->payload_size)
        return true;
    uint32_t consumed = (uint32_t)e->payload_size - e->payload_avail;
    e->payload_size = (uint16_t)frags_size;
    e->payload_avail = (uint16_t)(frags_size - consumed);
    tb__fence(b, (size_t)off + TB__REC_HDR_BYTES, frags_size);
    /* The bytes already read stay as they are (they matched above): a
     * shared source may have changed them since (tb_copy_chunk_shared);
     * everything below is computed from what is stored. */
    memcpy(tb__payload(b, off) + consumed, src + consumed,
           frags_size - consumed);
    e->flags |= flags;
    e->facts = tb__compute_facts(tb__payload(b, off), e->payload_size,
                                 e->flags);
    tb__centry *ce = tb__ring_at(s, idx);
    ce->last_body = TB__LAST_BODY_UNKNOWN; /* the payload grew */
    uint32_t npk = tb__count_starts(tb__payload(b, off), e->payload_size,
                                    UINT32_MAX, e->flags, consumed, NULL);
    tb_seq_loss *le = tb__loss_of(b, s);
    if (le && npk > ce->npk)
        le->packets_offered += npk - ce->npk;
    else if (npk < ce->npk) /* a hostile rewrite took packet starts away
                               (e.g. a first fragment became a continuation):
                               those packets are lost (found by fuzz_tb) */
        tb__lose(b, s, s->key, TB_CAUSE_ABI_VIOLATION, ce->npk - npk, 0);
    ce->npk = npk;
    b->stats.chunks_rewritten++;
    return true;
}

/* b->hhash: pri_wri_id -> index + 1 into b->hist (linear probing, load
 * <= 1/2). The overflow entry (key 0) is in it too; no lookup asks for
 * key 0. A key leaves it only when its entry is folded (hist_fold). */
#define HIST_HASH_SHIFT 11u

static uint32_t hist_key(const tb_writer_stats *e)
{
    return ((uint32_t)e->producer_id << 16) | e->writer_id;
}

static uint32_t hist_key_at(const tb_buffer *b, uint32_t idx)
{
    return hist_key(&b->hist[idx]);
}

static int hhash_grow(tb_buffer *b)
{
    uint32_t cap = b->hhash_cap ? b->hhash_cap * 2 : 64;
    uint32_t *h = calloc(cap, sizeof(*h));
    if (!h)
        return -1;
    for (size_t i = 0; i < b->nhist; i++)
        tb__index_put(h, cap, HIST_HASH_SHIFT, hist_key(&b->hist[i]),
                      (uint32_t)i);
    free(b->hhash);
    b->hhash = h;
    b->hhash_cap = cap;
    return 0;
}

/* Appends an empty entry for key, held by uid (key 0: the overflow entry,
 * held by none); its index + 1, 0 when out of memory (nothing changed). */
static uint32_t hist_new(tb_buffer *b, uint32_t key, uint32_t uid)
{
    if ((uint64_t)(b->nhist + 1) * 2 > b->hhash_cap && hhash_grow(b) < 0)
        return 0;
    tb_writer_stats *h = tb__grow(b->hist, &b->hist_cap, b->nhist + 1,
                                  sizeof(*h), 16);
    if (!h)
        return 0;
    b->hist = h;
    if (key != 0 &&
        tb__share_add(b, TB__TAB_HIST, (uint32_t)b->nhist, uid) < 0)
        return 0;
    tb_writer_stats *e = &b->hist[b->nhist];
    memset(e, 0, sizeof(*e));
    e->producer_id = (uint16_t)(key >> 16);
    e->writer_id = (uint16_t)key;
    tb__index_put(b->hhash, b->hhash_cap, HIST_HASH_SHIFT, key,
                  (uint32_t)b->nhist);
    return (uint32_t)++b->nhist;
}

/* Folding costs least for a writer with no sequence: no more samples. */
static bool hist_spare(const tb_buffer *b, uint32_t idx)
{
    return tb__seq_find(b, hist_key_at(b, idx)) == NULL;
}

/* Own entry idx is folded into the overflow entry (which exists) and
 * becomes key's, empty (tb_share.c): its samples count as untracked from
 * now on, like every later one of its writer, whose sequence, if any, is
 * pointed at the overflow entry. */
static void hist_fold(tb_buffer *b, uint32_t idx, uint32_t key)
{
    tb_writer_stats *e = &b->hist[idx], *over = &b->hist[b->hist_over - 1];
    uint32_t old = hist_key(e);
    for (int i = 0; i < TB_HIST_BUCKETS; i++) {
        over->count[i] += e->count[i];
        over->sum[i] += e->sum[i];
        b->stats.hist_chunks_untracked += e->count[i];
    }
    tb__seq *s = tb__seq_find(b, old);
    if (s && s->hist_idx == idx + 1)
        s->hist_idx = b->hist_over;
    tb__index_remove(b->hhash, b->hhash_cap, HIST_HASH_SHIFT, old, idx, b,
                     hist_key_at);
    memset(e, 0, sizeof(*e));
    e->producer_id = (uint16_t)(key >> 16);
    e->writer_id = (uint16_t)key;
    tb__index_put(b->hhash, b->hhash_cap, HIST_HASH_SHIFT, key, idx);
}

/* Index + 1 of the histogram entry of key, a writer of uid: found; made
 * while there is room (TB_HIST_MAX_WRITERS - 1 writers' entries); else
 * one of the top uid's folded for it (tb_share.c) or the overflow entry
 * (made the first time). 0 when out of memory. Runs once per sequence,
 * so neither the bound nor the sharing costs the hot path anything. */
static uint32_t hist_entry(tb_buffer *b, uint32_t key, uint32_t uid)
{
    uint32_t found = tb__index_find(b->hhash, b->hhash_cap, HIST_HASH_SHIFT,
                                    key, b, hist_key_at);
    if (found)
        return found;
    if (b->nhist < TB_HIST_MAX_WRITERS - 1)
        return hist_new(b, key, uid);
    if (b->hist_over == 0 && (b->hist_over = hist_new(b, 0, 0)) == 0)
        return 0;
    uint32_t idx = tb__share_pick(b, TB__TAB_HIST, uid,
                                  TB_HIST_MAX_WRITERS - 1, hist_spare);
    if (idx == TB__NO_ENTRY)
        return b->hist_over;
    hist_fold(b, idx, key);
    tb__share_move(b, TB__TAB_HIST, idx, uid);
    return idx + 1;
}

/* Adds one histogram sample for the sequence's writer (spec §10). The
 * entry is found once per sequence (hash: a linear search made the first
 * lap with 1000 writers 7% slower) and cached in it. A writer without an
 * entry of its own (the table was full) adds to the overflow entry and to
 * hist_chunks_untracked: one compare per chunk (hist_over is 0, never
 * equal, until the table fills). */
static inline void hist_sample(tb_buffer *b, uint32_t idx, uint32_t value)
{
    static const uint32_t thresholds[] = TB_HIST_THRESHOLDS;
    if (__builtin_expect(idx == b->hist_over, 0))
        b->stats.hist_chunks_untracked++;
    size_t bucket = 0;
    while (bucket < TB_HIST_BUCKETS - 1 && value > thresholds[bucket])
        bucket++;
    tb_writer_stats *e = &b->hist[idx - 1];
    e->count[bucket]++;
    e->sum[bucket] += value;
}

static void hist_add(tb_buffer *b, tb__seq *s, uint32_t value)
{
    if (s->hist_idx == 0 &&
        (s->hist_idx = hist_entry(b, s->key, s->uid)) == 0)
        return; /* a sample lost to OOM; nothing else */
    hist_sample(b, s->hist_idx, value);
}

/* The chunk's writer has no sequence: make it, unless its uid has its
 * bound of sequences already (trace_buffer.h, TB_MAX_SEQS_PER_UID; the
 * count is kept in tb_seq.c). Then the chunk is refused: counted in
 * chunks_discarded and seq_cap_*, its packets lost to DISCARD for its
 * writer, whose next sequence will start with a read gap (tb_loss.c); it
 * still makes its histogram sample (every copy past the size check
 * does). Returns the sequence, or NULL when the chunk was refused (for
 * the bound or out of memory). Cold: once per writer, unless a uid is at
 * its bound. */
static __attribute__((noinline, cold)) tb__seq *new_seq(tb_buffer *b,
        uint32_t key, uint16_t producer_id, uint16_t writer_id, uint32_t uid,
        int32_t pid, uint32_t npk, uint32_t frags_size, size_t size)
{
    tb__seq *s;
    int rc = tb__seq_create(b, key, producer_id, writer_id, uid, pid, &s);
    if (rc == -EDQUOT) {
        /* The uid's sequences may be empty ones due for GC, which runs
         * otherwise only after a copy that stored something: if all of
         * that uid's chunks were for new writers and every other uid were
         * idle, it would never run and the uid would stay refused. GC is
         * amortized as at the end of a copy (it runs once more than
         * TB__EMPTY_SEQ_GC_THRESHOLD sequences are empty, and deletes
         * all but TB__KEEP_LAST_EMPTY_SEQ). */
        tb__seq_gc(b);
        rc = tb__seq_create(b, key, producer_id, writer_id, uid, pid, &s);
    }
    if (rc == 0) {
        s->loss |= tb__loss_gap_take(b, s);
        return s;
    }
    b->stats.chunks_discarded++;
    if (rc != -EDQUOT) { /* out of memory */
        refuse(b, NULL, key, uid, TB_CAUSE_DISCARD, npk, 0, size);
        return NULL;
    }
    b->stats.seq_cap_chunks++;
    b->stats.seq_cap_packets += npk;
    refuse(b, NULL, key, uid, TB_CAUSE_DISCARD, npk, 0, frags_size);
    tb__loss_gap_set(b, key, uid);
    uint32_t idx = hist_entry(b, key, uid);
    if (idx)
        hist_sample(b, idx, frags_size);
    return NULL;
}

SHMTRACE_API const tb_writer_stats *tb_get_writer_stats(const tb_buffer *b,
                                                        size_t *n)
{
    if (n)
        *n = b ? b->nhist : 0;
    return (b && b->nhist) ? b->hist : NULL;
}

__attribute__((weak)) void tb__shared_race_hook(void)
{
}

/* What tokenizing a payload found: its valid prefix (frags_size) of
 * nfound fragments, what the facts and the packet starts are computed
 * from, and why it stopped early (bad: the fragments left after a corrupt
 * one; writer_abort: the drop sentinel). */
typedef struct {
    uint32_t frags_size, nfound, first_size, last_size, nonempty, bad;
    uint32_t last_body;
    bool writer_abort;
} tok_summary;

static inline void tokenize(const uint8_t *p, uint32_t tok_size,
                            uint32_t num_fragments, uint8_t flags,
                            tok_summary *t)
{
    *t = (tok_summary){.last_body = TB__LAST_BODY_UNKNOWN};
    for (uint32_t i = 0; i < num_fragments; i++) {
        tb__frag f;
        int r = tb__next_frag(p, tok_size, &t->frags_size, flags, &f);
        if (r == TB__FRAG_OK) {
            if (t->nfound++ == 0)
                t->first_size = f.size;
            t->last_size = f.size;
            t->last_body = f.pos + f.hdr;
            t->nonempty += f.size > 0;
            continue;
        }
        if (r == TB__FRAG_DROP)
            t->writer_abort = true;
        else
            t->bad = num_fragments - i;
        break;
    }
}

/* A shared source (tb_copy_chunk_shared): do the n bytes copied into the
 * buffer at p tokenize into the fragments `before` found in the source,
 * and does the re-admitted part start at a fragment boundary (skip > 0)?
 * Everything the record keeps (facts, packet starts, where its last
 * fragment's body starts) is computed from such a summary, so a yes makes
 * it exact for the bytes stored, whatever the source holds now. */
static bool copy_matches(const uint8_t *p, const tok_summary *before,
                         uint8_t flags, uint32_t skip)
{
    tok_summary t;
    tokenize(p, before->frags_size, before->nfound, flags, &t);
    return t.nfound == before->nfound &&
           t.frags_size == before->frags_size &&
           t.first_size == before->first_size &&
           t.last_size == before->last_size &&
           t.nonempty == before->nonempty &&
           t.last_body == before->last_body &&
           (skip == 0 || frag_boundary(p, t.frags_size, flags, skip));
}

static void copy_chunk(tb_buffer *b, uint16_t producer_id, uint32_t uid,
                       int32_t pid, uint16_t writer_id, uint32_t chunk_id,
                       uint16_t num_fragments, uint8_t chunk_flags,
                       bool chunk_complete, const uint8_t *src, size_t size,
                       bool shared)
{
    if (!b)
        return;
    if (b->read_only || b->discard_stop) {
        b->stats.chunks_discarded++;
        refuse_raw(b, producer_id, uid, writer_id, num_fragments,
                   chunk_flags, chunk_complete, src, size);
        return;
    }
    /* Any write restarts reading (tb_begin_read() is expected next). */
    b->walk.active = false;
    b->rd = (b->wr == b->used_size) ? 0 : b->wr;
    if (!src)
        size = 0;
    /* Tokenizing is a chase through fragment headers; fetch all the source
     * lines at once instead of one miss per fragment (the memcpy below
     * reads them anyway). A shared source is still in the caches of the
     * producer's core: all of it. */
    for (size_t a = 0; a < size && (shared || a < 4096); a += 64)
        __builtin_prefetch(src + a, 0);
    /* The metadata this copy will touch, while the tokenizer runs: the
     * writer's sequence, and the ring head and loss entry of the sequence
     * of the record at the write cursor (the first one eviction erases;
     * its sequence line was asked for at the end of the previous call). */
    tb__seq_prefetch(b, ((uint32_t)producer_id << 16) | writer_id);
    if (b->wr + TB__REC_HDR_BYTES <= b->used_size) {
        uint32_t victim = tb__rec_at(b, b->wr)->pri_wri_id;
        if (victim)
            tb__seq_prefetch_head(b, victim);
    }

    uint8_t flags = chunk_flags & TB__ABI_FLAGS;
    if (!chunk_complete) {
        flags |= TB__F_INCOMPLETE;
        if (num_fragments > 0) {
            num_fragments--;
            flags &= (uint8_t)~(TB_CHUNK_LAST_PACKET_CONTINUES_ON_NEXT |
                                TB_CHUNK_NEEDS_PATCHING);
        }
    }

    /* Tokenize the untrusted payload: F = valid prefix. Roles are decided
     * later against F; keep what the facts need (first/last sizes). */
    uint32_t tok_size = size > TB__MAX_PAYLOAD ? TB__MAX_PAYLOAD + 1u
                                               : (uint32_t)size;
    tok_summary tok;
    tokenize(src, tok_size, num_fragments, flags, &tok);
    uint32_t frags_size = tok.frags_size, nfound = tok.nfound;
    uint32_t first_size = tok.first_size, last_size = tok.last_size;
    uint32_t nonempty = tok.nonempty, bad = tok.bad;
    uint32_t last_body = tok.last_body;
    bool writer_abort = tok.writer_abort;
    if (bad)
        b->stats.abi_violations++;
    size_t reserved = chunk_complete ? frags_size : size;
    size_t outer = tb__outer(reserved);
    uint32_t key = ((uint32_t)producer_id << 16) | writer_id;
    uint32_t npk = tb__starts_from_summary(nfound, first_size, last_size,
                                           nonempty, flags);
    if (bad)
        refuse(b, NULL, key, uid, TB_CAUSE_ABI_VIOLATION, 0, bad,
               size - frags_size);
    if (reserved > TB__MAX_PAYLOAD || outer > b->size || key == 0) {
        b->stats.abi_violations++;
        refuse(b, NULL, key, uid, TB_CAUSE_ABI_VIOLATION, npk, 0, size);
        return;
    }

    /* The writer's own report of a packet it cut (the drop sentinel) is
     * counted whatever becomes of the chunk after the size check, as
     * Perfetto does: also when new_seq refuses it for its uid's bound. */
    if (writer_abort)
        b->stats.trace_writer_packet_loss++;
    tb__seq *s = tb__seq_find(b, key);
    if (__builtin_expect(!s, 0) &&
        !(s = new_seq(b, key, producer_id, writer_id, uid, pid, npk,
                      frags_size, size)))
        return;
    hist_add(b, s, frags_size);
    if (writer_abort)
        s->loss |= TB_LOSS_PRESENT | TB_LOSS_WRITER_ABORT;

    uint32_t skip = 0;
    if (s->has_last) {
        if (chunk_id == s->last_id && s->last_incomplete &&
            s->last_payload_size < frags_size) {
            skip = s->last_payload_size; /* re-admit */
            if (!frag_boundary(src, frags_size, flags, skip)) {
                /* The delivered prefix was rewritten: reading from skip
                 * would start inside a fragment (found by fuzz_tb). */
                b->stats.abi_violations++;
                refuse(b, s, key, s->uid, TB_CAUSE_ABI_VIOLATION,
                       tb__count_starts(src, frags_size, UINT32_MAX, flags,
                                        skip, NULL), 0, frags_size - skip);
                return;
            }
        } else if (tb__id_cmp(chunk_id, s->last_id) <= 0) {
            b->stats.chunks_discarded++;
            /* The chunk consumed last, committed again (a scraped chunk
             * then its real commit, or a duplicate): its packets were
             * delivered, not lost. An older ChunkID never got in: lost. */
            if (chunk_id != s->last_id)
                refuse(b, s, key, s->uid, TB_CAUSE_DISCARD, npk, 0,
                       frags_size);
            return;
        }
    }

    uint32_t idx;
    if (s->count > 0 &&
        tb__id_cmp(chunk_id, tb__ring_at(s, s->count - 1)->chunk_id) <= 0 &&
        tb__seq_find_chunk(s, chunk_id, &idx)) {
        if (recommit(b, s, idx, flags, chunk_complete, src, frags_size,
                     &skip))
            return;
    }

    if (skip)  /* re-admit / relocation: the first bytes were delivered */
        npk = tb__count_starts(src, frags_size, UINT32_MAX, flags, skip,
                               NULL);
    tb__maybe_rewind(b); /* a drained ring goes on from offset 0 */
    if (outer > b->size - b->wr) {
        if (b->policy == TB_DISCARD) {
            b->discard_stop = true;
            b->stats.chunks_discarded++;
            refuse(b, s, key, s->uid, TB_CAUSE_DISCARD, npk, 0,
                   frags_size - skip);
            return;
        }
        if (b->wr < b->size)
            evict(b, b->wr, b->size - b->wr);
        b->wr = 0;
        b->stats.write_wrap_count++;
    }
    evict(b, b->wr, outer);

    /* The sequences array may have moved? No: eviction never creates
     * sequences, so s is still valid. */
    uint32_t off = (uint32_t)b->wr;
    tb__rec *r = tb__rec_at(b, off);
    r->chunk_id = chunk_id;
    r->pri_wri_id = key;
    r->size = (uint16_t)reserved;
    r->payload_size = (uint16_t)frags_size;
    r->payload_avail = (uint16_t)(frags_size - skip);
    r->flags = flags;
    if (shared)
        tb__shared_race_hook();      /* tests only: see tb_int.h */
    if (frags_size > 0)
        memcpy(tb__payload(b, off), src, frags_size);
    if (b->wr + outer > b->used_size)
        b->used_size = b->wr + outer;
    if (shared && frags_size > 0 &&
        !copy_matches(tb__payload(b, off), &tok, flags, skip)) {
        /* The producer changed the bytes while we read them: what was
         * tokenized is not what was stored. Nothing of it is read; its
         * packets are lost, counted as an ABI violation, and the writer's
         * next packet read says so. */
        memset(r, 0, sizeof(*r));
        r->size = (uint16_t)reserved;
        b->stats.abi_violations++;
        s->loss |= TB_LOSS_PRESENT | TB_LOSS_CHUNK_CORRUPTED;
        refuse(b, s, key, s->uid, TB_CAUSE_ABI_VIOLATION, npk, 0,
               frags_size - skip);
        b->wr += outer;
        return;
    }
    if (shared && skip) /* the starts after skip, in the bytes stored */
        npk = tb__count_starts(tb__payload(b, off), frags_size, UINT32_MAX,
                               flags, skip, NULL);
    /* Facts from the tokenization above: of the bytes stored, since the
     * source was private to the caller (tb_copy_chunk_untrusted) or the
     * copy was checked against it (tb_copy_chunk_shared). */
    r->facts = tb__facts_from_summary(nfound, first_size, last_size,
                                      nonempty, flags);

    uint32_t pos = s->count;
    if (pos > 0 &&
        tb__id_cmp(chunk_id, tb__ring_at(s, pos - 1)->chunk_id) < 0) {
        pos = tb__seq_lower_bound(s, chunk_id);
        b->stats.chunks_committed_out_of_order++;
    }
    if (tb__seq_insert(s, pos, chunk_id, off) < 0) {
        /* Out of memory: the record cannot be indexed; make it padding. */
        memset(r, 0, sizeof(*r));
        r->size = (uint16_t)reserved;
        b->stats.chunks_discarded++;
        refuse(b, s, key, s->uid, TB_CAUSE_DISCARD, npk, 0,
               frags_size - skip);
        b->wr += outer;
        return;
    }
    tb__ring_at(s, pos)->npk = npk;
    tb__ring_at(s, pos)->last_body = last_body;
    tb_seq_loss *le = tb__loss_of(b, s);
    if (le)
        le->packets_offered += npk;
    if (s->count == 1 && s->counted_empty) {
        s->counted_empty = false;
        b->empty_seqs--;
    }
    b->wr += outer;
    prefetch_write_ahead(b);
    /* The metadata of the next evictions (their headers' lines asked for
     * by the write-ahead of earlier calls), when there are enough
     * sequences for it to fall out of the caches between two chunks of
     * one writer (TB__VIC_MIN_SEQS). An end-of-copy ask for the next
     * victim's ring head and for the sequence of the record behind it,
     * deeper than the start's (c0e9dfb: write1000 1.01-1.06x), is
     * subsumed by this walk further ahead. */
    if (b->nseqs > TB__VIC_MIN_SEQS)
        prefetch_victims(b);
    b->stats.chunks_written++;
    b->stats.bytes_written += outer;
    tb__seq_gc(b);
}

SHMTRACE_API void tb_copy_chunk_untrusted(tb_buffer *b, uint16_t producer_id,
        uint32_t uid, int32_t pid, uint16_t writer_id, uint32_t chunk_id,
        uint16_t num_fragments, uint8_t chunk_flags, bool chunk_complete,
        const uint8_t *src, size_t size)
{
    copy_chunk(b, producer_id, uid, pid, writer_id, chunk_id, num_fragments,
               chunk_flags, chunk_complete, src, size, false);
}

SHMTRACE_API void tb_copy_chunk_shared(tb_buffer *b, uint16_t producer_id,
        uint32_t uid, int32_t pid, uint16_t writer_id, uint32_t chunk_id,
        uint16_t num_fragments, uint8_t chunk_flags, bool chunk_complete,
        const uint8_t *src, size_t size)
{
    copy_chunk(b, producer_id, uid, pid, writer_id, chunk_id, num_fragments,
               chunk_flags, chunk_complete, src, size, true);
}

SHMTRACE_API bool tb_try_patch_chunk(tb_buffer *b, uint16_t producer_id,
        uint16_t writer_id, uint32_t chunk_id, const tb_patch *patches,
        size_t npatches, bool other_patches_pending)
{
    if (!b)
        return false;
    tb__seq *s = b->read_only ? NULL :
        tb__seq_find(b, ((uint32_t)producer_id << 16) | writer_id);
    uint32_t idx;
    if (!s || !tb__seq_find_chunk(s, chunk_id, &idx) ||
        (npatches > 0 && !patches)) {
        b->stats.patches_failed++;
        return false;
    }
    const tb__centry *ce = tb__ring_at(s, idx);
    uint32_t off = ce->off;
    tb__rec *r = tb__rec_at(b, off);
    uint32_t payload_size = r->payload_size;
    size_t applied = 0, ignored = 0;
    /* Patches usually fill the size fields of the packet that continues
     * in the next chunk: all inside the body of the last fragment, where
     * they cannot move a boundary. Any other applied patch might (it may
     * cover a fragment header): then the starts are counted again. */
    bool recount = false;
    for (size_t i = 0; i < npatches; i++) {
        uint32_t at = patches[i].offset;
        if (payload_size >= 4 && at <= payload_size - 4) {
            tb__fence(b, (size_t)off + TB__REC_HDR_BYTES + at, 4);
            memcpy(tb__payload(b, off) + at, patches[i].data, 4);
            r->facts = 0; /* bytes changed: facts no longer trusted */
            applied++;
            recount |= at < ce->last_body;
            continue;
        }
        b->stats.patches_failed++;
        if (at >= payload_size) {
            /* Wholly past the valid bytes, which are all that is ever
             * read: it cannot change a packet. Perfetto's SDK sends such
             * patches for the size fields of a packet it dropped after
             * beginning it at the end of the chunk (SMB full), having
             * taken the fragment back out of the chunk. Counted, and
             * otherwise treated as applied: refusing the record's last
             * patch would leave it needing patches forever and stall its
             * sequence until the ring overwrote it (all of refgen's data
             * under load). */
            ignored++;
            continue;
        }
        /* Across the end of the valid bytes: the last fragment can no
         * longer be trusted; the reader drops its packet (tb_walk.c). */
        r->facts = TB__FACT_PATCH_FAILED;
        if (recount) /* the patches before this one were applied */
            recount_starts(b, s, idx);
        return false;
    }
    if (ignored == 0) /* as for a refused batch: none counted succeeded */
        b->stats.patches_succeeded += applied;
    if (!other_patches_pending)
        r->flags &= (uint8_t)~TB_CHUNK_NEEDS_PATCHING;
    if (recount)
        recount_starts(b, s, idx);
    return ignored == 0;
}
