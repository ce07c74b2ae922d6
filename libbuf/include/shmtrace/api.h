/*
 * shmtrace/api.h - export macro shared by libbuf and libshm.
 *
 * The libraries build with -fvisibility=hidden; only declarations marked
 * SHMTRACE_API are exported. Installed by libbuf and used by libshm too.
 */
#ifndef SHMTRACE_API_H
#define SHMTRACE_API_H

#if defined(__GNUC__) && __GNUC__ >= 4
#define SHMTRACE_API __attribute__((visibility("default")))
#else
#define SHMTRACE_API
#endif

#endif /* SHMTRACE_API_H */
