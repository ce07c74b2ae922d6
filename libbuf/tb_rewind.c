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
 * bytes into the ring and everything before the last few records was
 * read (the read floor, tb_buffer.c, lies at most rewind_at / 2 behind
 * the writer), the records still holding unread data between the floor
 * and the writer (typically each writer's newest chunk, whose last packet
 * waits for its continuation) are moved to the start of the ring, in
 * buffer order, and writing goes on right after them. The ring then
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
 * With 4 producers on this 2-CPU host the rewind is due far less often
 * (256 MB of 1 KiB packets: 15-25 rewinds against 116-117 with one
 * producer): the floor mostly lies 9 MiB or more behind the writer, held
 * by one producer's newest 32 KiB chunk, whose continuation waits while
 * that producer is descheduled (instrumented, 2026-12-05 22:2x UTC).
 * Tried and not kept: letting the floor lie up to 4 x rewind_at behind
 * (8 MiB): 25-50 rewinds per recording, 394 against 419 ns of service
 * CPU per packet (6 recordings each, within the noise), while the scan
 * of live_bytes then reads a header per record in up to 8 MiB (2048
 * records of 4 KiB) per attempt.
 * Counting each sequence's unread bytes below the writer, instead of
 * scanning the records, would lift that bound; not done.
 * A first session's ring is fresh memory, which this VM's host backs at
 * ~20 ms per 2 MiB page (perf: clear_page_erms under the copy's faults);
 * a ring kept drained faults in only its first few MiB.
 * When not: DISCARD buffers (they stop at the end of the ring, read or
 * not), rings under TB__REWIND_MIN_RING (rewind_at = 0), a floor ahead
 * of the writer or more than rewind_at / 2 behind it, or more than
 * rewind_at / 8 bytes to move. A refusal is not tried again before the
 * next read pass (generation), so a buffer nobody drains pays a few
 * comparisons per chunk.
 * Stats: each rewind is a wrap to offset 0 (write_wrap_count); the moved
 * records are not new (bytes_written unchanged) and nothing is evicted.
 */
#include <string.h>

#include "tb_int.h"

#define TB__REWIND_AT ((size_t)2 << 20)        /* at most */
#define TB__REWIND_MIN_RING ((size_t)16 << 20) /* none in smaller rings */

size_t tb__default_rewind_at(size_t size)
{
    if (size < TB__REWIND_MIN_RING)
        return 0;
    return size / 2 < TB__REWIND_AT ? size / 2 : TB__REWIND_AT;
}

/* The ring entry of the live record at offset off, or NULL if its
 * sequence does not know it there (never, short of a bug: then no
 * rewind). */
static tb__centry *entry_of(const tb_buffer *b, uint32_t off)
{
    const tb__rec *r = tb__rec_at(b, off);
    tb__seq *s = tb__seq_find(b, r->pri_wri_id);
    uint32_t idx;
    if (!s || !tb__seq_find_chunk(s, r->chunk_id, &idx))
        return NULL;
    tb__centry *ce = tb__ring_at(s, idx);
    return ce->off == off ? ce : NULL;
}

/* Bytes the records in [from, to) that are not erased take, or SIZE_MAX
 * when the rewind must not happen (more than `limit`, or a record its
 * sequence does not know). */
static size_t live_bytes(const tb_buffer *b, size_t from, size_t to,
                         size_t limit)
{
    size_t need = 0;
    for (size_t off = from; off < to;) {
        const tb__rec *r = tb__rec_at(b, off);
        size_t outer = tb__outer(r->size);
        if (r->pri_wri_id != 0) {
            need += outer;
            if (need > limit || !entry_of(b, (uint32_t)off))
                return SIZE_MAX;
        }
        off += outer;
    }
    return need;
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
        wr - floor > b->rewind_at / 2 ||
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
    size_t limit = b->rewind_at / 8;
    if (limit > floor)
        limit = floor; /* the moved records must not overlap their copies */
    size_t need = live_bytes(b, floor, wr, limit);
    if (need == SIZE_MAX) {
        b->rewind_refused_gen = b->generation;
        return;
    }
    if (need)
        tb__fence(b, 0, need);
    size_t to = 0;
    for (size_t off = floor; off < wr;) {
        tb__rec *r = tb__rec_at(b, off);
        size_t outer = tb__outer(r->size);
        if (r->pri_wri_id != 0) {
            entry_of(b, (uint32_t)off)->off = (uint32_t)to;
            memcpy(b->mem + to, r, TB__REC_HDR_BYTES + r->payload_size);
            to += outer;
        }
        off += outer;
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
