/*
 * svc_log.h - how strings that peers chose reach shmtraced's log.
 *
 * A producer names itself (InitializeConnection) and its data sources; a
 * consumer names triggers, sessions and data sources in its config; a
 * producer sends trigger names. Written raw into a log line, such a string
 * can hold a newline and a whole forged "shmtraced: ..." line after it,
 * or terminal escapes, and it can be as long as an IPC frame. Every one is
 * logged through svc_log_str(): printable ASCII is kept but for '"' and
 * '\', which are escaped; \n, \r and \t are written so; every other byte
 * (controls, DEL, bytes >= 0x80) as \xNN; and the string is cut after
 * max_in bytes, the longest the service keeps of it (SVC_LOG_NAME_MAX for
 * names), with "..." marking the cut. What it writes is one line that
 * cannot close the quotes it is put in.
 */
#ifndef SHMTRACE_SVC_LOG_H
#define SHMTRACE_SVC_LOG_H

#include <stddef.h>

/* The longest producer, data source or trigger name the service keeps
 * (svc_producer.c cuts producer names to it and refuses longer data
 * source names): a logged name is cut there. */
#define SVC_LOG_NAME_MAX 256u

/* Bytes svc_log_str needs to write a string of max_in bytes whole: four
 * per byte (\xNN), the "..." of a cut, and the NUL. */
#define SVC_LOG_STR_BYTES(max_in) (4u * (size_t)(max_in) + 4u)
#define SVC_LOG_NAME_BYTES SVC_LOG_STR_BYTES(SVC_LOG_NAME_MAX)

/* Writes in (NULL: empty), escaped and cut after max_in bytes as above,
 * into out[outsz] (outsz >= 4; NUL-terminated; an escape is never split:
 * if out is too small the text is cut there, marked "...") and returns
 * out, to be used as a printf argument:
 *     char nm[SVC_LOG_NAME_BYTES];
 *     fprintf(stderr, "... \"%s\" ...",
 *             svc_log_str(nm, sizeof nm, name, SVC_LOG_NAME_MAX));
 */
const char *svc_log_str(char *out, size_t outsz, const char *in,
                        size_t max_in);

#endif /* SHMTRACE_SVC_LOG_H */
