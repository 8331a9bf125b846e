/*
 * transfer.h: `agentd export` and `agentd import`: a whole store, of either
 * backend, as a portable stream of JSON lines (docs/scale-out.md, "Moving a
 * store"), and back into an empty store.
 *
 * The stream, version 1: a header line, then per conversation (in id order)
 * its record (metadata included), its events (seq order), its latest summary, its tool calls (id
 * order) and its audit rows (turn_ref order), then a trailer with the counts.
 * Msgpack content is carried as base64 of its bytes, exactly as stored. Writer
 * leases are not carried (they are runtime state: the importing agentd takes
 * new ones), nor summaries superseded by a later one (nothing reads them).
 *
 * Import reads the stream twice: first whole, checking every line, so that a
 * damaged or truncated stream is refused before anything is written; then
 * writing. A store error while writing removes the conversations written so
 * far: the target is empty again.
 */
#ifndef AGENTD_TRANSFER_H
#define AGENTD_TRANSFER_H

#include <stdio.h>

#include "store/store.h"

/* Write the store at target (an LMDB directory or a PostgreSQL target) to
 * out. progress: where a line per 1,000 conversations goes, or NULL. 0, or
 * after printing why on stderr: the store's error (opening or reading it),
 * or the -errno of writing out. */
int transfer_export(const char *target, FILE *out, FILE *progress);

/* The stream of one conversation of the open store st (of kind from:
 * "lmdb" or "postgresql"), whole (header and trailer: `agentd import` takes
 * it), onto out; what retention exports before it removes a conversation.
 * 0, or after printing why on stderr: the store's error (STORE_E_NOTFOUND:
 * no such conversation), or the -errno of writing out. */
int transfer_export_conv(store *st, const char *id, const char *from, FILE *out);

/* Load the stream in (a regular file: it is read twice) into the empty store
 * at target (an LMDB directory, created if missing, or a PostgreSQL target).
 * 0, or, after printing why on stderr: refused with nothing written,
 * -EINVAL (in is not a regular file, or the stream is damaged or truncated)
 * or -ENOTEMPTY (the store is not empty); failed, after removing what was
 * written: the store's error, or mkdir's -errno. */
int transfer_import(const char *target, FILE *in, const char *in_name, FILE *progress);

#endif
