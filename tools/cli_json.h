/*
 * cli_json.h - JSON output of the command-line tools (cli_json_*): a
 * protobuf-c message of any type printed as a JSON object (field names
 * as in the .proto, 64-bit integers as JSON numbers, enums by name, bytes
 * as base64-free hex strings), and string escaping for hand-built objects
 * (`shmtrace stats --json`, `shmtrace record --json`).
 */
#ifndef SHMTRACE_CLI_JSON_H
#define SHMTRACE_CLI_JSON_H

#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

/* A JSON string literal (quotes included) for s; NULL prints null. */
void cli_json_string(FILE *f, const char *s);
/* The message as a JSON object: only fields that are set (proto2
 * has_*, non-NULL pointers, non-empty repeated). NULL prints null. */
void cli_json_message(FILE *f, const ProtobufCMessage *m);

#endif /* SHMTRACE_CLI_JSON_H */
