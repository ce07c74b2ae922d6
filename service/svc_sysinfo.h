/*
 * svc_sysinfo.h - the SystemInfo packet: what the service says about the
 * machine and itself, once per session (design in svc_sysinfo.c).
 */
#ifndef SVC_SYSINFO_H
#define SVC_SYSINFO_H

#include <sys/utsname.h>

#include "trace.pb-c.h"

/* The Perfetto release whose tracing service shmtraced implements: the
 * snapshot of the spec (ec5d16b14b, after v58.2). */
#define SVC_PERFETTO_SERVICE_VERSION "v58.2"

/* SystemInfo.tracing_service_version: the form trace processor parses
 * ("Perfetto vMAJOR.MINOR-..."), then who wrote it. */
#define SVC_TRACING_SERVICE_VERSION                                       \
    "Perfetto " SVC_PERFETTO_SERVICE_VERSION "-shmtraced-" PACKAGE_VERSION \
    " (shmtraced " PACKAGE_VERSION ")"

/* A filled SystemInfo and the storage its strings point into: fill it,
 * point TracePacket.system_info at .info, pack, drop it. No allocation. */
typedef struct {
    struct utsname uts;
    Perfetto__Protos__Utsname utsname;
    Perfetto__Protos__SystemInfo info;
} svc_sysinfo;

void svc_sysinfo_fill(svc_sysinfo *si);

#endif /* SVC_SYSINFO_H */
