/*
 * agentctl: the command-line client of agentd's control protocol.
 *
 * The contract is docs/agentctl.md (command line) and docs/protocol.md (protocol): one
 * command per op, readable output by default, the raw reply line with --json,
 * `raw` to send any request. agentctl owns nothing and never touches the store:
 * it connects, writes one request line carrying an "id", reads lines until the
 * reply (the first JSON object with an "ok" member) and, for `watch`, goes on
 * printing what agentd streams until agentd closes or the user interrupts.
 *
 * Exit status, which scripts rely on: 0 when agentd replied ok:true; 1 when it
 * replied with an error (printed as "agentctl: CODE: message" on stderr); 2 for
 * usage errors and for connection failures (the reason on stderr).
 *
 * Each command is one row of a table (struct command). The request and the
 * help text are both built from it, so they cannot drift apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentctl/agentctl.h"

const char *cur_cmd;
struct held held;

__attribute__((format(printf, 1, 0))) static void vmsg(const char *fmt, va_list ap)
{
	fputs("agentctl: ", stderr);
	if (cur_cmd)
		fprintf(stderr, "%s: ", cur_cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

/* A usage error: exit 2 with a pointer to the help. Exiting from where the
 * error is found keeps the parsers simple; release_held() frees the rest. */
__attribute__((format(printf, 1, 2))) _Noreturn void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "(see 'agentctl %s%s--help')\n", cur_cmd ? cur_cmd : "", cur_cmd ? " " : "");
	exit(EXIT_USAGE);
}

/* A connection or system failure: exit 2. Not the command's fault, so the
 * message does not name it ("agentctl: cannot connect to ..."). */
__attribute__((format(printf, 1, 2))) _Noreturn void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cur_cmd = NULL;
	vmsg(fmt, ap);
	va_end(ap);
	exit(EXIT_USAGE);
}

__attribute__((format(printf, 1, 2))) void warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void *must(void *p)
{
	if (!p)
		fail("out of memory");
	return p;
}

char *xstrdup(const char *s)
{
	return must(strdup(s));
}

/* json_object_set_new that cannot fail quietly: a request sent short of a
 * field (out of memory) would be answered for something else. */
void put(json_t *o, const char *key, json_t *v)
{
	if (json_object_set_new(o, key, v))
		fail("out of memory");
}

static void release_held(void)
{
	json_decref(held.req);
	free(held.pos);
	free(held.input);
	free(held.key);
	free(held.request);
	json_decref(held.reply);
	json_decref(held.page);
	free(held.after);
	run_release();
	memset(&held, 0, sizeof held);
}

/* Edit distance (insertions, deletions, substitutions, and swaps of two
 * neighbours: "tool-clals"), capped: only small ones matter. */
static size_t distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > 32 || m > 32)
		return 99;
	size_t d[33][33];
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[n][m];
}

/* "unknown command 'x'", with the nearest command when one is near: within
 * two edits (one for names of three letters or less), or the only command
 * the name begins. */
static _Noreturn void unknown_command(const char *name)
{
	const char *best = NULL, *prefix = NULL;
	size_t bd = 99, nprefix = 0, len = strlen(name);
	for (size_t i = 0; i < ncommands; i++) {
		size_t d = distance(name, commands[i].name);
		if (d < bd) {
			bd = d;
			best = commands[i].name;
		}
		if (len >= 2 && strncmp(commands[i].name, name, len) == 0) {
			prefix = commands[i].name;
			nprefix++;
		}
	}
	if (nprefix == 1)
		best = prefix; /* "pend" is pending, not send */
	else if (bd > (len <= 3 ? 1u : 2u))
		best = NULL;
	if (best)
		usage_error("unknown command '%s'; did you mean '%s'?", name, best);
	usage_error("unknown command '%s'", name);
}

int main(int argc, char **argv)
{
	struct options o = {.socket = NULL, .json = false, .timeout_ms = DEFAULT_TIMEOUT_MS};
	int i = 1;

	/* A closed socket or stdout must be an error return, never a silent death. */
	signal(SIGPIPE, SIG_IGN);
	/* Started with 0, 1 or 2 closed (`agentctl ping >&-`), the socket would
	 * take that number and the reply would be written back into it. Hold
	 * each closed one with /dev/null opened read-only: output written there
	 * fails (EBADF), and check_stdout says so. */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDONLY) != fd)
			return EXIT_USAGE;
	atexit(release_held);

	while (i < argc && argv[i][0] == '-' && argv[i][1] != '\0') {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			print_main_help(stdout);
			check_stdout(EXIT_OK);
			return EXIT_OK;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("agentctl %s\n", AGENTD_VERSION);
			check_stdout(EXIT_OK);
			return EXIT_OK;
		}
		if (!global_option(argc, argv, &i, &o))
			usage_error("unknown option '%s'", argv[i]);
	}
	if (i >= argc) {
		fputs("usage: agentctl [-s SOCKET] [--json] [-q] [--timeout SECS] COMMAND [ARGS...]\n"
		      "(see 'agentctl --help' for the commands)\n",
		      stderr);
		return EXIT_USAGE;
	}

	const char *name = argv[i++];
	if (strcmp(name, "help") == 0) {
		const struct command *h = i < argc ? find_command(argv[i]) : NULL;
		if (i < argc && !h)
			unknown_command(argv[i]);
		if (h)
			print_command_help(h, stdout);
		else
			print_main_help(stdout);
		check_stdout(EXIT_OK);
		return EXIT_OK;
	}
	const struct command *cmd = find_command(name);
	if (!cmd)
		unknown_command(name);
	cur_cmd = cmd->name;

	int64_t extra_ms = 0;
	if ((cmd->flags & CMD_SLOW) && !o.timeout_set)
		o.timeout_ms = 0;
	char *request = held.request = build_request(cmd, argc - i, argv + i, &o, &extra_ms);

	struct sockets ss = {.path = {o.socket}, .n = 1, .from = "-s"};
	const char *env = getenv("AGENTD_SOCKET");
	if (!o.socket && env && *env) {
		ss.path[0] = env;
		ss.from = "$AGENTD_SOCKET";
	} else if (!o.socket) {
		ss = (struct sockets){.path = {DEFAULT_SOCKET, AGENTD_RUN_SOCKET}, .n = 2, .from = NULL};
	}
	int rc = (cmd->flags & CMD_PENDING) ? run_pending(&ss, &o) : run(cmd, &ss, request, extra_ms, &o);
	free(held.request); /* request, or the line run() made in its place (approve's digest) */
	held.request = NULL;
	return rc;
}
