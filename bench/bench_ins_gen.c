/*
 * bench_ins_gen.c - writes a large synthetic Perfetto-format trace for the
 * inspector benchmark (bench/bench_inspector.sh).
 *
 *   bench_ins_gen OUT.pftrace SIZE_MB [SEQUENCES]
 *
 * Packets look like a producer's track events: timestamp, trusted uid /
 * sequence id / pid (appended by the service), a 16..176-byte payload
 * (mean ~96 B, Perfetto traces average 40-120 B per packet), a loss flag on
 * one packet in 5000, and a final TraceStats with writer_stats. Output is
 * deterministic (fixed-seed generator). Prints the packet count on stdout.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.pb-c.h"
#include "trace.pb-c.h"

static size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: bench_ins_gen OUT.pftrace SIZE_MB "
                "[SEQUENCES]\n");
        return argc < 3 ? 1 : 0;
    }
    uint64_t target = strtoull(argv[2], NULL, 10) * 1000000ull;
    uint32_t nseq = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 16;
    if (target == 0 || nseq == 0 || nseq > 1000) {
        fprintf(stderr, "bench_ins_gen: SIZE_MB > 0, 1 <= SEQUENCES <= "
                "1000\n");
        return 1;
    }
    FILE *f = fopen(argv[1], "wb");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }
    static uint8_t buf[1 << 20];
    size_t used = 0;
    uint64_t written = 0, packets = 0, rng = 0x2545f4914f6cdd1dull;
    uint8_t payload[256];
    memset(payload, 'e', sizeof(payload));
    while (written < target) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint32_t seq = 2 + (uint32_t)(packets % nseq);
        size_t plen = 16 + (size_t)(rng % 161);
        uint8_t body[320];
        size_t n = 0;
        body[n++] = 0x40; /* timestamp */
        n += put_varint(body + n, 1000000000ull + packets * 1000);
        body[n++] = 0x5A; /* track_event */
        n += put_varint(body + n, plen);
        memcpy(body + n, payload, plen);
        n += plen;
        body[n++] = 0x18; /* trusted_uid */
        n += put_varint(body + n, 1000);
        body[n++] = 0x50; /* trusted_packet_sequence_id */
        n += put_varint(body + n, seq);
        body[n++] = 0xF8; /* trusted_pid */
        body[n++] = 0x04;
        n += put_varint(body + n, 4000 + seq);
        if (packets % 5000 == 4999) {
            body[n++] = 0xD0; /* previous_packet_dropped */
            body[n++] = 0x02;
            n += put_varint(body + n, 65);
        }
        if (used + n + 12 > sizeof(buf)) {
            if (fwrite(buf, 1, used, f) != used) {
                perror("write");
                return 1;
            }
            used = 0;
        }
        buf[used++] = 0x0A;
        used += put_varint(buf + used, n);
        memcpy(buf + used, body, n);
        used += n;
        written += n + 2;
        packets++;
    }
    if (fwrite(buf, 1, used, f) != used) {
        perror("write");
        return 1;
    }
    /* Final TraceStats with every sequence's buffer. */
    Perfetto__Protos__TraceStats__WriterStats *ws = calloc(nseq, sizeof(*ws));
    Perfetto__Protos__TraceStats__WriterStats **wp =
        calloc(nseq, sizeof(*wp));
    if (ws == NULL || wp == NULL)
        return 1;
    for (uint32_t i = 0; i < nseq; i++) {
        perfetto__protos__trace_stats__writer_stats__init(&ws[i]);
        ws[i].has_sequence_id = 1;
        ws[i].sequence_id = 2 + i;
        ws[i].has_buffer = 1;
        ws[i].buffer = 0;
        wp[i] = &ws[i];
    }
    Perfetto__Protos__TraceStats st = PERFETTO__PROTOS__TRACE_STATS__INIT;
    st.n_writer_stats = nseq;
    st.writer_stats = wp;
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_trusted_packet_sequence_id = 1;
    p.trusted_packet_sequence_id = 1;
    p.trace_stats = &st;
    size_t len = perfetto__protos__trace_packet__get_packed_size(&p);
    uint8_t *pk = malloc(len + 16);
    if (pk == NULL)
        return 1;
    size_t h = 0;
    pk[h++] = 0x0A;
    h += put_varint(pk + h, len);
    perfetto__protos__trace_packet__pack(&p, pk + h);
    if (fwrite(pk, 1, h + len, f) != h + len || fclose(f) != 0) {
        perror("write");
        return 1;
    }
    printf("%" PRIu64 "\n", packets + 1);
    free(pk);
    free(ws);
    free(wp);
    return 0;
}
