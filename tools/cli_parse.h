/*
 * cli_parse.h - value parsers shared by the command-line tools (cli_*).
 * All return 0 or a negative errno (-EINVAL malformed, -ERANGE too big) and
 * leave *out untouched on failure.
 */
#ifndef SHMTRACE_CLI_PARSE_H
#define SHMTRACE_CLI_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Largest buffer the service accepts (BufferConfig.size_kb * 1024 must
 * fit 32 bits), rounded down to the multiple of 4 cli_parse_size_kb
 * produces. */
#define CLI_MAX_BUFFER_KB 4194300u

/* NUMBER[b|k|kb|m|mb|g|gb] (case-insensitive) -> KiB, rounded up to a
 * multiple of 4 (BufferConfig.size_kb must be); a plain NUMBER is KiB. */
int cli_parse_size_kb(const char *s, uint32_t *kb);
/* A --buffer-size value: cli_parse_size_kb, then 4k..CLI_MAX_BUFFER_KB.
 * On failure why gets the reason in the user's units ("is 0: a buffer
 * needs at least 4k", "is larger than the 4095m a buffer can hold"). */
int cli_parse_buffer_kb(const char *s, uint32_t *kb, char *why, size_t n);
/* NUMBER[ms|s|m|h] -> ms; a plain NUMBER is seconds. */
int cli_parse_duration_ms(const char *s, uint32_t *ms);
/* Decimal or 0x hex, no sign. */
int cli_parse_u64(const char *s, uint64_t *out);
/* Whole file as a NUL-terminated malloc'd string (at most 16 MiB); NULL
 * with *err set (-errno, -EFBIG, -ENOMEM). */
char *cli_read_file(const char *path, int *err);

/* Print the one-line complaint about a bad option getopt_long returned
 * (optstring must start with ':' so a missing argument is ':') and the
 * "Try 'PROG --help'" line. opt is what getopt returned, optopt getopt's,
 * arg the offending argv element. */
void cli_bad_option(const char *prog, int opt, int optopt,
                    const char *arg);

#endif /* SHMTRACE_CLI_PARSE_H */
