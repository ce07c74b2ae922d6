/*
 * svc_sysinfo.c - the SystemInfo packet's contents.
 *
 * Perfetto's traced writes one SystemInfo packet at the start of each
 * session's trace (first read pass; none if the config sets
 * builtin_data_sources.disable_system_info), and so does shmtraced
 * (svc_read.c). Trace processor depends on it:
 *   - its metadata table: system_name, system_version, system_release,
 *     system_machine (utsname), timezone_off_mins, system_ram_bytes and
 *     tracing_service_version;
 *   - the syscall table of raw_syscalls events comes from utsname.machine,
 *     and ftrace's task states are decoded by the kernel release;
 *   - tracing_service_version's major says what the service did: from v54
 *     on it flushes the data sources before its periodic file writes
 *     (TraceConfig.write_flush_mode), and a write_into_file config without
 *     flush_period_ms is flagged as an error (config_write_into_file_no_flush)
 *     only for older or unknown services. shmtraced flushes that way
 *     (svc_session.c), implementing the service of Perfetto v58.2, so it
 *     writes "Perfetto v58.2-shmtraced-VERSION (shmtraced VERSION)": the
 *     prefix trace processor parses, then who we are (svc_sysinfo.h).
 *
 * The fields are those traced fills on Linux, read the same way: uname(),
 * the local time zone's offset from UTC in minutes (the daemon's TZ),
 * sysconf(_SC_PAGESIZE) and (_SC_NPROCESSORS_CONF), sysinfo()'s total RAM.
 * A value the system does not give is left out, not guessed. Read at each
 * session's first pass (a few system calls), so a changed time zone shows.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/sysinfo.h>

#include "svc_sysinfo.h"

void svc_sysinfo_fill(svc_sysinfo *si)
{
    memset(si, 0, sizeof(*si));
    perfetto__protos__system_info__init(&si->info);
    perfetto__protos__utsname__init(&si->utsname);
    si->info.tracing_service_version = (char *)SVC_TRACING_SERVICE_VERSION;

    if (uname(&si->uts) == 0) {
        si->utsname.sysname = si->uts.sysname;
        si->utsname.version = si->uts.version;
        si->utsname.release = si->uts.release;
        si->utsname.machine = si->uts.machine;
        si->info.utsname = &si->utsname;
    }

    time_t now = time(NULL);
    struct tm local;
    if (now != (time_t)-1 && localtime_r(&now, &local) != NULL) {
        si->info.has_timezone_off_mins = true;
        si->info.timezone_off_mins = (int32_t)(local.tm_gmtoff / 60);
    }

    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && page <= (long)UINT32_MAX) {
        si->info.has_page_size = true;
        si->info.page_size = (uint32_t)page;
    }
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    if (cpus > 0 && cpus <= (long)UINT32_MAX) {
        si->info.has_num_cpus = true;
        si->info.num_cpus = (uint32_t)cpus;
    }
    struct sysinfo sys;
    if (sysinfo(&sys) == 0) {
        si->info.has_system_ram_bytes = true;
        si->info.system_ram_bytes = (uint64_t)sys.totalram * sys.mem_unit;
    }
}
