/*
 * mcp.h: Model Context Protocol servers as tools (docs/tools.md "MCP servers").
 *
 * An [mcp.NAME] section (struct mcp_cfg, common/config.h) is a tool named NAME
 * whose calls go to a long-lived server speaking JSON-RPC 2.0 over its stdin
 * and stdout, one message a line (the MCP stdio transport). A conversation
 * that offers NAME offers every tool the server lists, each as PREFIX + its
 * name (prefix "NAME__" by default) with its inputSchema.
 *
 * Where servers live: in the worker, one process per configured server,
 * started at first need (the first turn that offers it, or the first call)
 * and kept for the worker's life, so a call never pays a start (node takes
 * about half a second). A worker serves one conversation, so a server never
 * mixes conversations; it dies with the worker (PR_SET_PDEATHSIG, and its
 * stdin closes), and a worker that goes idle past idle_timeout takes its
 * servers with it.
 *
 * How a death is noticed: EOF (or a hangup) on the server's stdout during a
 * call, and before each use a non-blocking check of the child (waitid
 * WNOWAIT). The next use after a death starts it again; a start that failed
 * less than a second ago is not retried (its error is given again), so a
 * server that cannot start does not cost a start per call.
 *
 * Caveats:
 *  - One mcp_set per worker, used from one thread. Not for use across fork.
 *  - The worker ignores SIGPIPE (a write to a dead server is an EPIPE).
 *  - Messages from the server longer than the tool's output_cap end it.
 */
#ifndef AGENTD_MCP_H
#define AGENTD_MCP_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/proc.h"
#include "common/config.h"

typedef struct mcp_set mcp_set;

/* The protocol revision we ask for; servers may answer with an older one we know. */
#define MCP_PROTOCOL_VERSION "2025-11-25"

/* A set for cfg (which must outlive it), with no server started; each
 * server runs inside sb (proc.h; NULL: none), which must outlive it too.
 * NULL: out of memory. */
mcp_set *mcp_set_new(const struct config *cfg, const char *conversation, const struct proc_sandbox *sb);
/* Ends every server (SIGKILL to its group, reaped). NULL is fine. */
void mcp_set_free(mcp_set *s);

/* Who waits on a call: the worker's IPC socket and what to do when it is
 * readable (as proc_opts.watch_fd/on_watch: nonzero stops the call). */
struct mcp_watch {
	int fd;                             /* -1: none */
	int (*on_watch)(void *arg);
	void *arg;
	void (*on_start)(void *arg, pid_t pgid); /* the server's group while a call runs, then 0 */
};

/*
 * Replace, in tools (render_turn's "tools" array of {name, description,
 * executor}), each entry naming an MCP server by the tools it lists:
 * {name: PREFIX+tool, description, executor: "server", input_schema}. A
 * server not yet running is started (and listed) now; one listed before is
 * listed again when it said notifications/tools/list_changed. A server that
 * cannot start offers no tool (the reason is logged). w may be NULL.
 * Returns 0, or -ENOMEM: tools are then not to be offered (a tool left out
 * would be a turn that cannot call it).
 */
int mcp_offer(mcp_set *s, json_t *tools, const struct mcp_watch *w);

/* The MCP tool a call of `name` means: the server tc whose prefix name starts
 * with, and the server's own tool name after it. */
const char *mcp_tool_name(const struct tool_cfg *tc, const char *name);

/*
 * Call the server's tool (its own name) with args (an object or NULL). On 0,
 * *result is a new reference and *is_error says whether the call failed (an
 * isError result, a JSON-RPC error, a timeout, a crash of the server, a
 * server that cannot start): the tool result to settle (docs/tools.md).
 * Returns -ECANCELED when on_watch asked to stop (the server was sent
 * notifications/cancelled for the call, and kept), -EINVAL, -ENOMEM.
 */
int mcp_call(mcp_set *s, const struct tool_cfg *tc, const char *tool, json_t *args, const struct mcp_watch *w,
	     json_t **result, int *is_error);
/* mcp_call with meta (an object or NULL) as the request's params._meta:
 * the idempotency key ("agentd/idempotency_key", docs/tools.md). */
int mcp_call_meta(mcp_set *s, const struct tool_cfg *tc, const char *tool, json_t *args, const json_t *meta,
		  const struct mcp_watch *w, json_t **result, int *is_error);
/*
 * Whether the server's tool (its own name) is safe to dispatch again after
 * an interruption (config_mcp_idempotent): when the configuration is
 * silent, the server is started (and listed) to read the tool's
 * annotations (readOnlyHint, idempotentHint). 1 or 0; a server that cannot
 * start, or a tool it does not list, is 0 unless the configuration says.
 */
int mcp_tool_idempotent(mcp_set *s, const struct tool_cfg *tc, const char *tool, const struct mcp_watch *w);

#endif
