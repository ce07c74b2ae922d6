/*
 * tb_rewind.c - a drained ring buffer starts again at offset 0.
 *
 * Why: a service that writes its trace into a file (write_into_file) reads
 * each buffer while the producers write it, a few MiB behind the write
 * cursor. Left alone, the writer still walks the whole ring: every lap of
 * a 128 MiB ring writes into memory no cache holds any more, and the
 * first lap into memory the kernel has to fault in and zero. Measured
 * through shmtraced (bench-vs-perfetto's 1 KiB x1 recording, 256 MB),
 * the service spent 425-514 ns per packet with a 128 MiB ring and 323-366
 * ns with an 8 MiB one, while nothing was lost with either. With this
 * file, 128 MiB rings, three rounds alternating with the code before: a
 * daemon's first session 363-501 ns per packet against 969-1280 (64 KiB
 * packets: 17-25 against 54-102 us); later sessions, whose rings were
 * faulted in already, the same within the noise (369-449 against
 * 327-516 ns).
 *
 * What: before a chunk is stored, if the writer is at least rewind_at
 * bytes into the ring and the records still holding unread data take at
 * most an eighth of the bytes before the writer (wr / 8), and never more
 * than rewind_at / 2 (typically each writer's newest chunk, whose
 * last packet waits for its continuation), those records are moved to the
 * start of the ring, in buffer order, and writing goes on right after
 * them. They are found from the sequences (every record that is not
 * erased is in its sequence's ring: O(sequences + live records), not a
 * scan of the ring) and must all lie between the read floor (tb_buffer.c:
 * everything before it, from the oldest record on, is erased) and the
 * writer; sorted by offset, each moves down to where the ones before it
 * end (memmove: a record may overlap its own new place, never another's).
 * The ring then
 * holds exactly what it held before, in the same order, at lower
 * offsets: used_size becomes the bytes moved (wr == used_size, so
 * offset 0 is the oldest record); everything past it is as beyond the
 * first lap of a fresh ring, never parsed.
 *
 * Nothing unread is lost or delivered twice: every record that is not
 * erased is moved whole (header, consumed and unconsumed bytes alike) and
 * its sequence's ring entry follows it; erased records hold nothing. An
 * unread record also gets the full ring ahead of it again, where it had
 * what was left of a lap. Pointers into the ring that callers may hold:
 * the slices of packets already returned stay valid until the next
 * write, as before (trace_buffer.h), and the owner's write fence sees the
 * bytes the move overwrites first.
 *
 * When: from rewind_at = 2 MiB (TB__REWIND_AT; half the ring if that is
 * less, which it is not in rings of TB__REWIND_MIN_RING), so that a ring
 * kept drained stays within a core's L2 (2 MiB on this project's hosts)
 * and its writes find their lines there instead of in DRAM; and only when
 * the owner's write probe (tb_set_write_probe) says no slices in flight
 * lie in [0, rewind_at): else it is put off until after the next read.
 * History. Until 2026-12-05 it was 16 MiB: a shmtraced session reads its
 * buffers in passes of 1-4 MiB, and with up to 4 MiB of slices in flight
 * to the file (svc_read.c) a rewind at 8 MiB made the write fence wait for
 * the file writer (15-36 waits in four 256 MB recordings, none at 16 MiB).
 * 2 MiB was tried twice before the probe existed (on a host with 1 MiB L2:
 * 1 KiB x1 354 against 396 ns of service CPU per packet, x4 494 against
 * 437; on the current one: 1 KiB x1 294 against 338-368, x4 342 against
 * 365, 64 B x1 65 against 56, 64 KiB x1 739 against 823 MB/s) and not kept:
 * no size was better for every packet size. With the probe (the writer
 * thread's slices, svc_fw_busy), shmtraced against the code before
 * (2026-12-05 21:3x UTC, AMD EPYC family 26, 256 MB recordings or 128 MB
 * of 64 B, perfetto consumer, builds alternating, medians of 9-16): 1 KiB
 * x1 338 against 381 ns per packet; x4 432 against 423; 64 KiB x1 19.6
 * against 19.6 us (852 against 846 MB/s), x4 24.0 against 24.3 us; 64 B x1
 * 61 against 65 ns, x4 61 against 65; a daemon's first session (1 KiB x4,
 * 6 each) 746 against 917 ns.
 * Until 2026-12-06 the records were found by scanning the ring from the
 * floor, which had to lie at most rewind_at / 2 behind the writer, and
 * the moved bytes had to fit below the floor (memcpy). With 4 producers
 * on a 2-CPU host that held most rewinds back (256 MB of 1 KiB packets:
 * 15-25 rewinds against 116-117 with one producer; instrumented
 * 2026-12-05): the floor mostly lay 9 MiB or more behind the writer,
 * held by one producer's newest 32 KiB chunk whose continuation waited
 * while that producer was descheduled, and once a rewind had moved such a
 * chunk to offset 0 the floor stayed there, below anything to move. By
 * the sequences and with memmove: 62-75 rewinds in such a recording
 * instead of 11 (140-150 KiB moved per rewind on average), and service
 * CPU per packet (one warm daemon per build, recordings alternating,
 * medians, 2026-12-06) 1 KiB x4 506.5 against 574.5 ns (ten each), 64 B
 * x4 71 against 81 (eight), 1 KiB x1 464.5 against 464 (eight); 64 KiB
 * x4 25.6 against 26.4 us (six, before 2cbb905 fixed the order of a move:
 * sizes first).
 * A record that waits for good (its writer died mid-packet) would then
 * be moved for ever and never overwritten: the oldest record a rewind
 * moves is remembered, and after TB__REWIND_MOVES_MAX rewinds in a row
 * that moved the same one, rewinds are refused until it is gone. The
 * ring then laps as any ring and overwrites it (lost, cause overwrite):
 * it had at most 16 x rewind_at more bytes of life than without
 * rewinds.
 * A first session's ring is fresh memory, which this VM's host backs at
 * ~20 ms per 2 MiB page (perf: clear_page_erms under the copy's faults);
 * a ring kept drained faults in only its first few MiB.
 * When not: DISCARD buffers (they stop at the end of the ring, read or
 * not), rings under TB__REWIND_MIN_RING (rewind_at = 0), no floor or one
 * ahead of the writer, more than min(wr / 8, rewind_at / 2) bytes to
 * move (below), a record
 * moved by TB__REWIND_MOVES_MAX rewinds in a row. A refusal is not tried
 * again before the next read pass (generation), so a buffer nobody drains
 * pays a few comparisons per chunk.
 * How much may move. Until 2026-12-06 at most rewind_at / 8 (256 KiB),
 * wherever the writer was. With 64 KiB packets from four producers more
 * than that waits at any time (each producer's unfinished packet spans
 * two or three 32 KiB chunks), and a 256 MB recording through shmtraced
 * had 1-4 rewinds, 49-55 refused for that reason (instrumented). A
 * refused rewind is tried again after the next read, with the writer
 * further on; allowing an eighth of what lies before the writer (the old
 * bound when wr = rewind_at) lets that retry succeed: 7-11 rewinds (the
 * others refused, or put off while the file's slices lay in the first
 * 2 MiB), and service CPU per packet 24.2 and 23.3 against 25.9 and
 * 25.5 us (two series of ten recordings, medians, one warm daemon per
 * build, recordings alternating); 64 KiB x1 22.1 against 23.1 us, 1 KiB
 * x4 487 against 488 ns. The cap, rewind_at / 2, bounds one move's
 * memmove (about 30 us for 1 MiB in L2).
 * Stats: each rewind is a wrap to offset 0 (write_wrap_count); the moved
 * records are not new (bytes_written unchanged) and nothing is evicted.
 */
#include <stdlib.h>
#include <string.h>

#include "tb_int.h"

#define TB__REWIND_AT ((size_t)2 << 20)        /* at most */
#define TB__REWIND_MIN_RING ((size_t)16 << 20) /* none in smaller rings */
#define TB__REWIND_MOVES_MAX 16u               /* per record, in a row */

size_t tb__default_rewind_at(size_t size)
{
    if (size < TB__REWIND_MIN_RING)
        return 0;
    return size / 2 < TB__REWIND_AT ? size / 2 : TB__REWIND_AT;
}

typedef struct tb__rw_item {
    uint32_t off;
    tb__centry *ce;
} tb__rw_item;

static int by_offset(const void *x, const void *y)
{
    uint32_t a = ((const tb__rw_item *)x)->off;
    uint32_t c = ((const tb__rw_item *)y)->off;
    return (a > c) - (a < c);
}

/* Every live record, from the sequences' rings (every record not erased
 * is in its sequence's), into b->rw_items sorted by offset (buffer order:
 * all lie in [from, to)); returns the bytes they take, or SIZE_MAX when
 * the rewind must not happen: more than `limit`, a record outside
 * [from, to) or erased (never, short of a bug), or no memory. */
static size_t live_records(tb_buffer *b, size_t from, size_t to,
                           size_t limit, size_t *count)
{
    size_t need = 0, n = 0;
    for (uint32_t i = 0; i < b->nseqs; i++) {
        tb__seq *s = &b->seqs[i];
        for (uint32_t k = 0; k < s->count; k++) {
            tb__centry *ce = tb__ring_at(s, k);
            if (ce->off < from || ce->off >= to)
                return SIZE_MAX;
            const tb__rec *r = tb__rec_at(b, ce->off);
            need += tb__outer(r->size);
            if (need > limit || r->pri_wri_id == 0)
                return SIZE_MAX;
            tb__rw_item *g = tb__grow(b->rw_items, &b->rw_cap, n + 1,
                                      sizeof(*g), 64);
            if (!g)
                return SIZE_MAX;
            b->rw_items = g;
            b->rw_items[n].off = ce->off;
            b->rw_items[n].ce = ce;
            n++;
        }
    }
    if (n > 1)      /* (qsort wants a non-null array even for none) */
        qsort(b->rw_items, n, sizeof(*b->rw_items), by_offset);
    *count = n;
    return need;
}

/* The rewind about to move the n records of rw_items counts one more move
 * for the oldest of them (a new oldest starts again at one); false, and
 * nothing counted, when that would make more than TB__REWIND_MOVES_MAX in
 * a row. */
static bool oldest_may_move(tb_buffer *b, size_t n)
{
    uint32_t key = 0, id = 0;
    if (n > 0) {
        const tb__rec *r = tb__rec_at(b, b->rw_items[0].off);
        key = r->pri_wri_id;
        id = r->chunk_id;
    }
    if (n > 0 && key == b->rw_oldest_key && id == b->rw_oldest_id) {
        if (b->rw_oldest_moves >= TB__REWIND_MOVES_MAX)
            return false;
        b->rw_oldest_moves++;
        return true;
    }
    b->rw_oldest_key = key;
    b->rw_oldest_id = id;
    b->rw_oldest_moves = n > 0;
    return true;
}

void tb__maybe_rewind(tb_buffer *b)
{
    size_t wr = b->wr, floor = b->rd_floor;
    if (b->rewind_at == 0 || wr < b->rewind_at || b->policy != TB_RING_BUFFER)
        return;
    /* The floor vouches for [oldest, floor) in ring order, the oldest
     * record being at wr unless wr == used_size (then at 0). A floor ahead
     * of wr, or at wr in a ring that wrapped, vouches for nothing before
     * wr (found by fuzz_tb: a writer that had lapped up to the floor). */
    if (!b->rd_floor_valid || floor > wr ||
        (floor == wr && wr != b->used_size) ||
        b->rewind_refused_gen == b->generation)
        return;
    /* Not onto bytes the owner still holds (slices in flight to a file):
     * the writer would wait for them in the fence at once, and again
     * after every read. Put off like any refusal. */
    if (b->probe_fn && b->probe_fn(b->probe_ctx, b->mem, b->rewind_at)) {
        b->rewind_refused_gen = b->generation;
        b->rewinds_put_off++;
        return;
    }
    size_t limit = wr / 8 < b->rewind_at / 2 ? wr / 8 : b->rewind_at / 2;
    size_t n = 0;
    size_t need = live_records(b, floor, wr, limit, &n);
    if (need == SIZE_MAX || !oldest_may_move(b, n)) {
        b->rewind_refused_gen = b->generation;
        return;
    }
    if (need)
        tb__fence(b, 0, need);
    size_t to = 0;
    for (size_t i = 0; i < n; i++) {
        /* Sizes first: the move may overwrite the old header. */
        const tb__rec *r = tb__rec_at(b, b->rw_items[i].off);
        size_t outer = tb__outer(r->size);
        size_t bytes = TB__REC_HDR_BYTES + r->payload_size;
        b->rw_items[i].ce->off = (uint32_t)to;
        if (to != b->rw_items[i].off)
            memmove(b->mem + to, r, bytes);
        to += outer;
    }
    b->used_size = to;
    b->wr = to;
    b->rd = 0;
    b->rd_floor_valid = false;
    b->stats.write_wrap_count++;
}

void tb__set_rewind_at(tb_buffer *b, size_t bytes)
{
    b->rewind_at = bytes;
}
