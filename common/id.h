/*
 * id.h: the identifiers every program checks the same way. Conversation and
 * tool call ids are 1-ID_MAX bytes of [A-Za-z0-9._:-] (safe in a path, a log
 * line and a URL without quoting); an event_id is any 1-EVENT_ID_MAX bytes.
 * Configured model and tool names follow the id rule too.
 *
 * Also the kinds that the configuration names and the store records, so each
 * is defined once: a tool's executor and the durability mode.
 */
#ifndef AGENTD_ID_H
#define AGENTD_ID_H

#include <stddef.h>

#define ID_MAX 128
#define EVENT_ID_MAX 200

enum exec_kind { EXEC_SERVER = 0, EXEC_HUMAN = 1 };
enum sync_mode { SYNC_FULL = 0, SYNC_NONE = 1 };

/* 1 if id[0..len) is a valid id, else 0 (NULL is not). */
int id_valid(const char *id, size_t len);

/* A random id: prefix then 2*nbytes hex digits (arc4random), NUL-terminated
 * in out (size bytes; it must fit, or the program aborts: a sizing mistake of
 * the caller). Conversations get "c-" + 16 hex, minted tool calls "tc-" + 20. */
void id_random(char *out, size_t size, const char *prefix, size_t nbytes);

#endif
