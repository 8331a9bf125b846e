/*
 * store_child: a separate process for the multi-process store tests
 * (tests/unit/check_store_mp.c).
 *
 * It opens its OWN store handle after exec, as a worker does: an LMDB
 * environment must never be used across fork, so the tests fork+exec this
 * program instead of letting a forked copy of the test touch its handle.
 *
 *   store_child [-g] [-m MAP_SIZE] [-M MAX_MAP_SIZE] [-p PAD] DIR CMD ARGS [, CMD ARGS]...
 *
 * DIR is opened once (DIR "-": no store); the commands then run in order on
 * that one handle. With -g (gate) the child writes 'R' to stdout once the
 * store is open and waits for EOF on stdin before running anything, so a test
 * can line several children up and release them together, and knows each had
 * the environment open before the release.
 *
 * Commands:
 *   append N TAG CONV...  N rounds; each round appends one event to each CONV,
 *                         one write transaction per event (the first creates
 *                         the CONV when absent). event_id and content (a
 *                         msgpack string) are both "TAG-i", i from 1; with
 *                         -p the content is padded with '.' to PAD bytes. An
 *                         append failing with STORE_E_FULL is retried once.
 *   count CONV            print "COUNT LAST BYTES\n": the events of CONV, its
 *                         last seq, and the total content bytes, after checking
 *                         the seqs run 1..LAST (exit 1 when they do not).
 *   hold-write CONV EID [commit]
 *                         begin a write txn, append an event with event_id EID,
 *                         write 'W' to stdout, then wait for EOF on stdin and
 *                         exit WITHOUT committing (the test SIGKILLs it inside
 *                         the transaction, or it aborts at EOF); with commit,
 *                         commit at EOF (STORE_WRITE_LAZY) and write 'C'.
 *   hold-read             begin a read txn, write 'R', wait for EOF on stdin.
 *   resolve TCID TAG      resolve the tool call with the msgpack string TAG.
 *   worker CONV GEN TAG   a fenced writer: for every byte read on stdin, one
 *                         write txn that checks lease GEN and appends "TAG-k";
 *                         replies 'o' (committed), 'f' (fenced, nothing
 *                         written) or 'e' (error); exits at EOF.
 *   list-fds              print "FD TARGET\n" for each open descriptor.
 *   delete CONV           delete the conversation in one write transaction.
 *
 * Exit status: 0 success, 2 usage, 3 STORE_E_FULL, 4 STORE_E_STALE,
 * 5 STORE_E_FENCED, 1 any other failure (said on stderr). Holding children
 * wait on stdin rather than sleeping, so when a test process dies its pipes
 * close and nothing it spawned lingers.
 */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { EX_OK = 0, EX_FAIL = 1, EX_USAGE = 2, EX_FULL = 3, EX_STALE = 4, EX_FENCED = 5 };

static const char *dir_name;

static int exit_for(int err)
{
	switch (err) {
	case 0: return EX_OK;
	case STORE_E_FULL: return EX_FULL;
	case STORE_E_STALE: return EX_STALE;
	case STORE_E_FENCED: return EX_FENCED;
	}
	return EX_FAIL;
}

static int report(const char *what, int err)
{
	if (err)
		fprintf(stderr, "store_child %s %s: %s\n", dir_name, what, store_strerror(err));
	return exit_for(err);
}

static int usage(void)
{
	fprintf(stderr, "usage: store_child [-g] [-m MAP_SIZE] [-M MAX_MAP_SIZE] [-p PAD] DIR CMD ARGS [, CMD ARGS]...\n");
	return EX_USAGE;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || end == s || *end)
		return -1;
	*v = n;
	return 0;
}

static int put_byte(char c)
{
	ssize_t n;
	do
		n = write(STDOUT_FILENO, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -1;
}

/* One byte from stdin: 1, or 0 at EOF (or error: treated as EOF, the test is gone). */
static int get_byte(char *c)
{
	ssize_t n;
	do
		n = read(STDIN_FILENO, c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1;
}

static void wait_eof(void)
{
	char c;
	while (get_byte(&c))
		;
}

static size_t pad_to; /* -p: append pads its content to this many bytes */

/* A msgpack string holding s, padded with '.' to pad bytes (the tests build
 * the same to compare). */
static void pack_padded(msgpack_sbuffer *sb, const char *s, size_t pad)
{
	msgpack_packer pk;
	size_t n = strlen(s), len = n > pad ? n : pad;
	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_str(&pk, len);
	msgpack_pack_str_body(&pk, s, n);
	for (; n < len; n++)
		msgpack_pack_str_body(&pk, ".", 1);
}

static void pack_text(msgpack_sbuffer *sb, const char *s)
{
	pack_padded(sb, s, 0);
}

static const store_bytes empty_map = { "\x80", 1 };

/* One event in one write transaction; `create` makes the conversation first
 * (CONFLICT, another process was first, leaves the txn usable). */
static int append_one(store *s, const char *conv, const char *eid, int create)
{
	msgpack_sbuffer sb;
	store_txn *x;
	uint64_t seq;
	msgpack_sbuffer_init(&sb);
	pack_padded(&sb, eid, pad_to);
	struct store_event_in ev = { "user_msg", { sb.data, sb.size }, eid };
	int err = store_txn_begin(s, STORE_WRITE, &x);
	if (err)
		goto out;
	if (create && (err = store_conv_create(x, conv, empty_map)) != 0 && err != STORE_E_CONFLICT) {
		store_txn_abort(x);
		goto out;
	}
	if ((err = store_event_append(x, conv, &ev, &seq, NULL)) != 0) {
		store_txn_abort(x);
		goto out;
	}
	err = store_txn_commit(x);
out:
	msgpack_sbuffer_destroy(&sb);
	return err;
}

static int cmd_append(store *s, int argc, char **argv)
{
	uint64_t n;
	char eid[STORE_EVENT_ID_MAX + 1];
	if (argc < 4 || parse_u64(argv[1], &n))
		return usage();
	for (uint64_t i = 1; i <= n; i++) {
		snprintf(eid, sizeof eid, "%s-%llu", argv[2], (unsigned long long)i);
		for (int c = 3; c < argc; c++) {
			int err = append_one(s, argv[c], eid, i == 1);
			/* STORE_E_FULL: the store grows the map before the next
			 * transaction (store.h), so one retry is the caller's part;
			 * a second STORE_E_FULL means it could not grow. */
			if (err == STORE_E_FULL)
				err = append_one(s, argv[c], eid, i == 1);
			if (err)
				return report("append", err);
		}
	}
	return EX_OK;
}

struct count_ctx {
	uint64_t count, next, bytes;
	int gap;
};

static int count_each(void *arg, const struct store_event *ev)
{
	struct count_ctx *c = arg;
	if (ev->seq != c->next)
		c->gap = 1;
	c->next = ev->seq + 1;
	c->count++;
	c->bytes += ev->content.len;
	return 0;
}

static int cmd_count(store *s, int argc, char **argv)
{
	store_txn *x;
	struct store_range r = { 0 };
	struct count_ctx c = { .next = 1 };
	if (argc != 2)
		return usage();
	int err = store_txn_begin(s, STORE_READ, &x);
	if (err)
		return report("count: begin", err);
	err = store_events_stream(x, argv[1], &r, count_each, &c);
	store_txn_abort(x);
	if (err)
		return report("count", err);
	if (c.gap) {
		fprintf(stderr, "store_child count: seqs of %s are not 1..%llu\n", argv[1],
			(unsigned long long)c.count);
		return EX_FAIL;
	}
	printf("%llu %llu %llu\n", (unsigned long long)c.count, (unsigned long long)(c.next - 1),
	       (unsigned long long)c.bytes);
	fflush(stdout);
	return EX_OK;
}

static int cmd_hold_write(store *s, int argc, char **argv)
{
	store_txn *x;
	msgpack_sbuffer sb;
	uint64_t seq;
	if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "commit")))
		return usage();
	int commit = argc == 4;
	msgpack_sbuffer_init(&sb);
	pack_text(&sb, argv[2]);
	struct store_event_in ev = { "user_msg", { sb.data, sb.size }, argv[2] };
	int err = store_txn_begin(s, commit ? STORE_WRITE_LAZY : STORE_WRITE, &x);
	if (err)
		goto out;
	if ((err = store_event_append(x, argv[1], &ev, &seq, NULL)) == 0) {
		/* Inside the transaction, holding the writer lock: tell the
		 * test, then wait to be killed (or for the test to go away). */
		if (put_byte('W') == 0)
			wait_eof();
		else
			err = -errno;
	}
	if (commit && !err) {
		if ((err = store_txn_commit(x)) == 0 && put_byte('C'))
			err = -errno;
	} else {
		store_txn_abort(x);
	}
out:
	msgpack_sbuffer_destroy(&sb);
	return report("hold-write", err);
}

static int cmd_hold_read(store *s, int argc, char **argv)
{
	store_txn *x;
	if (argc != 1)
		return usage();
	int err = store_txn_begin(s, STORE_READ, &x);
	if (err)
		return report("hold-read: begin", err);
	if (put_byte('R'))
		return EX_FAIL;
	wait_eof();
	store_txn_abort(x);
	return EX_OK;
}

static int cmd_resolve(store *s, int argc, char **argv)
{
	store_txn *x;
	msgpack_sbuffer sb;
	if (argc != 3)
		return usage();
	msgpack_sbuffer_init(&sb);
	pack_text(&sb, argv[2]);
	int err = store_txn_begin(s, STORE_WRITE, &x);
	if (err)
		goto out;
	err = store_tool_call_resolve(x, argv[1], STORE_TC_RESOLVED, (store_bytes){ sb.data, sb.size }, NULL);
	if (err)
		store_txn_abort(x);
	else
		err = store_txn_commit(x);
out:
	msgpack_sbuffer_destroy(&sb);
	/* Losing the race is an expected outcome, not worth a line on stderr. */
	return err == STORE_E_STALE ? EX_STALE : report("resolve", err);
}

/* One fenced write: the lease check and the append share the transaction, so
 * a superseded worker can never slip a write in after the check. */
static char worker_write(store *s, const char *conv, uint64_t gen, const char *eid)
{
	store_txn *x;
	msgpack_sbuffer sb;
	uint64_t seq;
	char reply = 'e';
	msgpack_sbuffer_init(&sb);
	pack_text(&sb, eid);
	struct store_event_in ev = { "assistant_msg", { sb.data, sb.size }, eid };
	int err = store_txn_begin(s, STORE_WRITE, &x);
	if (err)
		goto out;
	err = store_lease_check(x, conv, gen);
	if (err == 0)
		err = store_event_append(x, conv, &ev, &seq, NULL);
	if (err) {
		store_txn_abort(x);
		reply = err == STORE_E_FENCED ? 'f' : 'e';
		goto out;
	}
	err = store_txn_commit(x);
	reply = err ? 'e' : 'o';
out:
	if (err && err != STORE_E_FENCED)
		report("worker", err);
	msgpack_sbuffer_destroy(&sb);
	return reply;
}

static int cmd_worker(store *s, int argc, char **argv)
{
	uint64_t gen, k = 0;
	char eid[STORE_EVENT_ID_MAX + 1], c;
	if (argc != 4 || parse_u64(argv[2], &gen))
		return usage();
	while (get_byte(&c)) {
		snprintf(eid, sizeof eid, "%s-%llu", argv[3], (unsigned long long)++k);
		char reply = worker_write(s, argv[1], gen, eid);
		if (reply != 'o')
			k--; /* nothing was written: the next success reuses the number */
		if (put_byte(reply))
			return EX_FAIL;
	}
	return EX_OK;
}

static int cmd_delete(store *s, int argc, char **argv)
{
	store_txn *x;
	if (argc != 2)
		return usage();
	int err = store_txn_begin(s, STORE_WRITE, &x);
	if (err)
		return report("delete", err);
	if ((err = store_conv_delete(x, argv[1])) != 0)
		store_txn_abort(x);
	else
		err = store_txn_commit(x);
	return report("delete", err);
}

static int cmd_list_fds(int argc)
{
	char path[300], target[PATH_MAX];
	if (argc != 1)
		return usage();
	DIR *d = opendir("/proc/self/fd");
	if (!d) {
		perror("store_child list-fds: /proc/self/fd");
		return EX_FAIL;
	}
	int self = dirfd(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' || atoi(de->d_name) == self)
			continue;
		snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n < 0)
			continue;
		target[n] = 0;
		printf("%s %s\n", de->d_name, target);
	}
	closedir(d);
	fflush(stdout);
	return EX_OK;
}

static int run(store *s, int argc, char **argv)
{
	const char *cmd = argv[0];
	if (strcmp(cmd, "list-fds") == 0)
		return cmd_list_fds(argc);
	if (!s) {
		fprintf(stderr, "store_child: %s needs a store\n", cmd);
		return EX_USAGE;
	}
	if (strcmp(cmd, "append") == 0)
		return cmd_append(s, argc, argv);
	if (strcmp(cmd, "count") == 0)
		return cmd_count(s, argc, argv);
	if (strcmp(cmd, "hold-write") == 0)
		return cmd_hold_write(s, argc, argv);
	if (strcmp(cmd, "hold-read") == 0)
		return cmd_hold_read(s, argc, argv);
	if (strcmp(cmd, "resolve") == 0)
		return cmd_resolve(s, argc, argv);
	if (strcmp(cmd, "worker") == 0)
		return cmd_worker(s, argc, argv);
	if (strcmp(cmd, "delete") == 0)
		return cmd_delete(s, argc, argv);
	fprintf(stderr, "store_child: unknown command %s\n", cmd);
	return EX_USAGE;
}

int main(int argc, char **argv)
{
	struct store_opts opts = { 0 };
	int gate = 0, opt;
	uint64_t v;
	while ((opt = getopt(argc, argv, "+gm:M:p:")) != -1) {
		switch (opt) {
		case 'g': gate = 1; break;
		case 'm':
			if (parse_u64(optarg, &v))
				return usage();
			opts.map_size = (size_t)v;
			break;
		case 'M':
			if (parse_u64(optarg, &v))
				return usage();
			opts.max_map_size = (size_t)v;
			break;
		case 'p':
			if (parse_u64(optarg, &v) || v > 1 << 20)
				return usage();
			pad_to = (size_t)v;
			break;
		default: return usage();
		}
	}
	if (argc - optind < 2)
		return usage();
	dir_name = argv[optind++];
	store *s = NULL;
	if (strcmp(dir_name, "-") != 0) {
		int err = store_open(&s, dir_name, &opts);
		if (err)
			return report("open", err);
	}
	if (gate) {
		if (put_byte('R'))
			return EX_FAIL;
		wait_eof();
	}
	/* Commands separated by "," run in order on the one handle. */
	int rc = EX_OK;
	while (optind < argc && rc == EX_OK) {
		int end = optind;
		while (end < argc && strcmp(argv[end], ",") != 0)
			end++;
		if (end == optind) {
			rc = usage();
			break;
		}
		rc = run(s, end - optind, argv + optind);
		optind = end < argc ? end + 1 : end;
	}
	store_close(s);
	return rc;
}
