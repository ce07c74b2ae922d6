/*
 * ins_schema.h - sql/schema.sql, embedded at build time (the rule is in
 * inspector/Makefile.inc; the generated ins_schema_sql.c lives in the build
 * tree). NUL-terminated, ready for sqlite3_exec().
 */
#ifndef INS_SCHEMA_H
#define INS_SCHEMA_H

extern const char ins_schema_sql[];

#endif /* INS_SCHEMA_H */
