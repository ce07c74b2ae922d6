/*
 * cli_parse.h - value parsers shared by the command-line tools (cli_*).
 * All return 0 or a negative errno (-EINVAL malformed, -ERANGE too big) and
 * leave *out untouched on failure.
 */
#ifndef SHMTRACE_CLI_PARSE_H
#define SHMTRACE_CLI_PARSE_H

#include <stdint.h>

/* NUMBER[b|k|kb|m|mb|g|gb] (case-insensitive) -> KiB, rounded up to a
 * multiple of 4 (BufferConfig.size_kb must be); a plain NUMBER is KiB. */
int cli_parse_size_kb(const char *s, uint32_t *kb);
/* NUMBER[ms|s|m|h] -> ms; a plain NUMBER is seconds. */
int cli_parse_duration_ms(const char *s, uint32_t *ms);
/* Decimal or 0x hex, no sign. */
int cli_parse_u64(const char *s, uint64_t *out);
/* Whole file as a NUL-terminated malloc'd string (at most 16 MiB); NULL
 * with *err set (-errno, -EFBIG, -ENOMEM). */
char *cli_read_file(const char *path, int *err);

#endif /* SHMTRACE_CLI_PARSE_H */
