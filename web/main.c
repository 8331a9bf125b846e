/*
 * agentd-web: the approvals page (docs/web.md). A separate program: it
 * talks to agentd only over the control socket, so nothing in its HTTP code
 * can touch the supervisor.
 */
#include "client/ctl.h"
#include "web/auth.h"
#include "web/http.h"
#include "web/users.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXIT_USAGE 2

static const char USAGE[] =
	"usage: agentd-web [--socket PATH] [--data DIR] [--listen HOST:PORT] [--token-file PATH]\n"
	"                  [--origin URL]... [--user-header NAME] [--secure-cookie] [--poll-ms N]\n"
	"                  [--max-connections N] [--users FILE]\n"
	"       agentd-web --hash-password\n"
	"\n"
	"The approvals page for agentd: pending human tool calls, conversations, live logs, status.\n"
	"\n"
	"  --socket PATH         agentd's control socket (default: $AGENTD_SOCKET, else DATA/agentd.sock)\n"
	"  --data DIR            agentd's data directory (default ./agentd-data)\n"
	"  --listen HOST:PORT    where to serve HTTP (default 127.0.0.1:8080; port 0 picks a free one;\n"
	"                        IPv6 as [::1]:8080)\n"
	"  --token-file PATH     the access token (default DATA/web-token, created 0600 on first start);\n"
	"                        $AGENTD_WEB_TOKEN gives the token instead\n"
	"  --origin URL          the origin the page is reached at, behind a reverse proxy\n"
	"                        (https://approvals.example.com); repeatable\n"
	"  --user-header NAME    take the user's name from this request header (set by the proxy)\n"
	"  --secure-cookie       mark the session cookie Secure (the page is served over TLS)\n"
	"  --poll-ms N           how often the page refreshes the pending list (default 1000)\n"
	"  --max-connections N   concurrent HTTP connections (default 64)\n"
	"  --users FILE          per-person accounts: lines NAME ROLE HASH, ROLE viewer (reads),\n"
	"                        approver (also answers approvals) or operator (also sends, cancels,\n"
	"                        resumes, forks, ends); people sign in with a name and password, and\n"
	"                        login links are off\n"
	"  --hash-password       read a password on stdin, print its HASH for the users file, exit\n"
	"\n"
	"Prints the URL and a one-time login link on stdout (not with --users); SIGUSR1 prints a new link.\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "agentd-web: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", USAGE);
	return EXIT_USAGE;
}

/* "HOST:PORT" or "[V6]:PORT" into ss; the host part (as written) in host. */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len, char *host, size_t hostlen)
{
	const char *colon = strrchr(s, ':');
	char h[64];
	if (!colon || (size_t)(colon - s) >= sizeof h || colon == s)
		return -1;
	memcpy(h, s, (size_t)(colon - s));
	h[colon - s] = 0;
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port < 0 || port > 65535)
		return -1;
	memset(ss, 0, sizeof *ss);
	if (h[0] == '[' && h[strlen(h) - 1] == ']') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		h[strlen(h) - 1] = 0;
		if (inet_pton(AF_INET6, h + 1, &a->sin6_addr) != 1)
			return -1;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*len = sizeof *a;
		snprintf(host, hostlen, "[%s]", h + 1);
		return 0;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	if (inet_pton(AF_INET, h, &a->sin_addr) != 1)
		return -1;
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	*len = sizeof *a;
	snprintf(host, hostlen, "%s", h);
	return 0;
}

static int listen_on(const struct sockaddr_storage *ss, socklen_t len, unsigned *port)
{
	int one = 1, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 64) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	struct sockaddr_storage got;
	socklen_t gl = sizeof got;
	getsockname(fd, (struct sockaddr *)&got, &gl);
	*port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
						 : ((struct sockaddr_in *)&got)->sin_port);
	return fd;
}

static int origin_valid(const char *o)
{
	const char *h = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
	if (!h || !*h || strlen(o) > 200)
		return 0;
	for (; *h; h++) /* host[:port] only: no path, no trailing slash */
		if (*h == '/' || *h <= ' ' || *h > '~')
			return 0;
	return 1;
}

static void print_link(const char *base)
{
	char nonce[AUTH_ID_LEN + 1];
	if (users_enabled()) {
		printf("agentd-web: no login links with --users: people sign in with their name and password\n");
		fflush(stdout);
		return;
	}
	auth_link_new(nonce);
	printf("agentd-web: login link (one use, within %d minutes): %s/login?once=%s\n", AUTH_LINK_TTL_MS / 60000,
	       base, nonce);
	fflush(stdout);
}

/* What main's steps share. cfg points into the buffers here, so this lives
 * as long as main does. */
struct web {
	struct http_config cfg;
	const char *data, *listen_s, *token_file, *users_file;
	int hash_password;
	const char *extra[HTTP_ORIGINS_MAX]; /* --origin, added after our own */
	size_t nextra;
	struct sockaddr_storage ss;
	socklen_t sl;
	char sockbuf[4096], tokbuf[4096], host[80], base[128], own[2][128];
};

#define GO_ON (-1) /* a step's answer when main should carry on; else the exit code */

/* The options into w; --listen parsed into w->ss. */
static int web_args(int argc, char **argv, struct web *w)
{
	static const struct option opts[] = {
		{ "socket", required_argument, 0, 's' }, { "data", required_argument, 0, 'd' },
		{ "listen", required_argument, 0, 'l' }, { "token-file", required_argument, 0, 't' },
		{ "origin", required_argument, 0, 'o' }, { "user-header", required_argument, 0, 'u' },
		{ "secure-cookie", no_argument, 0, 'S' }, { "poll-ms", required_argument, 0, 'p' },
		{ "max-connections", required_argument, 0, 'm' }, { "users", required_argument, 0, 'U' },
		{ "hash-password", no_argument, 0, 'H' }, { "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
	};
	struct http_config *cfg = &w->cfg;
	int c;
	char *end;

	cfg->socket = getenv("AGENTD_SOCKET") && *getenv("AGENTD_SOCKET") ? getenv("AGENTD_SOCKET") : NULL;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': cfg->socket = optarg; break;
		case 'd': w->data = optarg; break;
		case 'l': w->listen_s = optarg; break;
		case 't': w->token_file = optarg; break;
		case 'o':
			if (!origin_valid(optarg))
				return usage_error("--origin: expected http://HOST[:PORT] or https://HOST[:PORT], got '%s'", optarg);
			if (w->nextra + 2 >= HTTP_ORIGINS_MAX)
				return usage_error("--origin: at most %s", "6");
			w->extra[w->nextra++] = optarg;
			break;
		case 'u':
			if (!*optarg || strpbrk(optarg, " :\r\n"))
				return usage_error("--user-header: expected a header name, got '%s'", optarg);
			cfg->user_header = optarg;
			break;
		case 'S': cfg->secure_cookie = 1; break;
		case 'p':
			cfg->poll_ms = (int)strtol(optarg, &end, 10);
			if (*end || cfg->poll_ms < 100 || cfg->poll_ms > 60000)
				return usage_error("--poll-ms: expected 100 to 60000, got '%s'", optarg);
			break;
		case 'm':
			cfg->max_connections = (unsigned)strtoul(optarg, &end, 10);
			if (*end || cfg->max_connections < 4 || cfg->max_connections > 4096)
				return usage_error("--max-connections: expected 4 to 4096, got '%s'", optarg);
			break;
		case 'U': w->users_file = optarg; break;
		case 'H': w->hash_password = 1; break;
		case 'h': fputs(USAGE, stdout); return 0;
		case 'V': printf("agentd-web %s\n", AGENTD_VERSION); return 0;
		default: fprintf(stderr, "%s", USAGE); return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (w->users_file && cfg->user_header)
		return usage_error("--users and --user-header %s: the name comes from one or the other", "exclude each other");
	if (!cfg->socket) {
		snprintf(w->sockbuf, sizeof w->sockbuf, "%s/agentd.sock", w->data);
		cfg->socket = w->sockbuf;
	}
	if (parse_listen(w->listen_s, &w->ss, &w->sl, w->host, sizeof w->host))
		return usage_error("--listen: expected HOST:PORT (an IP address: 127.0.0.1:8080, [::1]:8080), got '%s'",
				   w->listen_s);
	return GO_ON;
}

/* The access token: $AGENTD_WEB_TOKEN, else the token file (made on first start). */
static int web_token(struct web *w)
{
	const char *env_token = getenv("AGENTD_WEB_TOKEN");
	char msg[512];
	int created;
	if (env_token && *env_token) {
		if (auth_token_set(env_token)) {
			fprintf(stderr, "agentd-web: AGENTD_WEB_TOKEN must be 16-256 printable characters without spaces\n");
			return EXIT_USAGE;
		}
		return GO_ON;
	}
	if (!w->token_file) {
		snprintf(w->tokbuf, sizeof w->tokbuf, "%s/web-token", w->data);
		w->token_file = w->tokbuf;
	}
	if (auth_token_load(w->token_file, 1, &created, msg, sizeof msg) < 0) {
		fprintf(stderr, "agentd-web: %s\n", msg);
		return 1;
	}
	if (created)
		fprintf(stderr, "agentd-web: created the access token in %s (mode 0600)\n", w->token_file);
	return GO_ON;
}

/* The listening socket (fd, or -1 said on stderr), and the origins it makes
 * ours: the address as listened on, localhost for a loopback address, then
 * each --origin. */
static int web_listen(struct web *w)
{
	struct http_config *cfg = &w->cfg;
	unsigned port = 0;
	int fd = listen_on(&w->ss, w->sl, &port);
	if (fd < 0) {
		fprintf(stderr, "agentd-web: cannot listen on %s: %s\n", w->listen_s, strerror(-fd));
		return -1;
	}
	snprintf(w->base, sizeof w->base, "http://%s:%u", w->host, port);
	snprintf(w->own[0], sizeof w->own[0], "%s", w->base);
	cfg->origins[cfg->norigins++] = w->own[0];
	if (!strcmp(w->host, "127.0.0.1") || !strcmp(w->host, "[::1]")) {
		snprintf(w->own[1], sizeof w->own[1], "http://localhost:%u", port);
		cfg->origins[cfg->norigins++] = w->own[1];
	}
	for (size_t i = 0; i < w->nextra; i++)
		cfg->origins[cfg->norigins++] = w->extra[i];
	return fd;
}

/* Signals arrive at sigwaitinfo in web_wait, never in a handler: every
 * thread libmicrohttpd starts inherits this mask, so block before
 * http_start. */
static void web_signals_block(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Is agentd there? Only a warning: the pages say so until it is. */
static void web_agentd_check(const char *socket)
{
	json_t *ping = json_pack("{ss}", "op", "ping"), *pong = NULL;
	ctl_conn *c = NULL;
	int e = !ping ? -ENOMEM : ctl_connect(socket, 2000, &c);
	if (!e)
		e = ctl_request(c, ping, &pong);
	ctl_close(c);
	if (e)
		fprintf(stderr, "agentd-web: warning: %s: %s (pages say so until it is)\n", socket, ctl_strerror(e));
	json_decref(ping);
	json_decref(pong);
}

/* Until SIGINT, SIGTERM or SIGHUP; SIGUSR1 prints a new login link. */
static void web_wait(const sigset_t *set, const char *base)
{
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(set, &si);
		if (sig == SIGUSR1) {
			print_link(base);
			continue;
		}
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
			return;
	}
}

/* --hash-password: one line from stdin (without its newline) to a HASH for
 * the users file on stdout. */
static int web_hash_password(void)
{
	char pw[1024], hash[crypto_pwhash_STRBYTES];
	if (!fgets(pw, sizeof pw, stdin)) {
		fprintf(stderr, "agentd-web: --hash-password: expected a password on stdin\n");
		return EXIT_USAGE;
	}
	pw[strcspn(pw, "\r\n")] = 0;
	if (!*pw) {
		fprintf(stderr, "agentd-web: --hash-password: the password is empty\n");
		return EXIT_USAGE;
	}
	int e = users_hash(pw, hash, sizeof hash);
	sodium_memzero(pw, sizeof pw);
	if (e) {
		fprintf(stderr, "agentd-web: --hash-password: out of memory\n");
		return 1;
	}
	printf("%s\n", hash);
	return 0;
}

/* --users: the accounts, before anything is served. */
static int web_users(struct web *w)
{
	char msg[1024];
	if (!w->users_file)
		return GO_ON;
	if (users_load(w->users_file, msg, sizeof msg)) {
		fprintf(stderr, "agentd-web: %s\n", msg);
		return 1;
	}
	return GO_ON;
}

int main(int argc, char **argv)
{
	struct web w = {
		.cfg = { .poll_ms = 1000, .max_connections = 64 },
		.data = "./agentd-data",
		.listen_s = "127.0.0.1:8080",
	};
	struct http_server *srv;
	sigset_t set;
	char msg[512];
	int rc, fd;

	if ((rc = web_args(argc, argv, &w)) != GO_ON)
		return rc;
	if (sodium_init() < 0) {
		fprintf(stderr, "agentd-web: libsodium could not start\n");
		return 1;
	}
	if (w.hash_password)
		return web_hash_password();
	if ((rc = web_users(&w)) != GO_ON || (rc = web_token(&w)) != GO_ON)
		return rc;
	if ((fd = web_listen(&w)) < 0)
		return 1;
	web_signals_block(&set);
	if (http_start(&w.cfg, fd, &srv, msg, sizeof msg)) {
		fprintf(stderr, "agentd-web: %s\n", msg);
		return 1;
	}
	web_agentd_check(w.cfg.socket);
	printf("agentd-web: listening on %s (agentd at %s)\n", w.base, w.cfg.socket);
	print_link(w.base);
	web_wait(&set, w.base);
	http_stop(srv);
	users_free();
	return 0;
}
