/*
 * server.h: what wires the supervisor's modules together and to the loop.
 * The modules below it report up only through the hooks it gives them;
 * it owns the signalfd (SIGCHLD, SIGTERM, SIGINT, SIGHUP), the tick timer
 * (eviction, backoff, long-poll deadlines, the write gate's revocation, the
 * sync=none flush, the audit TTL, the shutdown deadline), shutdown, and the
 * work around each wait of the loop (docs/architecture.md, "One loop
 * iteration").
 */
#ifndef AGENTD_SERVER_H
#define AGENTD_SERVER_H

#include "common/config.h"
#include "store/store.h"

struct server_opts {
	const struct config *cfg;
	store *st;
	const char *data_dir;
	const char *sock_path;
	const char *worker_path;
	const char *config_path; /* the configuration copy workers read, or NULL */
	const char *config_source; /* the file agentd read, or NULL */
};

/* Listen, fire the deadlines that passed while agentd was down, revive the
 * conversations left mid-turn. opts and what it points at are kept until
 * server_close. 0, or (logged) the -errno of a descriptor the loop needs,
 * control_listen's error, or nodes_open's. */
int server_open(const struct server_opts *opts);
/* Serve until shut down and every worker has exited. 0, or -errno. */
int server_run(void);
/* Close what server_open made (the store is the caller's). */
void server_close(void);

#endif
