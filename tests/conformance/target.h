/*
 * target.h: where the conformance suite's stores live. The suite names a
 * store by a directory (made with mkdtemp and mkdir, as an LMDB store is);
 * with AGENTD_TEST_STORE=pg each directory stands for a PostgreSQL store
 * of its own in the test cluster (AGENTD_TEST_PG: the conninfo prefix
 * tests/pg/cluster.sh printed): a fresh schema of the database
 * "conformance" (a store lives in its connection's current schema), created
 * on first open and dropped by conf_target_cleanup. A schema, not a
 * database, because CREATE DATABASE copies a template (about a second
 * here), which made the suite take minutes. Included after store.h: the suite's store_open
 * calls, the tests' own included, go through conf_store_open.
 */
#ifndef AGENTD_TESTS_CONFORMANCE_TARGET_H
#define AGENTD_TESTS_CONFORMANCE_TARGET_H
#include "store/store.h"

/* store_open on the store the directory `dir` stands for: the directory
 * itself (LMDB), or its schema (the directory must exist all the same,
 * as an LMDB store's must; not created when opts->read_only). */
int conf_store_open(store **out, const char *dir, const struct store_opts *opts);
/* Drop every store conf_store_open created in this process. */
void conf_target_cleanup(void);
/* The backend under test: "lmdb" or "pg". */
const char *conf_backend(void);

#define store_open conf_store_open
#endif
