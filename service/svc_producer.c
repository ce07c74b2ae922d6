/*
 * svc_producer.c - the producer registry of the tracing service.
 *
 * Producers are identified by a ProducerID the service hands out (1..65535,
 * next free after the last one given, wrapping), never by anything the
 * producer says. An id is free when no producer has it and no live
 * session (clones included) gave its producer an instance: Perfetto's
 * service reuses ids at once, and a new producer then continued a gone
 * one's sequences in the buffers, under the gone one's trusted uid, pid
 * and sequence id (its chunks refused as old, or taken as the gone
 * producer's). With every id taken, a producer is refused (EAGAIN).
 * uid/pid come from the socket (SO_PEERCRED) via the glue.
 * Per producer: its registered data sources (by name, unique per producer),
 * its trace writers (writer_id -> target BufferID, RegisterTraceWriter), the
 * BufferIDs it was told to write into (the "allowed" set checked on every
 * CommitData), and its SMB (svc_smb.c), created lazily on first use.
 *
 * Everything in the requests is untrusted: names are length-bounded, writer
 * ids range-checked, the data sources' names and descriptors kept bounded
 * per producer and per uid (SVC_MAX_DS_BYTES_PER_*); a bad request fails
 * that request only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_int.h"

#define SVC_MAX_DS_NAME 256
#define SVC_MAX_DS_PER_PRODUCER 1024

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

svc_producer *svc__producer_by_id(svc_service *svc, uint16_t id)
{
    for (size_t i = 0; i < svc->nproducers; i++)
        if (svc->producers[i]->id == id)
            return svc->producers[i];
    return NULL;
}

/* Is id given to a producer of a session that still lives? Its buffers
 * and sequence ids (libbuf, svc_seqmap) know a writer by (producer id,
 * writer id) only: a new producer with that id would continue the old
 * one's sequences, with the old one's trusted uid, pid and sequence id. */
static bool id_in_a_session(const svc_service *svc, uint16_t id)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        if (svc__session_used_producer(svc->sessions[i], id))
            return true;
    return false;
}

/* The next id after the last one given that no producer has and no live
 * session knows (id_in_a_session), wrapping; 0 if none. */
static uint16_t next_producer_id(svc_service *svc)
{
    uint16_t id = svc->last_producer_id;
    for (uint32_t tries = 0; tries < 65535; tries++) {
        id = (uint16_t)(id == 65535 ? 1 : id + 1);
        if (!svc__producer_by_id(svc, id) && !id_in_a_session(svc, id))
            return id;
    }
    return 0;
}

svc_producer *svc_producer_connect(svc_service *svc, void *conn, uid_t uid,
        pid_t pid, const svc_producer_params *params)
{
    uint16_t id = next_producer_id(svc);
    if (id == 0) {
        errno = EAGAIN;
        return NULL;
    }
    svc_producer **grown = realloc(svc->producers,
            (svc->nproducers + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    svc->producers = grown;
    svc_producer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->id = id;
    p->conn = conn;
    p->uid = uid;
    p->pid = pid;
    p->smb_fd = -1;
    const char *name = params && params->name ? params->name : "";
    p->name = strndup(name, SVC_MAX_DS_NAME);
    if (!p->name) {
        free(p);
        return NULL;
    }
    if (params) {
        p->page_hint_bytes = params->page_size_hint_bytes;
        p->size_hint_bytes = params->smb_size_hint_bytes;
        p->scraping_enabled = params->smb_scraping_mode != 2;
        if (params->sdk_version)
            p->sdk_version = strndup(params->sdk_version, SVC_MAX_DS_NAME);
    } else {
        p->scraping_enabled = true;
    }
    svc->producers[svc->nproducers++] = p;
    svc->last_producer_id = id;
    svc->producers_seen = id;
    return p;
}

uint16_t svc_producer_id(const svc_producer *p)
{
    return p->id;
}

uint8_t *svc_producer_smb(const svc_producer *p, size_t *size,
                          size_t *page_size)
{
    if (size)
        *size = p->smb_size;
    if (page_size)
        *page_size = p->smb_page_size;
    return p->smb_base;
}

static void producer_free(svc_producer *p)
{
    for (size_t i = 0; i < p->nds; i++)
        svc__dsreg_free(&p->ds[i]);
    free(p->ds);
    free(p->writer_buf);
    free(p->allowed);
    free(p->name);
    free(p->sdk_version);
    free(p);
}

size_t svc_producer_disconnect(svc_service *svc, svc_producer *p)
{
    if (!p)
        return 0;
    size_t scraped = svc__producer_gone(svc, p);  /* + instances, acks */
    svc__smb_teardown(p);
    for (size_t i = 0; i < svc->nproducers; i++) {
        if (svc->producers[i] == p) {
            svc->producers[i] = svc->producers[--svc->nproducers];
            break;
        }
    }
    producer_free(p);
    return scraped;
}

static svc_dsreg *find_ds(svc_producer *p, const char *name)
{
    for (size_t i = 0; i < p->nds; i++)
        if (strcmp(p->ds[i].name, name) == 0)
            return &p->ds[i];
    return NULL;
}

void svc__dsreg_free(svc_dsreg *r)
{
    free(r->name);
    free(r->desc);
    r->name = NULL;
    r->desc = NULL;
}

int svc_producer_register_ds(svc_service *svc, svc_producer *p,
        const Perfetto__Protos__DataSourceDescriptor *d, char *err,
        size_t errlen)
{
    if (!d || !d->name || !d->name[0]) {
        set_err(err, errlen, "data source descriptor has no name");
        return -EINVAL;
    }
    if (strnlen(d->name, SVC_MAX_DS_NAME + 1) > SVC_MAX_DS_NAME) {
        set_err(err, errlen, "data source name too long");
        return -ENAMETOOLONG;
    }
    if (find_ds(p, d->name)) {
        set_err(err, errlen, "data source already registered");
        return -EEXIST;
    }
    if (p->nds >= SVC_MAX_DS_PER_PRODUCER) {
        set_err(err, errlen, "too many data sources");
        return -ENOSPC;
    }
    size_t bytes = strlen(d->name) + 1 +
        perfetto__protos__data_source_descriptor__get_packed_size(d);
    if (p->ds_bytes + bytes > SVC_MAX_DS_BYTES_PER_PRODUCER) {
        if (err && errlen)
            snprintf(err, errlen, "data source %s refused: this producer's "
                     "data sources would take %zu bytes of names and "
                     "descriptors, past the %u a producer may register",
                     d->name, p->ds_bytes + bytes,
                     SVC_MAX_DS_BYTES_PER_PRODUCER);
        return -ENOSPC;
    }
    size_t uid_bytes = 0;
    for (size_t i = 0; i < svc->nproducers; i++)
        if (svc->producers[i]->uid == p->uid)
            uid_bytes += svc->producers[i]->ds_bytes;
    if (uid_bytes + bytes > SVC_MAX_DS_BYTES_PER_UID) {
        if (err && errlen)
            snprintf(err, errlen, "data source %s refused: the producers of "
                     "uid %lu would keep %zu bytes of data source names and "
                     "descriptors, past the %u a uid may register",
                     d->name, (unsigned long)p->uid, uid_bytes + bytes,
                     SVC_MAX_DS_BYTES_PER_UID);
        return -ENOSPC;
    }
    svc_dsreg *grown = realloc(p->ds, (p->nds + 1) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    p->ds = grown;
    svc_dsreg *r = &p->ds[p->nds];
    memset(r, 0, sizeof(*r));
    r->name = strdup(d->name);
    if (!r->name)
        return -ENOMEM;
    r->desc_id = d->has_id ? d->id : 0;
    r->will_notify_on_stop = d->has_will_notify_on_stop &&
                             d->will_notify_on_stop;
    r->will_notify_on_start = d->has_will_notify_on_start &&
                              d->will_notify_on_start;
    r->no_flush = d->has_no_flush && d->no_flush;
    /* Kept packed, unknown fields included (track_event_descriptor...),
     * for QueryServiceState. */
    r->desc_len = perfetto__protos__data_source_descriptor__get_packed_size(d);
    r->desc = malloc(r->desc_len ? r->desc_len : 1);
    if (!r->desc) {
        free(r->name);
        return -ENOMEM;
    }
    perfetto__protos__data_source_descriptor__pack(d, r->desc);
    p->nds++;
    p->ds_bytes += bytes;
    svc->data_sources_seen++;
    /* Sessions already running that want this data source get it now. */
    svc__session_match_new_ds(svc, p, r);
    return 0;
}

int svc_producer_unregister_ds(svc_service *svc, svc_producer *p,
                               const char *name)
{
    if (!name)
        return -EINVAL;
    svc_dsreg *r = find_ds(p, name);
    if (!r)
        return -ENOENT;
    svc__session_drop_ds(svc, p, name);
    p->ds_bytes -= strlen(r->name) + 1 + r->desc_len;
    svc__dsreg_free(r);
    *r = p->ds[--p->nds];
    return 0;
}

int svc_producer_register_writer(svc_service *svc, svc_producer *p,
                                 uint32_t writer_id, uint32_t buffer_id)
{
    (void)svc;
    if (writer_id == 0 || writer_id > SVC_MAX_WRITER_ID)
        return -EINVAL;
    if (writer_id >= p->writer_buf_cap) {
        size_t cap = p->writer_buf_cap ? p->writer_buf_cap : 64;
        while (cap <= writer_id)
            cap *= 2;
        uint32_t *g = realloc(p->writer_buf, cap * sizeof(*g));
        if (!g)
            return -ENOMEM;
        memset(g + p->writer_buf_cap, 0,
               (cap - p->writer_buf_cap) * sizeof(*g));
        p->writer_buf = g;
        p->writer_buf_cap = cap;
    }
    p->writer_buf[writer_id] = buffer_id;
    return 0;
}

int svc_producer_unregister_writer(svc_service *svc, svc_producer *p,
                                   uint32_t writer_id)
{
    (void)svc;
    if (writer_id == 0 || writer_id >= p->writer_buf_cap ||
        !p->writer_buf[writer_id])
        return -ENOENT;
    p->writer_buf[writer_id] = 0;
    return 0;
}

/* 0 if the writer is unknown (no constraint), else its registered buffer. */
uint32_t svc__writer_buffer(const svc_producer *p, uint16_t writer_id)
{
    return writer_id < p->writer_buf_cap ? p->writer_buf[writer_id] : 0;
}

bool svc__producer_may_write(const svc_producer *p, uint32_t buffer_id)
{
    for (size_t i = 0; i < p->nallowed; i++)
        if (p->allowed[i] == buffer_id)
            return true;
    return false;
}

int svc__producer_allow(svc_producer *p, uint32_t buffer_id)
{
    if (svc__producer_may_write(p, buffer_id))
        return 0;
    uint32_t *grown = realloc(p->allowed, (p->nallowed + 1) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    p->allowed = grown;
    p->allowed[p->nallowed++] = buffer_id;
    return 0;
}

void svc__producer_disallow(svc_producer *p, uint32_t buffer_id)
{
    for (size_t i = 0; i < p->nallowed; i++) {
        if (p->allowed[i] == buffer_id) {
            p->allowed[i] = p->allowed[--p->nallowed];
            return;
        }
    }
}

void svc_producer_ds_stopped(svc_service *svc, svc_producer *p,
                             uint64_t instance_id)
{
    svc__session_instance_stopped(svc, p, instance_id);
}
