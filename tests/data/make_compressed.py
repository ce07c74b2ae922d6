#!/usr/bin/env python3
"""make_compressed.py - writes the compressed test inputs of
tests/check_ins_inflate.c (run once; the outputs are committed):

  compressed.pftrace  a trace whose packets are inside compressed_packets
                      (TracePacket field 50), three containers: zlib level 9
                      (dynamic Huffman), gzip with fixed Huffman, zlib level
                      0 (stored blocks)
  inflate_text.*      the text below compressed four ways (.zdyn zlib level 9,
                      .zfix zlib fixed Huffman, .zsto zlib level 0, .gz gzip)
  bomb.zlib           70 MB of zeros, zlib level 9: over the inflate bound

Expected contents (the C test rebuilds them): see check_ins_inflate.c.
Standard library only.
"""
import gzip, io, zlib

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7f
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)

def field_varint(num, v):
    return varint(num << 3) + varint(v)

def field_bytes(num, b):
    return varint(num << 3 | 2) + varint(len(b)) + b

def record(pkt):
    return b"\x0a" + varint(len(pkt)) + pkt

def producer_packet(seq, ts, dropped=0):
    p = field_varint(8, ts) + field_bytes(11, b"payload!")
    p += field_varint(3, 1000) + field_varint(10, seq) + field_varint(79, 77)
    if dropped:
        p += field_varint(42, dropped)
    return p

def trace_stats(seqs):
    # buffer_stats[0] { chunks_written: 7 (field 2), buffer_size: 4096 (12) }
    bs = field_varint(2, 7) + field_varint(12, 4096)
    ts = field_bytes(1, bs) + field_varint(2, 1)  # producers_connected 1
    for s in seqs:
        ts += field_bytes(18, field_varint(1, s) + field_varint(4, 0))
    return field_varint(10, 1) + field_bytes(35, ts)

def text():
    return b"".join(b"line %d: the quick brown fox jumps over the lazy dog\n" % i
                    for i in range(200))

def zlib_fixed(data):
    c = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_FIXED)
    return c.compress(data) + c.flush()

def zlib_stored(data):
    return zlib.compress(data, 0)

def gzip_fixed(data):
    raw = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_FIXED)
    body = raw.compress(data) + raw.flush()
    hdr = b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x02\xff" + b"inner.pftrace\x00"
    tail = (zlib.crc32(data) & 0xffffffff).to_bytes(4, "little") + \
        (len(data) & 0xffffffff).to_bytes(4, "little")
    return hdr + body + tail

# Container 1 (zlib dynamic): seq 2, 300 packets, loss flag (65) on #0
# (first: not counted) and on #100, #200. Container 2 (gzip fixed): seq 3,
# 50 packets, flag 2|64 on #10. Container 3 (stored): TraceStats.
inner1 = b"".join(record(producer_packet(2, 1000 + i, 65 if i in (0, 100, 200) else 0))
                  for i in range(300))
inner2 = b"".join(record(producer_packet(3, 5000 + i, 66 if i == 10 else 0))
                  for i in range(50))
inner3 = record(trace_stats([2, 3]))
outer = b""
for blob in (zlib.compress(inner1, 9), gzip_fixed(inner2), zlib_stored(inner3)):
    outer += record(field_varint(10, 1) + field_varint(3, 0) + field_bytes(50, blob))
open("compressed.pftrace", "wb").write(outer)

t = text()
open("inflate_text.zdyn", "wb").write(zlib.compress(t, 9))
open("inflate_text.zfix", "wb").write(zlib_fixed(t))
open("inflate_text.zsto", "wb").write(zlib_stored(t))
open("inflate_text.gz", "wb").write(gzip_fixed(t))
open("bomb.zlib", "wb").write(zlib.compress(b"\0" * (70 * 1000 * 1000), 9))
