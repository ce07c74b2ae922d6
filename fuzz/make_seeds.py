#!/usr/bin/env python3
# fuzz/make_seeds.py - writes the generated seed inputs of fuzz/corpus/
# (the binary tapes of fuzz_tb, fuzz_smb_reader, fuzz_ipc_frame and
# fuzz_svc_ipc; the text and trace seeds are plain files). Run from the top
# of the tree; the output is committed, so this only needs rerunning when a
# target's input format changes. Deterministic.
import os, struct

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7f
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)

def field(num, wt, payload):
    key = varint(num << 3 | wt)
    if wt == 0:
        return key + varint(payload)
    if wt == 2:
        return key + varint(len(payload)) + payload
    raise ValueError(wt)

def frame(body):
    return struct.pack('<I', len(body)) + body

def write(dirname, name, data):
    d = os.path.join('fuzz', 'corpus', dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)

# ---- ipc_frame: mode byte + stream of frames
bind = frame(field(2, 0, 1) + field(3, 2, field(1, 2, b'ProducerPort')))
commit = field(1, 2, field(1, 0, 3) + field(2, 0, 5) + field(3, 0, 1))
invoke = frame(field(2, 0, 2) + field(5, 2, field(1, 0, 1) + field(2, 0, 3) +
                                        field(3, 2, commit)))
reply = frame(field(2, 0, 2) + field(6, 2, field(1, 0, 1) + field(2, 0, 1) +
                                       field(3, 2, b'\x08\x01')))
breply = frame(field(2, 0, 1) + field(4, 2, field(1, 0, 1) + field(2, 0, 1) +
               field(3, 2, field(1, 0, 1) + field(2, 2, b'CommitData'))))
err = frame(field(2, 0, 9) + field(7, 2, field(1, 2, b'unknown')))
empty = frame(b'')
write('ipc_frame', 'bind_invoke', b'\x00' + bind + invoke)
write('ipc_frame', 'bytewise', b'\x01' + bind + reply + breply)
write('ipc_frame', 'slices', b'\x0a' + invoke + err + empty + invoke)
write('ipc_frame', 'oversize', b'\x00' + struct.pack('<I', 200000) + b'\x08')
lens = bytes([0, 3, 1, 7])
write('ipc_frame', 'lens', b'\x03' + bind + invoke + reply + lens +
      bytes([len(lens)]))

# ---- tb: header byte (buffer 4 KiB * (1 + b & 63), bit 7 discard), ops
# op % 8: 0/1 hostile chunk, 2 hostile patch, 3/4 honest chunk (op >> 3:
# shape), 5 read some, 6 clone, 7 read all.
def hostile(wid, cid, nfrag, flags, payload, complete=True):
    sel = (wid & 3) | (0 if complete else 0x10) | 0x08
    return (bytes([0, sel, cid & 0xff, nfrag & 0xff, flags]) +
            struct.pack('<H', len(payload)) + payload)

def frags(*sizes):
    out = b''
    for s in sizes:
        out += varint(s) + bytes((i * 13) & 0xff for i in range(s))
    return out

honest = lambda shape: bytes([3 | (shape << 3)])
readall, clone = b'\x07', b'\x06'
write('tb', 'honest_only', b'\x01' + honest(1) + honest(2) + honest(4) +
      honest(0) + readall + honest(7) + clone + honest(3) + readall)
write('tb', 'mixed', b'\x00' + honest(1) + hostile(1, 0, 2, 0, frags(5, 9)) +
      hostile(1, 1, 1, 2, frags(30)) + honest(4) +
      hostile(1, 2, 2, 1, frags(3, 4)) + bytes([5 | (3 << 3)]) +
      honest(0) + readall)
write('tb', 'patch', b'\x02' + hostile(2, 5, 1, 4, frags(16)) +
      bytes([2, 2, 5, 1]) + struct.pack('<H', 2) + b'\x0a\x0b\x0c\x0d' +
      honest(1) + readall)
write('tb', 'wrap', b'\x00' + (honest(3) + honest(7)) * 40 +
      hostile(3, 0, 1, 0, frags(3000)) + readall)
write('tb', 'discard', b'\x80' + (honest(3) + hostile(1, 9, 1, 0, frags(900)))
      * 8 + readall + honest(1) + readall)
write('tb', 'scraped', b'\x01' + hostile(1, 3, 2, 2, frags(10, 40),
                                          complete=False) +
      hostile(1, 3, 2, 2, frags(10, 40)) + readall)

# ---- smb_reader: geometry byte (page 4 KiB << g % 5, 1 + (g >> 4) % 4
# pages, bit 6 small shared buffer, bit 7 discard), then ops (op % 11):
# 0 page word, 1 chunk header, 2 payload bytes, 3 commit, 4 scrape,
# 5 emulated chunk, 6 patches, 7 honest chunk (op >> 4: shape), 8 read some,
# 9 clone, 10 read all.
def word(page, layout, states):
    return bytes([0, page, 1 | ((layout - 1) << 1)]) + struct.pack('<I', states)

def header(page, idx, cid, wid, count, flags):
    return bytes([1, page, idx, (flags & 7) << 3, cid, wid - 1, count])

def payload(page, idx, off, data):
    data = data + b'\0' * (-len(data) % 4)
    return bytes([2, page, idx]) + struct.pack('<H', off) + \
        bytes([len(data) // 4]) + data

def commit(page, idx, target=0):
    return bytes([3, target << 2, page, idx])

honest_s = lambda shape: bytes([7 | (shape << 4)])
read_all, scrape = bytes([10]), bytes([4])
basic = (word(0, 4, 0x3) + header(0, 0, 0, 1, 2, 0) +
         payload(0, 0, 0, frags(10, 20)) + commit(0, 0) + honest_s(1) +
         read_all)
write('smb_reader', 'commit', bytes([0x10]) + basic)
write('smb_reader', 'scrape', bytes([0x00]) + word(0, 2, 0x1) +
      header(0, 0, 4, 2, 3, 2) + payload(0, 0, 0, frags(8, 8, 30)) +
      honest_s(5) + scrape + honest_s(2) + read_all)
write('smb_reader', 'emulated', bytes([0x21]) +
      bytes([5, 0]) + bytes([8 + 14]) + struct.pack('<IHH', 7, 3, 1) +
      frags(13) + honest_s(3) + read_all)
write('smb_reader', 'patches', bytes([0x02]) + word(0, 1, 0x3) +
      header(0, 0, 9, 4, 1, 4) + payload(0, 0, 0, frags(40)) + commit(0, 0) +
      bytes([6, 0, 9, 4, 1]) + struct.pack('<H', 4) + b'abcd' + read_all)
write('smb_reader', 'badindex', bytes([0x30]) + word(3, 5, 0xfffffff) +
      commit(3, 13) + commit(4, 0) + commit(0, 14, 2) + scrape +
      bytes([9]) + honest_s(7) + honest_s(0) + read_all)

# ---- svc_ipc: ops (op % 8): 0-2 invoke on connection (op >> 3) & 3
# (0, 1 producers; 2, 3 consumers): method, flags (bit 0: u16 length,
# bit 1: service id byte after the args, bits 2/3 drop_reply, bit 4 fd),
# length, args; 3 raw bytes; 4 scribble the SMB of producer (op >> 3) & 1:
# u32 offset, u8 length, bytes; 5 run the loop; 6 time passes (u16 * 16
# ms); 7 hang up connection (op >> 3) & 3.
def inv(conn, method, args, flags=0):
    if len(args) > 255:
        flags |= 1
        ln = struct.pack('<H', len(args))
    else:
        ln = bytes([len(args)])
    return bytes([0 | (conn << 3), method, flags]) + ln + args

def smbw(conn, off, data):
    return bytes([4 | (conn << 3)]) + struct.pack('<I', off) + \
        bytes([len(data)]) + data

pump = lambda n=7: bytes([5 | (n << 3)])
later = lambda ms: bytes([6]) + struct.pack('<H', ms // 16)
hangup = lambda conn: bytes([7 | (conn << 3)])

init = field(1, 0, 4096) + field(2, 0, 65536) + field(3, 2, b'prod') + \
    field(4, 0, 1)
regds = field(1, 2, field(1, 2, b'x') + field(2, 0, 1))
cfg = field(1, 2, field(1, 0, 64) + field(4, 0, 1)) + \
    field(2, 2, field(1, 2, field(1, 2, b'x'))) + field(3, 0, 2000)
enable = field(1, 2, cfg)
chunk = (struct.pack('<I', (1 << 28) | 3) + b'\0' * 4 +
         struct.pack('<IHH', 0, 1, 1) + varint(0x80 | 12)[:0] +
         bytes([0x8c, 0x80, 0x80, 0x00]) + b'hello, trace')
commit0 = field(1, 2, field(1, 0, 0) + field(2, 0, 0) + field(3, 0, 0))
commit1 = field(1, 2, field(1, 0, 0) + field(2, 0, 0) + field(3, 0, 1))
emul = field(1, 2, field(3, 0, 1) + field(4, 2, struct.pack('<IHH', 1, 1, 1)
                                         + bytes([5]) + b'abcde'))
session = (inv(0, 1, init) + inv(0, 2, regds) + inv(0, 5, b'') +
           inv(2, 1, enable) + pump() + inv(0, 6, field(1, 0, 1) +
                                            field(2, 0, 1)) +
           smbw(0, 0, chunk) + inv(0, 4, commit0) + inv(0, 4, commit1) +
           inv(0, 4, emul) + inv(2, 5, field(1, 0, 100)) + pump() +
           inv(0, 4, field(3, 0, 1)) + later(200) + inv(2, 3, b'') +
           pump() + inv(2, 10, b'') + inv(2, 2, b'') + pump() +
           inv(2, 3, b'') + inv(2, 4, b'') + hangup(0) + pump())
write('svc_ipc', 'session', session)
wif = field(1, 2, field(1, 2, field(1, 0, 64)) +
            field(2, 2, field(1, 2, field(1, 2, b'x'))) +
            field(8, 0, 1) + field(9, 0, 100) + field(29, 2, b'o.pftrace'))
write('svc_ipc', 'write_into_file',
      inv(0, 1, init) + inv(0, 2, regds) + inv(0, 5, b'') + inv(2, 1, wif) +
      pump() + later(500) + pump() + inv(2, 2, b'') + pump() + hangup(2) +
      pump())
clone = (inv(2, 1, field(1, 2, cfg + field(22, 2, b'sess'))) + pump() +
         inv(3, 15, field(4, 2, b'sess')) + pump() + inv(3, 3, b'') +
         pump() + inv(3, 15, field(1, 0, 1)) + inv(3, 13, b'') +
         inv(3, 11, b'') + pump())
write('svc_ipc', 'clone', clone)
write('svc_ipc', 'misuse',
      inv(0, 4, commit0) + inv(0, 19, b'\xff\xff') + inv(2, 7, b'', 2) +
      b'\x07' + inv(0, 1, init, 0x0c) + inv(1, 1, init) +
      inv(1, 5, b'', 0x10) + inv(2, 3, b'') + inv(2, 6, b'') +
      bytes([3 | (3 << 3), 6]) + b'\xff\xff\xff\x7f\x00\x00' + pump() +
      hangup(1) + pump())

# ---- scan: a trace file (fuzz_scan); records of every top-level field
# kind (varint, fixed64, fixed32, bytes, a TraceStats, a bad wire type),
# whole and with its last record cut. ok_v2-cut and truncated are copies of
# the inspect seeds.
def rec(pk):
    return b'\x0a' + varint(len(pk)) + pk

stats = field(8, 0, 77) + field(5999, 2, b'x' * 300)
kinds = b''.join(rec(p) for p in [
    field(8, 0, 1700000000000000000) + field(900, 2, b'y' * 1000) +
    field(42, 0, 1),
    field(42, 0, 1) + field(900, 2, b'z' * 500) + field(42, 0, 0),
    varint(9 << 3 | 1) + b'\xff' * 8 + varint(10 << 3 | 5) + b'\xff' * 4 +
    field(900, 2, b'w' * 700),
    field(900, 2, b'v' * 200) + field(35, 2, stats),
    field(900, 2, b'u' * 100) + bytes([3 << 3 | 7]),
])
write('scan', 'kinds.pftrace', kinds)
write('scan', 'kinds-cut.pftrace', kinds[:-7])
