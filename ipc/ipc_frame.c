/*
 * ipc_frame.c - IPC frame codec (ipc_frame_pack, ipc_decoder_*).
 *
 * Wire layout of one frame (Perfetto src/ipc/buffered_frame_deserializer):
 *
 *   offset  size  field
 *   0       4     N, uint32 little-endian
 *   4       N     serialized perfetto.protos.IPCFrame
 *
 * The decoder owns a fixed buffer of IPC_FRAME_MAX_BYTES: bytes [0, len)
 * are received and not yet consumed; a frame is complete when 4 + N <= len.
 * A header announcing 4 + N > IPC_FRAME_MAX_BYTES can never complete: that
 * is fatal (the decoder latches the error and offers no more space). N == 0
 * frames are ignored; frames protobuf-c refuses are dropped (the stream
 * stays in sync because the length prefix, not the content, delimits them),
 * and so are frames carrying field number 0 (ipc_message_well_formed).
 * Consumed bytes are compacted away with one memmove per ipc_decoder_next()
 * call that found no complete frame, i.e. at most once per recv().
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_int.h"

struct ipc_decoder {
    uint8_t *buf;     /* IPC_FRAME_MAX_BYTES */
    size_t start;     /* first unconsumed byte */
    size_t len;       /* end of received bytes */
    bool fatal;       /* oversized frame seen: no more input accepted */
    uint64_t dropped; /* unparsable frames */
    uint64_t empty;   /* N == 0 frames */
};

int ipc__pack_msg(const ProtobufCMessage *msg, uint8_t **out, size_t *len)
{
    size_t n = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return -ENOMEM;
    if (n)
        protobuf_c_message_pack(msg, b);
    *out = b;
    *len = n;
    return 0;
}

int ipc_frame_pack(const Perfetto__Protos__IPCFrame *frame, uint8_t **out,
                   size_t *out_len)
{
    size_t n = perfetto__protos__ipcframe__get_packed_size(frame);
    if (n > IPC_FRAME_MAX_BYTES - IPC_FRAME_HEADER_BYTES)
        return -EMSGSIZE;
    uint8_t *b = malloc(IPC_FRAME_HEADER_BYTES + n);
    if (!b)
        return -ENOMEM;
    b[0] = (uint8_t)n;
    b[1] = (uint8_t)(n >> 8);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 24);
    perfetto__protos__ipcframe__pack(frame, b + IPC_FRAME_HEADER_BYTES);
    *out = b;
    *out_len = IPC_FRAME_HEADER_BYTES + n;
    return 0;
}

ipc_decoder *ipc_decoder_create(void)
{
    ipc_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->buf = malloc(IPC_FRAME_MAX_BYTES);
    if (!d->buf) {
        free(d);
        return NULL;
    }
    return d;
}

void ipc_decoder_destroy(ipc_decoder *dec)
{
    if (!dec)
        return;
    free(dec->buf);
    free(dec);
}

static void compact(ipc_decoder *dec)
{
    if (dec->start == 0)
        return;
    memmove(dec->buf, dec->buf + dec->start, dec->len - dec->start);
    dec->len -= dec->start;
    dec->start = 0;
}

uint8_t *ipc_decoder_write_ptr(ipc_decoder *dec, size_t *avail)
{
    if (dec->fatal) {
        *avail = 0;
        return dec->buf;
    }
    compact(dec);
    *avail = IPC_FRAME_MAX_BYTES - dec->len;
    return dec->buf + dec->len;
}

void ipc_decoder_commit(ipc_decoder *dec, size_t n)
{
    if (n > IPC_FRAME_MAX_BYTES - dec->len)
        n = IPC_FRAME_MAX_BYTES - dec->len; /* caller bug; stay in bounds */
    dec->len += n;
}

int ipc_decoder_feed(ipc_decoder *dec, const void *data, size_t len)
{
    size_t avail;
    uint8_t *p = ipc_decoder_write_ptr(dec, &avail);
    if (len > avail)
        return dec->fatal ? -EMSGSIZE : -ENOBUFS;
    memcpy(p, data, len);
    ipc_decoder_commit(dec, len);
    return 0;
}

int ipc_decoder_next(ipc_decoder *dec, Perfetto__Protos__IPCFrame **out)
{
    *out = NULL;
    for (;;) {
        if (dec->fatal)
            return -EMSGSIZE;
        size_t have = dec->len - dec->start;
        if (have < IPC_FRAME_HEADER_BYTES) {
            compact(dec);
            return 0;
        }
        const uint8_t *h = dec->buf + dec->start;
        uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 |
                     (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (n > IPC_FRAME_MAX_BYTES - IPC_FRAME_HEADER_BYTES) {
            dec->fatal = true;
            return -EMSGSIZE;
        }
        if (have < IPC_FRAME_HEADER_BYTES + n) {
            compact(dec);
            return 0;
        }
        const uint8_t *body = h + IPC_FRAME_HEADER_BYTES;
        dec->start += IPC_FRAME_HEADER_BYTES + n;
        if (n == 0) {
            dec->empty++;
            continue;
        }
        Perfetto__Protos__IPCFrame *f =
            perfetto__protos__ipcframe__unpack(NULL, n, body);
        if (f && !ipc_message_well_formed(&f->base)) {
            perfetto__protos__ipcframe__free_unpacked(f, NULL);
            f = NULL;
        }
        if (!f) {
            dec->dropped++;
            continue;
        }
        *out = f;
        return 1;
    }
}

uint64_t ipc_decoder_dropped_frames(const ipc_decoder *dec)
{
    return dec->dropped;
}

uint64_t ipc_decoder_empty_frames(const ipc_decoder *dec)
{
    return dec->empty;
}

/* protobuf-c takes a key of field number 0 written in more than one byte
 * (80 00) as an unknown field, then packs it as the one-byte key 00, which
 * it refuses to parse: such a message does not survive a round trip (the
 * service re-packs configs into commands and traces). Field number 0 is
 * invalid protobuf: refuse the message. Found by fuzz/fuzz_ipc_frame.c. */
bool ipc_message_well_formed(const ProtobufCMessage *m)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return false;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)(base +
                                                       f->quantifier_offset);
            ProtobufCMessage *const *v =
                *(ProtobufCMessage *const *const *)(const void *)(base +
                                                                  f->offset);
            for (size_t k = 0; k < n; k++)
                if (v[k] && !ipc_message_well_formed(v[k]))
                    return false;
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(const void *)(base + f->quantifier_offset) !=
                f->id)
            continue; /* another member of the oneof is set */
        const ProtobufCMessage *sub =
            *(ProtobufCMessage *const *)(const void *)(base + f->offset);
        if (sub && !ipc_message_well_formed(sub))
            return false;
    }
    return true;
}
