/* target.c: the conformance suite's stores on the backend under test (target.h). */
#include "tests/conformance/target.h"
#undef store_open

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAXDB 16
#define DB "conformance" /* the one database; each store is a schema in it */
static char made[MAXDB][64];
static int nmade;

const char *conf_backend(void)
{
	const char *b = getenv("AGENTD_TEST_STORE");
	return b && strcmp(b, "pg") == 0 ? "pg" : "lmdb";
}

/* A schema name for a directory: "conf_" and the hex of what follows
 * the fixture's "agentd-conf-" (the mkdtemp suffix and any subdirectory),
 * unique per directory, and a valid identifier. */
static int db_name(const char *dir, char *out, size_t size)
{
	const char *p = strstr(dir, "agentd-conf-");
	p = p ? p + 12 : dir;
	size_t len = strlen(p);
	if (5 + 2 * len + 1 > size)
		return -ENAMETOOLONG;
	strcpy(out, "conf_");
	for (size_t i = 0; i < len; i++)
		sprintf(out + 5 + 2 * i, "%02x", (unsigned char)p[i]);
	return 0;
}

static PGconn *admin(const char *db)
{
	char ci[512];
	snprintf(ci, sizeof ci, "%s dbname=%s options=-cclient_min_messages=warning", getenv("AGENTD_TEST_PG") ? getenv("AGENTD_TEST_PG") : "", db);
	PGconn *c = PQconnectdb(ci);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "conformance: cannot reach the test cluster (%s): %s", ci, PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	return c;
}

static int admin_exec(const char *db, const char *sql)
{
	PGconn *c = admin(db);
	if (!c)
		return -ECONNREFUSED;
	PGresult *r = PQexec(c, sql);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "conformance: %s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	return ok ? 0 : -EIO;
}

int conf_store_open(store **out, const char *dir, const struct store_opts *opts)
{
	if (strcmp(conf_backend(), "pg") != 0 || !dir || !out)
		return store_open(out, dir, opts);
	struct stat sb;
	if (stat(dir, &sb))
		return -errno;
	if (!S_ISDIR(sb.st_mode))
		return -ENOTDIR;
	char name[64], sql[128], target[640];
	int err = db_name(dir, name, sizeof name);
	if (err)
		return err;
	int known = 0;
	for (int i = 0; i < nmade; i++)
		known |= strcmp(made[i], name) == 0;
	if (!known && !(opts && opts->read_only)) {
		if (nmade == MAXDB)
			return -ENOSPC;
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", name);
		if ((err = admin_exec(DB, sql)) != 0)
			return err;
		strcpy(made[nmade++], name);
	}
	snprintf(target, sizeof target, "%s dbname=" DB " options=-csearch_path=%s",
		 getenv("AGENTD_TEST_PG") ? getenv("AGENTD_TEST_PG") : "", name);
	return store_open(out, target, opts);
}

void conf_target_cleanup(void)
{
	char sql[128];
	while (nmade > 0) {
		snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", made[--nmade]);
		admin_exec(DB, sql);
	}
}
