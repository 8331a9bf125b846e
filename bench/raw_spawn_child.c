/*
 * raw_spawn_child: the floor under a worker's revival, for bench_supervisor.
 * It does the least a worker must do before it is of any use: be exec'd, open
 * the LMDB environment read-only and read one key (the store's schema mark in
 * the `meta` sub-database). Exit 0 when the key was read.
 *
 * Usage: raw_spawn_child DATA_DIR
 */
#include <lmdb.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	MDB_env *env;
	MDB_txn *t;
	MDB_dbi dbi;
	MDB_val k = { 6, "schema" }, v;
	if (argc != 2) {
		fprintf(stderr, "usage: raw_spawn_child DATA_DIR\n");
		return 2;
	}
	/* The same settings as the store's (16 sub-databases, no thread-local
	 * reader slots), so the open costs what the worker's costs. */
	int rc = mdb_env_create(&env);
	if (!rc)
		rc = mdb_env_set_maxdbs(env, 16);
	if (!rc)
		rc = mdb_env_open(env, argv[1], MDB_RDONLY | MDB_NOTLS, 0600);
	if (!rc)
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &t);
	if (!rc) {
		rc = mdb_dbi_open(t, "meta", 0, &dbi);
		if (!rc)
			rc = mdb_get(t, dbi, &k, &v);
		mdb_txn_abort(t);
	}
	if (rc) {
		fprintf(stderr, "raw_spawn_child: %s: %s\n", argv[1], mdb_strerror(rc));
		return 1;
	}
	mdb_env_close(env);
	return 0;
}
