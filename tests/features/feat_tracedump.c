/*
 * feat_tracedump.c - prints what the issue-12 tests look for in a trace
 * (Perfetto format: Trace.packet records), one fact per line:
 *   trigger NAME PRODUCER UID STOP_DELAY_MS TS   a `trigger` packet (46)
 *   clone_trigger NAME PRODUCER UID DELAY_MS TS  `clone_snapshot_trigger`
 *   cleared SEQ N       packets of sequence SEQ with
 *                       SEQ_INCREMENTAL_STATE_CLEARED (sequence_flags & 1)
 *   needs SEQ N         packets with SEQ_NEEDS_INCREMENTAL_STATE
 *   test_packets N      for_testing packets
 *   packets N           all packets
 * Used by the scripts in tests/features/ with grep/awk; handy by hand.
 * Exit: 0 ok, 2 unreadable or undecodable trace.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.pb-c.h"

typedef struct {
    uint32_t seq;
    uint64_t cleared, needs;
} seqc;

static int read_varint(FILE *f, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        int c = fgetc(f);
        if (c == EOF)
            return 0;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return 1;
    }
    return 0;
}

static void print_trigger(const char *what, const Perfetto__Protos__Trigger *t,
                          uint64_t ts)
{
    printf("%s %s %s %d %" PRIu64 " %" PRIu64 "\n", what,
           t->trigger_name ? t->trigger_name : "-",
           t->producer_name && t->producer_name[0] ? t->producer_name : "-",
           t->has_trusted_producer_uid ? t->trusted_producer_uid : -1,
           t->has_stop_delay_ms ? t->stop_delay_ms : 0, ts);
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "--help") == 0) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: feat_tracedump TRACE\n"
                "Prints trigger / clone_trigger packets and per-sequence "
                "counts of\nincremental-state flags (see the source).\n");
        return argc == 2 ? 0 : 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "feat_tracedump: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    seqc *seqs = NULL;
    size_t nseqs = 0;
    uint64_t packets = 0, test_packets = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (;;) {
        int tag = fgetc(f);
        if (tag == EOF)
            break;
        uint64_t len;
        if (tag != 0x0A || !read_varint(f, &len) || len > (256u << 20)) {
            fprintf(stderr, "feat_tracedump: bad record at packet %" PRIu64
                    "\n", packets);
            return 2;
        }
        if (len > cap) {
            cap = len * 2;
            uint8_t *g = realloc(buf, cap);
            if (!g)
                return 2;
            buf = g;
        }
        if (len && fread(buf, 1, len, f) != len) {
            fprintf(stderr, "feat_tracedump: truncated packet %" PRIu64 "\n",
                    packets);
            return 2;
        }
        Perfetto__Protos__TracePacket *p =
            perfetto__protos__trace_packet__unpack(NULL, len, buf);
        if (!p) {
            fprintf(stderr, "feat_tracedump: undecodable packet %" PRIu64
                    "\n", packets);
            return 2;
        }
        packets++;
        uint64_t ts = p->has_timestamp ? p->timestamp : 0;
        if (p->trigger)
            print_trigger("trigger", p->trigger, ts);
        if (p->clone_snapshot_trigger)
            print_trigger("clone_trigger", p->clone_snapshot_trigger, ts);
        if (p->for_testing)
            test_packets++;
        uint32_t fl = p->has_sequence_flags ? p->sequence_flags : 0;
        if (fl && p->has_trusted_packet_sequence_id) {
            size_t i = 0;
            while (i < nseqs && seqs[i].seq != p->trusted_packet_sequence_id)
                i++;
            if (i == nseqs) {
                seqc *g = realloc(seqs, (nseqs + 1) * sizeof(*g));
                if (!g)
                    return 2;
                seqs = g;
                memset(&seqs[nseqs], 0, sizeof(*seqs));
                seqs[nseqs++].seq = p->trusted_packet_sequence_id;
            }
            seqs[i].cleared += (fl & 1) != 0;
            seqs[i].needs += (fl & 2) != 0;
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
    }
    fclose(f);
    free(buf);
    for (size_t i = 0; i < nseqs; i++) {
        printf("cleared %u %" PRIu64 "\n", seqs[i].seq, seqs[i].cleared);
        printf("needs %u %" PRIu64 "\n", seqs[i].seq, seqs[i].needs);
    }
    printf("test_packets %" PRIu64 "\npackets %" PRIu64 "\n", test_packets,
           packets);
    free(seqs);
    return 0;
}
