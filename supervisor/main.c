/*
 * main.c: agentd, the supervisor. Parses the command line and the
 * configuration, takes the single-instance lock, opens the store, fires what
 * expired while nothing ran, revives conversations that were mid-turn, and
 * runs the loop until SIGTERM, SIGINT or the `shutdown` op.
 */
#include "common/config.h"
#include "common/jsonmp.h"
#include "common/log.h"
#include "ipc/ipc.h"
#include "store/store.h"
#include "supervisor/check.h"
#include "supervisor/notify.h"
#include "supervisor/server.h"
#include "supervisor/transfer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* What main opens and must close. */
static struct {
	store *st;
	char *data_dir;
	char *sock_path;
	char *worker_path;
	char *config_path;
	char *store_shown; /* the PostgreSQL target without its password, or NULL */
} S;

enum { EXIT_USAGE = 2 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: agentd [OPTIONS]\n"
		"Runs LLM agent conversations as supervised worker processes over an LMDB store\n"
		"(or a PostgreSQL database), driven through a Unix socket (see agentctl). Runs in\n"
		"the foreground, logs to stderr.\n"
		"\n"
		"  --data DIR          LMDB data directory (default ./agentd-data; created if missing)\n"
		"  --store TARGET      a PostgreSQL store instead: postgresql://[user@]host[:port]/db\n"
		"                      or a conninfo (host=... dbname=...); the password is best in\n"
		"                      ~/.pgpass or PGPASSWORD, not on the command line\n"
		"  --run-dir DIR       with --store: the directory of the socket, pid file and locks\n"
		"                      (default ./agentd-run; created if missing). LMDB: DATA itself\n"
		"  --socket PATH       control socket (default DATA/agentd.sock, RUN-DIR/agentd.sock)\n"
		"  --config FILE       INI configuration: models, tools, limits (none needed for\n"
		"                      the built-in echo model)\n"
		"  --ephemeral         keep the (LMDB) store on tmpfs and delete it at exit\n"
		"  --idle-timeout DUR  stop workers idle this long (default 300s; 500ms, 30s, 5m, 1h; 0: at once)\n"
		"  --sync full|none    full: every commit durable before it is acknowledged (default);\n"
		"                      none: flushed every second (an OS crash can lose the last second)\n"
		"  --log-level LEVEL   error, warn, info (default) or debug\n"
		"  --worker PATH       the agentd-worker program (default: beside agentd;\n"
		"                      agentd-worker-dynamic for --store, which has libpq)\n"
		"  --max-workers N     live worker processes at most; more conversations queue\n"
		"  --help, --version\n"
		"\n"
		"agentd export [--data DIR | --store TARGET] [--output FILE]\n"
		"agentd import (--data DIR | --store TARGET) --input FILE\n"
		"  Write a store (either backend) as a portable stream of JSON lines, and load one\n"
		"  into an empty store: an LMDB data directory moves to PostgreSQL and back.\n"
		"\n"
		"agentd check [--data DIR | --store TARGET]\n"
		"  Check the store's consistency (read-only; safe while agentd runs): seqs 1..N,\n"
		"  tool-call rows and expiries against the log, fsm_state and status against what\n"
		"  the log owes. Exit 0 when consistent, 1 listing each problem, 2 when the store\n"
		"  cannot be opened (the reason is printed).\n"
		"\n"
		"agentd backup [--data DIR] PATH\n"
		"  Write a compacted, consistent copy of the store in DIR into PATH (a new or empty\n"
		"  directory), safe while agentd serves: the copy holds every write acknowledged\n"
		"  before it began. Exit 0 when written, 1 when the copy failed, 2 on a usage error.\n"
		"\n"
		"agentd compact [--data DIR]\n"
		"  With agentd stopped: rewrite the LMDB store in DIR without its free pages,\n"
		"  giving the room back to the filesystem. Exit 0 compacted, 1 failed (the store\n"
		"  is as it was), 2 on a usage error.\n"
		"\n"
		"Command-line options override the configuration file. Exit status: 0 after a clean\n"
		"stop, 1 on a runtime failure (another agentd holds DIR, the store cannot open:\n"
		"no server, a bad URI, authentication failed, a newer schema),\n"
		"2 on a usage or configuration error.\n");
}

/* Copy the configuration file to DIR/agentd.ini.running (written whole,
 * then renamed into place) and check that it loads as agentd's did. The
 * path; the file's own path when the copy cannot be written (a full disk);
 * NULL, after logging why, when the copy does not load. */
static char *config_snapshot(const char *src, const char *dir)
{
	char *path = NULL, *tmp = NULL;
	FILE *in = fopen(src, "re"), *out = NULL;
	char buf[8192], err[512];
	size_t n;
	int fd = -1;
	/* asprintf leaves its pointer undefined when it fails: NULL it, for the free below. */
	int ok = in != NULL;
	if (ok && asprintf(&path, "%s/agentd.ini.running", dir) < 0)
		path = NULL, ok = 0;
	if (ok && asprintf(&tmp, "%s.tmp", path) < 0)
		tmp = NULL, ok = 0;
	/* A new file of the owner's alone (the file may hold credentials, and
	 * what it says is what workers run), never through a link. */
	if (ok && unlink(tmp) < 0 && errno != ENOENT)
		ok = 0;
	ok = ok && (fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) >= 0 &&
	     (out = fdopen(fd, "w")) != NULL;
	if (fd >= 0 && !out)
		close(fd);
	while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
		ok = fwrite(buf, 1, n, out) == n;
	ok = ok && !ferror(in);
	if (out && fclose(out))
		ok = 0;
	if (in)
		fclose(in);
	ok = ok && rename(tmp, path) == 0;
	if (!ok) {
		/* A full disk must not keep agentd from starting (reads go on,
		 * and deletes make room): the workers read the file itself. */
		int e = errno;
		if (tmp)
			unlink(tmp);
		free(tmp);
		free(path);
		path = realpath(src, NULL);
		log_warn("cannot copy the configuration %s into %s: %s; workers will read %s itself, so an edit to "
			 "it reaches every worker started from now on", src, dir, strerror(e), path ? path : src);
		return path;
	}
	struct config c;
	if (config_init(&c)) {
		log_error("out of memory");
		ok = 0;
	}
	if (ok && config_load(&c, path, err, sizeof err)) {
		log_error("the configuration changed while agentd read it: %s", err);
		ok = 0;
	}
	config_free(&c);
	if (tmp)
		unlink(tmp);
	free(tmp);
	if (!ok) {
		free(path);
		return NULL;
	}
	return path;
}

static int rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[PATH_MAX];
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	return rmdir(dir);
}

static char *beside_self(const char *name)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return strdup(name);
	self[n] = 0;
	char *dir = dirname(self);
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* Every client and every worker costs descriptors (a worker: its IPC
 * socket, plus a pipe while it starts): take the hard limit, not the
 * default soft 1024. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* `agentd check [--data DIR | --store TARGET]`. */
static int check_main(int argc, char **argv)
{
	const char *dir = "./agentd-data";
	if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
		printf("usage: agentd check [--data DIR | --store TARGET]\n\nCheck the store in DIR (default "
		       "./agentd-data), or the PostgreSQL store TARGET,\nread-only, safe while agentd runs.\n"
		       "Exit status: 0 consistent; 1 problems, one line each; 2 no store to read, or a usage error.\n");
		return 0;
	}
	int pg = 0;
	if (argc == 4 && (!strcmp(argv[2], "--data") || (pg = !strcmp(argv[2], "--store"))))
		dir = argv[3];
	else if (argc == 3 && !strncmp(argv[2], "--data=", 7))
		dir = argv[2] + 7;
	else if (argc == 3 && !strncmp(argv[2], "--store=", 8))
		pg = 1, dir = argv[2] + 8;
	else if (argc != 2)
		dir = NULL;
	if (dir && pg && !config_store_is_pg(dir)) {
		fprintf(stderr, "agentd check: --store '%s' is not a PostgreSQL target (postgresql://..., or a conninfo "
			"starting host= or dbname=)\n", dir);
		return EXIT_USAGE;
	}
	if (dir && !pg && *dir && config_store_is_pg(dir)) {
		fprintf(stderr, "agentd check: --data names a directory; a PostgreSQL target goes with --store\n");
		return EXIT_USAGE;
	}
	if (!dir || !*dir) {
		fprintf(stderr, "usage: agentd check [--data DIR | --store TARGET]\n");
		return EXIT_USAGE;
	}
	int n = 0;
	if (check_store(dir, stdout, &n))
		return 2;
	return n == 0 ? 0 : 1;
}

/* Export into FILE whole or not at all: written to FILE.tmp, synced, then
 * renamed into place, so a failed export never leaves a truncated FILE. */
static int transfer_export_file(const char *target, const char *file)
{
	char *tmp = NULL;
	FILE *out = NULL;
	if (asprintf(&tmp, "%s.tmp", file) < 0)
		tmp = NULL; /* undefined after a failed asprintf */
	if (!tmp || !(out = fopen(tmp, "we"))) {
		fprintf(stderr, "agentd export: cannot write %s: %s\n", tmp ? tmp : file, strerror(errno));
		free(tmp);
		return 1;
	}
	int rc = transfer_export(target, out, stderr);
	if (fsync(fileno(out)) < 0 && !rc) {
		fprintf(stderr, "agentd export: %s: %s\n", tmp, strerror(errno));
		rc = -1;
	}
	if (fclose(out) && !rc) {
		fprintf(stderr, "agentd export: %s: %s\n", tmp, strerror(errno));
		rc = -1;
	}
	if (!rc && rename(tmp, file) < 0) {
		fprintf(stderr, "agentd export: cannot rename %s to %s: %s\n", tmp, file, strerror(errno));
		rc = -1;
	}
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc ? 1 : 0;
}

/* `agentd export|import [--data DIR | --store TARGET] [--output|--input FILE]`. */
static int transfer_main(int argc, char **argv)
{
	int import = !strcmp(argv[1], "import");
	const char *target = NULL, *file = NULL;
	int pg = 0, bad = 0;
	const char *usage_line = import ? "usage: agentd import (--data DIR | --store TARGET) --input FILE\n"
					: "usage: agentd export [--data DIR | --store TARGET] [--output FILE]\n";
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("%s\n%s", usage_line,
			       import ? "Load a stream `agentd export` wrote into an empty store (an LMDB data directory, "
					"created if\nmissing, or a PostgreSQL database). The stream is checked whole "
					"first: a damaged or\ntruncated one, or a store that is not empty, is refused "
					"with nothing written.\nExit status: 0 loaded; 1 refused or failed (nothing "
					"left written); 2 a usage error.\n"
				      : "Write the store (default ./agentd-data) as a stream of JSON lines (docs/scale-"
					"out.md), to\nFILE (written whole, then renamed into place) or standard output. "
					"Run it with agentd\nstopped for an exact copy.\nExit status: 0 written; 1 the "
					"store cannot be read or the stream written; 2 a usage error.\n");
			return 0;
		}
		if ((!strcmp(a, "--data") || !strcmp(a, "--store")) && v && !target) {
			pg = !strcmp(a, "--store");
			target = v;
			i++;
		} else if (!strcmp(a, import ? "--input" : "--output") && v && !file) {
			file = v;
			i++;
		} else {
			bad = 1;
		}
	}
	if (!target && !import)
		target = "./agentd-data";
	if (bad || !target || !*target || (import && (!file || !*file)) || (file && !*file)) {
		fputs(usage_line, stderr);
		return EXIT_USAGE;
	}
	if (pg != config_store_is_pg(target)) {
		fprintf(stderr, "agentd %s: %s\n", argv[1], pg ? "--store takes a PostgreSQL target (postgresql://..., "
			"or a conninfo starting host= or dbname=)" : "--data names a directory; a PostgreSQL target goes "
			"with --store");
		return EXIT_USAGE;
	}
	if (import) {
		FILE *in = fopen(file, "re");
		if (!in) {
			fprintf(stderr, "agentd import: cannot read %s: %s\n", file, strerror(errno));
			return 1;
		}
		int rc = transfer_import(target, in, file, stderr);
		fclose(in);
		return rc ? 1 : 0;
	}
	if (!file)
		return transfer_export(target, stdout, stderr) ? 1 : 0;
	return transfer_export_file(target, file);
}

/* The offline commands' `--data DIR` (or `--data=DIR`) at argv[*i], if
 * there: its value (else dflt), *i moved past it. */
static const char *data_option(int argc, char **argv, int *i, const char *dflt)
{
	if (*i + 1 < argc && !strcmp(argv[*i], "--data")) {
		*i += 2;
		return argv[*i - 1];
	}
	if (*i < argc && !strncmp(argv[*i], "--data=", 7))
		return argv[(*i)++] + 7;
	return dflt;
}

/* `agentd backup [--data DIR] PATH`: store_backup from a process of its
 * own, so agentd goes on serving; PATH is made (0700) when absent. */
static int backup_main(int argc, char **argv)
{
	const char *dir = "./agentd-data", *path = NULL;
	int i = 2;
	if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
		printf("usage: agentd backup [--data DIR] PATH\n\nWrite a compacted, consistent copy of the store "
		       "in DIR (default ./agentd-data)\ninto PATH, a new or empty directory, while agentd serves.\n"
		       "Restore: stop agentd, and start it with --data PATH (or move PATH's data.mdb into DIR).\n"
		       "Exit status: 0 written; 1 the copy failed; 2 a usage error.\n");
		return 0;
	}
	dir = data_option(argc, argv, &i, dir);
	if (i + 1 == argc && argv[i][0] != '-')
		path = argv[i];
	if (!path || !*path || !*dir) {
		fprintf(stderr, "usage: agentd backup [--data DIR] PATH\n");
		return EXIT_USAGE;
	}
	store *st;
	struct store_opts o = { .read_only = 1 };
	int e = store_open(&st, dir, &o);
	if (e) {
		fprintf(stderr, "agentd backup: cannot open the store in %s: %s\n", dir, store_strerror(e));
		return 1;
	}
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "agentd backup: cannot make %s: %s\n", path, strerror(errno));
		store_close(st);
		return 1;
	}
	e = store_backup(st, path);
	store_close(st);
	if (e == -EEXIST)
		fprintf(stderr, "agentd backup: %s is not empty: give a new or empty directory\n", path);
	else if (e == -EOPNOTSUPP)
		fprintf(stderr, "agentd backup: the store is PostgreSQL: back it up with pg_dump "
				"(docs/operations.md, \"Backup and restore\")\n");
	else if (e)
		fprintf(stderr, "agentd backup: copying %s into %s: %s\n", dir, path, store_strerror(e));
	else
		printf("backup of %s written to %s\n", dir, path);
	return e ? 1 : 0;
}

/* The command line over the configuration file it names. Returns -1 to go
 * on, or the status to exit with (0 after --help or --version). */
/* Command-line options given, each over the configuration's value. */
struct options {
	const char *data, *socket, *worker, *idle, *sync, *level, *max, *store, *run_dir;
};

/* 0, or -1 (a usage error) or -ENOMEM, with the reason on stderr. */
static int options_apply(struct config *cfg, const struct options *o)
{
	if ((o->data && !*o->data) || (o->socket && !*o->socket) || (o->worker && !*o->worker) ||
	    (o->run_dir && !*o->run_dir)) {
		fprintf(stderr, "agentd: --%s is an empty path\n", o->data && !*o->data ? "data" :
			o->socket && !*o->socket ? "socket" : o->worker && !*o->worker ? "worker" : "run-dir");
		return -1;
	}
	if (o->data && o->store) {
		fprintf(stderr, "agentd: --data and --store both given: one store, either an LMDB data directory "
			"or a PostgreSQL target\n");
		return -1;
	}
	if (o->store && !config_store_is_pg(o->store)) {
		fprintf(stderr, "agentd: --store '%s' is not a PostgreSQL target (postgresql://[user@]host[:port]/db, "
			"postgres://..., or a conninfo starting host= or dbname=); an LMDB store is --data DIR\n",
			o->store);
		return -1;
	}
	if (o->data) {
		/* The command line's store over the configuration's. */
		free(cfg->data);
		cfg->data = strdup(o->data);
		free(cfg->store);
		cfg->store = NULL;
	}
	if (o->store) {
		free(cfg->store);
		cfg->store = strdup(o->store);
	}
	if (o->run_dir) {
		free(cfg->run_dir);
		cfg->run_dir = strdup(o->run_dir);
	}
	if (o->socket) {
		free(cfg->socket);
		cfg->socket = strdup(o->socket);
	}
	if (o->worker) {
		free(cfg->worker);
		cfg->worker = strdup(o->worker);
	}
	if ((o->data && !cfg->data) || (o->socket && !cfg->socket) || (o->worker && !cfg->worker) ||
	    (o->store && !cfg->store) || (o->run_dir && !cfg->run_dir)) {
		fprintf(stderr, "agentd: out of memory\n");
		return -ENOMEM;
	}
	if (o->idle && (config_duration(o->idle, &cfg->idle_timeout_ms) || cfg->idle_timeout_ms < 0)) {
		fprintf(stderr, "agentd: bad --idle-timeout '%s' (a duration: 500ms, 30s, 5m, 1h)\n", o->idle);
		return -1;
	}
	if (o->sync) {
		if (!strcmp(o->sync, "full"))
			cfg->sync = STORE_SYNC_FULL;
		else if (!strcmp(o->sync, "none"))
			cfg->sync = STORE_SYNC_NONE;
		else {
			fprintf(stderr, "agentd: bad --sync '%s' (full or none)\n", o->sync);
			return -1;
		}
	}
	if (o->level && (cfg->log_level = config_log_level(o->level)) < 0) {
		fprintf(stderr, "agentd: bad --log-level '%s' (error, warn, info, debug)\n", o->level);
		return -1;
	}
	if (o->max) {
		char *end;
		long n = strtol(o->max, &end, 10);
		if (*end || n < 1 || n > 1000000) {
			fprintf(stderr, "agentd: bad --max-workers '%s' (1 to 1000000)\n", o->max);
			return -1;
		}
		cfg->max_workers = (int)n;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct config *cfg, const char **config_file)
{
	static const struct option opts[] = {
		{ "data", required_argument, 0, 'd' }, { "socket", required_argument, 0, 's' },
		{ "config", required_argument, 0, 'c' }, { "ephemeral", no_argument, 0, 'e' },
		{ "idle-timeout", required_argument, 0, 'i' }, { "sync", required_argument, 0, 'y' },
		{ "log-level", required_argument, 0, 'l' }, { "worker", required_argument, 0, 'w' },
		{ "max-workers", required_argument, 0, 'm' }, { "help", no_argument, 0, 'h' },
		{ "store", required_argument, 0, 'S' }, { "run-dir", required_argument, 0, 'R' },
		{ "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
	};
	const char *o_data = NULL, *o_socket = NULL, *o_config = NULL, *o_idle = NULL, *o_sync = NULL,
		   *o_level = NULL, *o_worker = NULL, *o_max = NULL, *o_store = NULL, *o_run = NULL;
	int o_ephemeral = 0, c;
	char err[512];

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': o_data = optarg; break;
		case 's': o_socket = optarg; break;
		case 'c': o_config = optarg; break;
		case 'e': o_ephemeral = 1; break;
		case 'i': o_idle = optarg; break;
		case 'y': o_sync = optarg; break;
		case 'l': o_level = optarg; break;
		case 'w': o_worker = optarg; break;
		case 'm': o_max = optarg; break;
		case 'S': o_store = optarg; break;
		case 'R': o_run = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("agentd %s\n", AGENTD_VERSION); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "agentd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EXIT_USAGE;
	}
	if (o_config && config_load(cfg, o_config, err, sizeof err)) {
		/* "agentd.ini: No such file or directory" alone does not say which file that was. */
		fprintf(stderr, "agentd: %s%s\n", access(o_config, R_OK) ? "cannot read the configuration file: " : "", err);
		return EXIT_USAGE;
	}
	struct options o = { o_data, o_socket, o_worker, o_idle, o_sync, o_level, o_max, o_store, o_run };
	int e = options_apply(cfg, &o);
	if (e)
		return e == -ENOMEM ? EXIT_FAILURE : EXIT_USAGE;
	if (o_ephemeral && cfg->store) {
		fprintf(stderr, "agentd: --ephemeral keeps an LMDB store on tmpfs; it does not go with a PostgreSQL "
			"store (--store, or [store] target)\n");
		return EXIT_USAGE;
	}
	cfg->ephemeral = o_ephemeral;
	*config_file = o_config;
	return -1;
}

/* The directory agentd keeps its files in: the LMDB data directory, or
 * with a PostgreSQL store the run directory (socket, pid file, locks,
 * the configuration's copy). */
static const char *home_dir(const struct config *cfg)
{
	if (cfg->store)
		return cfg->run_dir ? cfg->run_dir : "./agentd-run";
	return cfg->data;
}

/* The data directory (tmpfs for --ephemeral), or the run directory, into
 * S.data_dir, made or checked: ours and writable by us alone. *made: this
 * start created it. 0 or -1 (logged). */
static int data_dir_open(const struct config *cfg, int *made)
{
	if (cfg->ephemeral) {
		const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		if (asprintf(&S.data_dir, "%s/agentd-XXXXXX", base) < 0)
			S.data_dir = NULL;
		if (!S.data_dir || !mkdtemp(S.data_dir)) {
			log_error("cannot create an ephemeral data directory in %s: %s", base, strerror(errno));
			free(S.data_dir);
			S.data_dir = NULL; /* nothing to remove */
			return -1;
		}
	} else {
		struct stat sb;
		const char *dir = home_dir(cfg), *what = cfg->store ? "run" : "data";
		if (!dir[0]) {
			log_error("the %s directory is an empty path", what);
			return -1;
		}
		if (mkdir(dir, 0700) == 0)
			*made = 1;
		else if (errno != EEXIST) {
			log_error("cannot create the %s directory %s: %s", what, dir, strerror(errno));
			return -1;
		}
		if (stat(dir, &sb) < 0) {
			log_error("%s directory %s: %s", what, dir, strerror(errno)); /* a dangling link, say */
			return -1;
		}
		if (!S_ISDIR(sb.st_mode)) {
			log_error("the %s directory %s is not a directory", what, dir);
			return -1;
		}
		/* Whoever can write the directory can change what agentd runs
		 * (the configuration copy workers read) and what it writes
		 * through (a link planted under a store file's name). */
		if (sb.st_uid != geteuid()) {
			log_error("the %s directory %s belongs to uid %u, not to agentd's %u: refusing it",
				  what, dir, (unsigned)sb.st_uid, (unsigned)geteuid());
			return -1;
		}
		if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
			log_error("the %s directory %s is writable by %s (mode %04o): refusing it (chmod 700 %s)",
				  what, dir, sb.st_mode & S_IWOTH ? "everyone" : "its group", (unsigned)(sb.st_mode & 07777),
				  dir);
			return -1;
		}
		S.data_dir = realpath(dir, NULL);
		if (!S.data_dir) {
			log_error("%s directory %s: %s", what, dir, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The data directory's single-instance lock: agentd.pid, held locked
 * (flock) while agentd runs, with its pid written in for people. A pid that
 * cannot be written (a full disk) costs the text, never the lock: libbsd's
 * pidfile_write drops the lock when its write fails. Returns the locked
 * descriptor, or -1 with errno (EEXIST: another agentd, *other its pid when
 * it could be read). */
static int pid_lock(const char *path, pid_t *other)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno == EWOULDBLOCK ? EEXIST : errno;
		char b[24] = "";
		if (e == EEXIST && pread(fd, b, sizeof b - 1, 0) > 0)
			*other = (pid_t)strtol(b, NULL, 10);
		close(fd);
		errno = e;
		return -1;
	}
	char b[24];
	int n = snprintf(b, sizeof b, "%d", (int)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, b, (size_t)n, 0) != n)
		log_warn("cannot write agentd's pid into %s: %s (the lock holds: another agentd is still refused)", path,
			 strerror(errno));
	return fd;
}

static void pid_unlock(const char *path, int fd)
{
	unlink(path); /* before the close: a file left behind is never taken for a live agentd's */
	close(fd);
}

static long long file_size(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* `agentd compact [--data DIR]`: the LMDB file given back to the
 * filesystem. A compacted copy (store_backup: live pages only, written and
 * flushed) is renamed over DIR/data.mdb, with DIR's single-instance lock
 * held throughout, so no agentd runs on DIR meanwhile; a kill at any point
 * leaves either the old file or the new one, whole (docs/operations.md,
 * "Giving disk back"). */
static int compact_main(int argc, char **argv)
{
	const char *dir = "./agentd-data";
	int i = 2;
	if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
		printf("usage: agentd compact [--data DIR]\n\nRewrite the LMDB store in DIR (default ./agentd-data) "
		       "without its free pages, giving\nthe room back to the filesystem. agentd must be stopped: "
		       "compact holds DIR's lock,\nso agentd cannot start until it is done. It needs room for "
		       "the copy (the live\ndata) beside the file. Exit status: 0 compacted; 1 it failed (the "
		       "store is as it\nwas); 2 a usage error.\n");
		return 0;
	}
	dir = data_option(argc, argv, &i, dir);
	if (i != argc || !*dir) {
		fprintf(stderr, "usage: agentd compact [--data DIR]\n");
		return EXIT_USAGE;
	}
	char pidpath[PATH_MAX], file[PATH_MAX], tmpdir[PATH_MAX], copy[PATH_MAX + 16];
	if (strlen(dir) > PATH_MAX - 32) {
		fprintf(stderr, "agentd compact: the path %s is too long\n", dir);
		return EXIT_USAGE;
	}
	snprintf(pidpath, sizeof pidpath, "%s/agentd.pid", dir);
	snprintf(file, sizeof file, "%s/data.mdb", dir);
	snprintf(tmpdir, sizeof tmpdir, "%s/compact.tmp", dir);
	snprintf(copy, sizeof copy, "%s/data.mdb", tmpdir);
	struct stat was;
	if (stat(file, &was) != 0) {
		fprintf(stderr, "agentd compact: no LMDB store in %s: %s\n", dir, strerror(errno));
		return 1;
	}
	long long before = (long long)was.st_size;
	pid_t other = 0;
	int pidfd = pid_lock(pidpath, &other);
	if (pidfd < 0) {
		if (errno == EEXIST && other > 0)
			fprintf(stderr, "agentd compact: agentd (pid %d) is running on %s: stop it first (compact needs "
				"the store to itself)\n", (int)other, dir);
		else if (errno == EEXIST)
			fprintf(stderr, "agentd compact: agentd is running on %s: stop it first (compact needs the store "
				"to itself)\n", dir);
		else
			fprintf(stderr, "agentd compact: cannot lock %s: %s\n", pidpath, strerror(errno));
		return 1;
	}
	/* What a compact killed midway left: never the store itself. */
	unlink(copy);
	rmdir(tmpdir);
	int rc = 1, e;
	store *st;
	struct store_opts o = { .read_only = 1 };
	if (mkdir(tmpdir, 0700) < 0) {
		fprintf(stderr, "agentd compact: cannot make %s: %s\n", tmpdir, strerror(errno));
		goto out;
	}
	if ((e = store_open(&st, dir, &o))) {
		fprintf(stderr, "agentd compact: cannot open the store in %s: %s\n", dir, store_strerror(e));
		goto out;
	}
	e = store_backup(st, tmpdir);
	store_close(st);
	if (e) {
		fprintf(stderr, "agentd compact: copying %s: %s (the store is as it was)\n", dir, store_strerror(e));
		goto out;
	}
	int d = -1;
	/* The copy is the file agentd opens: its owner and mode, not ours
	 * (compact run as root on a store of the agentd user's). */
	if ((chown(copy, was.st_uid, was.st_gid) && errno != EPERM) || chmod(copy, was.st_mode & 07777) ||
	    rename(copy, file) || (d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(d)) {
		fprintf(stderr, "agentd compact: putting the copy in place: %s\n", strerror(errno));
		if (d >= 0)
			close(d);
		goto out;
	}
	close(d);
	long long after = file_size(file);
	printf("agentd compact: %s: data.mdb %lld bytes -> %lld bytes (%lld given back)\n", dir, before, after,
	       before - after);
	rc = 0;
out:
	unlink(copy);
	rmdir(tmpdir);
	pid_unlock(pidpath, pidfd);
	return rc;
}

/* Open the store the configuration names (S.st), saying why when it cannot
 * be: 0 or -1. */
static int store_open_logged(const struct config *cfg)
{
	/* A node stopped inside a transaction must not hold its row locks
	 * past its lease: the other nodes take over by then. Nor may this
	 * loop wait on one: a row lock not had within 20 ms fails the
	 * statement (-EAGAIN), retried later (docs/scale-out.md, "Waits a
	 * stopped node can cause"). The frontier's flush, which replies wait
	 * on, does not wait for a worker's commit to cover it (store.h,
	 * flush_alone). */
	struct store_opts so = { .sync = cfg->sync, .audit = cfg->audit, .map_size = cfg->map_size,
				 .max_map_size = cfg->max_map_size, .idle_txn_timeout_ms = cfg->lease_ms / 2,
				 .lock_timeout_ms = 20, .flush_alone = 1 };
	if (cfg->store) {
		/* The map is LMDB's; PostgreSQL's disk is the server's. */
		if (cfg->map_size || cfg->max_map_size)
			log_warn("map_size and max_map_size are LMDB settings: ignored with a PostgreSQL store");
		so.map_size = so.max_map_size = 0;
	}
	int e = store_open(&S.st, cfg->store ? cfg->store : S.data_dir, &so);
	if (e && cfg->store) {
		const char *why = store_open_error();
		log_error("cannot open the PostgreSQL store %s: %s", S.store_shown,
			  *why ? why : e == STORE_E_CORRUPT ? "not an agentd store of this version" : store_strerror(e));
		return -1;
	}
	if (e) {
		if (e == STORE_E_CORRUPT)
			log_error("cannot open the store in %s: its data.mdb is not an agentd store of this version, or "
				  "is damaged", S.data_dir);
		else
			log_error("cannot open the store in %s: %s", S.data_dir, store_strerror(e));
		return -1;
	}
	if (cfg->sync == STORE_SYNC_NONE)
		log_warn("sync=none: commits are flushed every second; an OS crash can lose the last second and, on "
			 "filesystems that reorder writes, damage the store");
	return 0;
}

/* The line that says what this agentd runs on. */
static void log_started(const struct config *cfg, const char *o_config)
{
	char *cfg_real = o_config ? realpath(o_config, NULL) : NULL;
	if (cfg->store)
		log_info("agentd %s: store %s, run directory %s, worker %s, config %s", AGENTD_VERSION, S.store_shown,
			 S.data_dir, S.worker_path, cfg_real ? cfg_real : o_config ? o_config : "none (built-in defaults)");
	else
		log_info("agentd %s: data %s, worker %s, config %s", AGENTD_VERSION, S.data_dir, S.worker_path,
			 cfg_real ? cfg_real : o_config ? o_config : "none (built-in defaults)");
	free(cfg_real);
}

/* Lock the data directory, open the store and serve until shut down.
 * *served: the socket listened. Returns the exit status. */
static int run_locked(const struct config *cfg, const char *o_config, int *served)
{
	int rc = 1;
	/* Single instance: the pidfile lock, held until exit. */
	char pidpath[PATH_MAX];
	pid_t other = 0;
	snprintf(pidpath, sizeof pidpath, "%s/agentd.pid", S.data_dir);
	int pidfd = pid_lock(pidpath, &other);
	if (pidfd < 0) {
		if (errno == EEXIST && other > 0)
			log_error("another agentd (pid %d) is already running on %s", (int)other, S.data_dir);
		else if (errno == EEXIST) /* it holds the lock, its pid not written (yet, or a full disk) */
			log_error("another agentd is already running on %s", S.data_dir);
		else
			log_error("cannot lock %s: %s", pidpath, strerror(errno));
		return 1;
	}
	/* Workers read the configuration too, at every start: give them the
	 * file as agentd read it, not as it may be edited later (it is read
	 * at start only: operations.md). */
	if (o_config && !(S.config_path = config_snapshot(o_config, S.data_dir)))
		goto unlock;
	if (store_open_logged(cfg))
		goto unlock;
	raise_fd_limit();
	struct server_opts so_ = { cfg, S.st, S.data_dir, S.sock_path, S.worker_path, S.config_path, o_config };
	if (server_open(&so_))
		goto close;
	log_started(cfg, o_config);
	printf("agentd: listening on %s\n", S.sock_path);
	fflush(stdout);
	notify_ready(S.sock_path);
	*served = 1;

	rc = server_run() ? 1 : 0;
	log_info("stopped");
close:
	server_close();
	store_close(S.st);
unlock:
	pid_unlock(pidpath, pidfd);
	return rc;
}

int main(int argc, char **argv)
{
	struct config cfg;
	const char *o_config = NULL;
	if (ipc_stdio_guard())
		return EXIT_FAILURE; /* no stderr to say it on */
	jsonmp_alloc_init(); /* before any JSON is read: jsonmp_loadb sees every failed allocation */
	/* The umask may take from group and others, never from the owner: with
	 * 0277 the data directory was created unwritable and the store files
	 * read-only, so agentd could not lock its pid file nor a worker open
	 * the store. */
	umask(umask(0) & 077);
	if (argc >= 2 && !strcmp(argv[1], "check"))
		return check_main(argc, argv);
	if (argc >= 2 && (!strcmp(argv[1], "export") || !strcmp(argv[1], "import")))
		return transfer_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "backup"))
		return backup_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "compact"))
		return compact_main(argc, argv);
	if (config_init(&cfg)) {
		fprintf(stderr, "agentd: out of memory\n");
		config_free(&cfg);
		return EXIT_FAILURE;
	}
	int rc = parse_args(argc, argv, &cfg, &o_config);
	if (rc >= 0) {
		config_free(&cfg);
		return rc;
	}
	log_init("agentd", cfg.log_level);
	rc = 1;
	int made_dir = 0, served = 0;
	if (cfg.store) {
		if (!(S.store_shown = config_store_shown(cfg.store)))
			goto out;
		/* Workers read the target from their environment, not from a
		 * command line anyone on the machine can read (ps). */
		if (setenv("AGENTD_STORE", cfg.store, 1) < 0)
			goto out;
	}
	if (data_dir_open(&cfg, &made_dir))
		goto out;
	if (cfg.socket)
		S.sock_path = strdup(cfg.socket);
	else if (asprintf(&S.sock_path, "%s/agentd.sock", cfg.ephemeral ? S.data_dir : home_dir(&cfg)) < 0)
		S.sock_path = NULL; /* undefined after a failed asprintf */
	if (cfg.worker)
		S.worker_path = strdup(cfg.worker);
	else if (cfg.store) {
		/* The static agentd-worker has no libpq (Debian ships no static
		 * archives of its dependencies); its dynamic twin has. A build
		 * linking the worker dynamically has only agentd-worker. */
		S.worker_path = beside_self("agentd-worker-dynamic");
		if (S.worker_path && access(S.worker_path, X_OK) < 0) {
			free(S.worker_path);
			S.worker_path = beside_self("agentd-worker");
		}
	} else
		S.worker_path = beside_self("agentd-worker");
	if (!S.sock_path || !S.worker_path) {
		log_error("out of memory");
		goto out;
	}

	rc = run_locked(&cfg, o_config, &served);
out:
	/* Also when starting failed: an ephemeral store is never left behind,
	 * and neither is a data directory this failed start created (a socket
	 * in use, say): it holds nothing but the empty store just made. */
	if ((cfg.ephemeral || (made_dir && !served)) && S.data_dir)
		rm_tree(S.data_dir);
	else if (made_dir && !served)
		rmdir(home_dir(&cfg));
	free(S.data_dir);
	free(S.sock_path);
	free(S.worker_path);
	free(S.config_path);
	free(S.store_shown);
	config_free(&cfg);
	return rc;
}
