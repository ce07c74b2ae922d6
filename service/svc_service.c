/*
 * svc_service.c - the service object: creation and teardown, the table of
 * live buffers (global BufferID -> tb_buffer, owning session), session
 * accessors and the clock.
 *
 * Buffer ids are 1..65535, handed out round-robin and never reused while
 * the buffer is alive; a producer's `allowed` list is pruned when a buffer
 * goes (svc__producer_disallow), so a stale id can never reach a new
 * session's buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_int.h"

void svc__set_err(char *err, size_t errlen, const char *fmt,
                    unsigned long long a, unsigned long long b)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, a, b);
}

uint64_t svc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---------------------------------------------------------------- service */

svc_service *svc_create(const svc_ops *ops, void *ops_ctx, uid_t uid)
{
    svc_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return NULL;
    if (ops)
        svc->ops = *ops;
    svc->ops_ctx = ops_ctx;
    svc->uid = uid;
    svc->root_access = true;
    svc->max_sessions_per_uid = SVC_MAX_SESSIONS_PER_UID_DEFAULT;
    svc->max_buffer_kb_per_uid = SVC_MAX_BUFFER_KB_PER_UID_DEFAULT;
    svc_set_buffer_budget(svc, SVC_MAX_TOTAL_BUFFER_KB,
                          SVC_RESERVED_BUFFER_KB);
    svc->file_step_bytes = SVC_FILE_STEP_BYTES;
    svc->file_in_place_min = SVC_FILE_IN_PLACE_MIN;
    return svc;
}

void svc_set_file_step_bytes(svc_service *svc, size_t bytes)
{
    svc->file_step_bytes = bytes ? bytes : SVC_FILE_STEP_BYTES;
}

void svc_set_file_in_place_min(svc_service *svc, size_t bytes)
{
    svc->file_in_place_min = bytes ? bytes : SVC_FILE_IN_PLACE_MIN;
}

void svc_set_file_direct(svc_service *svc, bool on)
{
    svc->file_direct = on;
}

void svc_set_file_copied_mode(svc_service *svc, svc_file_copied_mode mode)
{
    svc->file_copied_mode = mode;
}

/* The writer thread's fence and probe on a buffer (fw NULL: neither): its
 * writes wait for the slices in flight they would overwrite, and its
 * rewinds (libbuf/tb_rewind.c) wait for none. */
static void attach_file_writer(tb_buffer *buf, svc_fwriter *fw)
{
    tb_set_write_fence(buf, fw ? svc_fw_fence : NULL, fw);
    tb_set_write_probe(buf, fw ? svc_fw_busy : NULL, fw);
}

int svc_set_file_writer_thread(svc_service *svc, bool on)
{
    if (on && !svc->fw) {
        svc->fw = svc_fw_create();
        if (!svc->fw)
            return -ENOMEM;
        for (size_t i = 0; i < svc->nbufslots; i++)
            if (svc->bufs[i].id)
                attach_file_writer(svc->bufs[i].buf, svc->fw);
    } else if (!on && svc->fw) {
        for (size_t i = 0; i < svc->nbufslots; i++)
            if (svc->bufs[i].id)
                attach_file_writer(svc->bufs[i].buf, NULL);
        svc_fw_destroy(svc->fw);       /* writes what is in flight */
        svc->fw = NULL;
    }
    return 0;
}

int svc_file_writer_fd(const svc_service *svc)
{
    return svc_fw_event_fd(svc->fw);
}

void svc_set_root_access(svc_service *svc, bool root_may_access_all)
{
    svc->root_access = root_may_access_all;
}

void svc_set_buffer_budget(svc_service *svc, uint64_t total_kb,
                           uint64_t reserved_kb)
{
    svc->max_total_buffer_kb = total_kb ? total_kb : SVC_MAX_TOTAL_BUFFER_KB;
    svc->reserved_buffer_kb = reserved_kb;
}

void svc_set_uid_limits(svc_service *svc, uint32_t max_sessions,
                        uint64_t max_buffer_kb)
{
    svc->max_sessions_per_uid = max_sessions;
    svc->max_buffer_kb_per_uid = max_buffer_kb;
}

bool svc__may_access(const svc_service *svc, uid_t viewer,
                     const svc_session *s)
{
    if (viewer == (uid_t)-1)
        return false;               /* unknown caller: nothing */
    return s->consumer_uid == viewer || (viewer == 0 && svc->root_access);
}

void svc_destroy(svc_service *svc)
{
    if (!svc)
        return;
    while (svc->nsessions)
        svc_session_free(svc, svc->sessions[svc->nsessions - 1]);
    while (svc->nproducers)
        svc_producer_disconnect(svc, svc->producers[svc->nproducers - 1]);
    svc_fw_destroy(svc->fw);
    svc__file_spare_free(svc);
    free(svc->sessions);
    free(svc->producers);
    free(svc->bufs);
    svc__trigger_service_free(svc);
    free(svc);
}

size_t svc_session_count(const svc_service *svc)
{
    return svc->nsessions;
}

void svc_disable_all_sessions(svc_service *svc)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        svc_session_disable(svc, svc->sessions[i]);
}

bool svc_all_sessions_disabled(const svc_service *svc)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        if (svc->sessions[i]->state != SVC_SESSION_DISABLED)
            return false;
    return true;
}

size_t svc_sessions_owing_reads(const svc_service *svc)
{
    size_t n = 0;
    for (size_t i = 0; i < svc->nsessions; i++)
        n += svc->sessions[i]->out_fd < 0 && svc->sessions[i]->consumer;
    return n;
}

void svc_session_uuid(const svc_session *s, int64_t *msb, int64_t *lsb)
{
    *msb = s->uuid_msb;
    *lsb = s->uuid_lsb;
}

uint64_t svc_session_id(const svc_session *s)
{
    return s->id;
}

bool svc_session_is_disabled(const svc_session *s)
{
    return s->state == SVC_SESSION_DISABLED;
}

bool svc_session_writes_file(const svc_session *s)
{
    return s->out_fd >= 0;
}

svc_session *svc_session_by_consumer(svc_service *svc, void *consumer)
{
    for (size_t i = 0; i < svc->nsessions; i++)
        if (svc->sessions[i]->consumer == consumer)
            return svc->sessions[i];
    return NULL;
}

/* ---------------------------------------------------------------- buffers */

tb_buffer *svc__buffer(svc_service *svc, uint32_t id, svc_session **out)
{
    if (id == 0)
        return NULL;
    for (size_t i = 0; i < svc->nbufslots; i++) {
        if (svc->bufs[i].id == id) {
            if (out)
                *out = svc->bufs[i].session;
            return svc->bufs[i].buf;
        }
    }
    return NULL;
}

/* Takes ownership of buf; returns the new global id or 0 (buf destroyed). */
uint32_t svc__buffer_add(svc_service *svc, tb_buffer *buf, svc_session *s)
{
    uint32_t id = svc->last_buffer_id;
    bool found = false;
    for (uint32_t tries = 0; tries < 65535 && !found; tries++) {
        id = id >= 65535 ? 1 : id + 1;
        found = svc__buffer(svc, id, NULL) == NULL;
    }
    size_t slot = svc->nbufslots;
    for (size_t i = 0; i < svc->nbufslots; i++)
        if (svc->bufs[i].id == 0) {
            slot = i;
            break;
        }
    if (found && slot == svc->nbufslots) {
        svc_bufslot *g = realloc(svc->bufs, (slot + 1) * sizeof(*g));
        if (g) {
            svc->bufs = g;
            svc->nbufslots++;
        } else {
            found = false;
        }
    }
    if (!found) {
        tb_destroy(buf);
        return 0;
    }
    if (svc->fw)
        attach_file_writer(buf, svc->fw);
    svc->bufs[slot].id = id;
    svc->bufs[slot].buf = buf;
    svc->bufs[slot].session = s;
    svc->last_buffer_id = id;
    return id;
}

void svc__buffer_remove(svc_service *svc, uint32_t id)
{
    for (size_t i = 0; i < svc->nbufslots; i++) {
        if (svc->bufs[i].id == id) {
            svc->total_buffer_kb -= tb_size(svc->bufs[i].buf) / 1024;
            svc_fw_drain(svc->fw);  /* no batch in flight points into it */
            tb_destroy(svc->bufs[i].buf);
            memset(&svc->bufs[i], 0, sizeof(svc->bufs[i]));
        }
    }
    for (size_t i = 0; i < svc->nproducers; i++)
        svc__producer_disallow(svc->producers[i], id);
}
