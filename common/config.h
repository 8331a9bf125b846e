/*
 * config.h: the INI configuration (docs/configuration.md), shared by agentd
 * and agentd-worker. Every key has a default; no file is needed to run with
 * the built-in `echo` model. Only the configuration names commands: control
 * clients pick models and tools by name.
 */
#ifndef AGENTD_CONFIG_H
#define AGENTD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/id.h"
#include "common/log.h"

/* ---- isolation and MCP servers (docs/tools.md) ------------------------- */

/* How a model, tool or MCP server process runs; agent/isolate.h applies it.
 * Zeroed (uid and gid -1 after config_load) means: the minimal environment,
 * agentd's user, no limits. */
struct isolate_cfg {
	char **env;            /* NULL-terminated or NULL: "KEY" passes the worker's value
				* of KEY (when set), "KEY=VALUE" sets it */
	char *user, *group;    /* as configured, NULL: agentd's */
	long uid, gid;         /* resolved at load, -1: unchanged (user alone: its group) */
	size_t rlimit_as;      /* bytes of address space, 0: no limit */
	long rlimit_cpu;       /* CPU seconds, 0: no limit */
	long rlimit_nofile;    /* open descriptors, 0: no limit */
	int network_none;      /* network = none: its own empty network namespace */
	int sandbox_off;       /* sandbox = no: not run inside agentd-sandbox (agent/sandbox.c) */
	char **hide;           /* hide = PATH ...: covered in its sandbox too; NULL-terminated or NULL */
};

/* Most paths one hide key names ([agentd] and each isolation section). */
#define CONFIG_HIDE_MAX 32

/* [mcp.NAME]: a Model Context Protocol server over stdio. It is also a
 * tool_cfg named NAME (mcp non-NULL), so a conversation offers it with
 * tools = NAME and the supervisor checks that name like any tool's. */
struct mcp_cfg {
	char *command;            /* a command line, split as a tool's; NULL with a url */
	char *url;                /* streamable HTTP: the endpoint agentd-mcp-http posts to; NULL over stdio */
	char *headers_conf;       /* a url server's headers as configured (never shown) */
	char **headers;           /* ... resolved, "Name: value", NULL-terminated; NULL: none */
	char *args;               /* more words appended, or NULL */
	char *prefix;             /* of the names models see: default "NAME__" */
	int64_t start_timeout_ms; /* initialize and tools/list, default 20 s */
	/* Tools of this server named safe, or not safe, to run twice (their
	 * names as the server lists them, separated by commas or spaces), over
	 * the server's idempotent and its tools' annotations; NULL: none. */
	char *idempotent_tools;
	char *non_idempotent_tools;
};

struct model_cfg {
	char *name;
	char *command;       /* NULL for the built-in echo model */
	int64_t timeout_ms;  /* default 120 s */
	int retries;         /* default 2 */
	struct isolate_cfg iso;
	/* The built-in HTTP clients (kind openai or anthropic; docs/models.md). */
	int kind;                   /* enum model_kind */
	char *base_url;             /* default per kind */
	char *model;                /* the API's model name: required for the HTTP kinds */
	char *api_key_env;          /* the variable holding the key; default per kind */
	int64_t connect_timeout_ms; /* default 10 s */
	int max_tokens;             /* 0: openai sends none; anthropic's default 4096 */
	char *params;               /* a JSON object merged into every request body, or NULL */
	int64_t backoff_ms;         /* the first retry's delay before jitter, default 500 ms */
	int64_t backoff_max_ms;     /* the longest computed delay, default 30 s */
	/* headers = "Name: value" ...: sent with every request, as configured
	 * (headers_conf, never shown: a value may be a secret) and resolved at
	 * load (headers: "Name: value" strings, NULL-terminated, or NULL), each
	 * $VAR or ${VAR} read from the environment; every VAR is also added to
	 * iso.env, so agentd-model reads the same value. */
	char *headers_conf;
	char **headers;
	/* What a million tokens cost (0: the reply's usage.cost stays 0):
	 * usage.cost = (input_tokens * price_input + output_tokens *
	 * price_output) / 1e6, in double precision, not rounded further. */
	double price_input, price_output;
};

/* MODEL_EXEC: a command speaking the model process protocol (or, with no
 * command, the built-in echo model). */
enum model_kind { MODEL_EXEC = 0, MODEL_OPENAI, MODEL_ANTHROPIC };
const char *config_model_kind_name(int kind);

/* A human tool's on_expiry: what its deadline does to a call nobody
 * answered (docs/tools.md). */
enum tool_on_expiry { ON_EXPIRY_EXPIRE = 0, ON_EXPIRY_DENY, ON_EXPIRY_APPROVE, ON_EXPIRY_ESCALATE };
const char *config_on_expiry_name(int policy);

/* A human tool's on_user_message: what a new user message does to its
 * pending call (docs/tools.md): keep it waiting, or reject it. */
enum tool_on_user_message { ON_USER_MESSAGE_KEEP = 0, ON_USER_MESSAGE_REJECT };
const char *config_on_user_message_name(int policy);
/* A human tool's approvers: the approvals by different names that settle
 * one of its calls (docs/tools.md, "A second pair of eyes"). */
#define CONFIG_APPROVERS_MAX 100

struct tool_cfg {
	char *name;
	int executor;        /* EXEC_SERVER or EXEC_HUMAN */
	char *command;       /* server tools */
	int64_t timeout_ms;  /* server tools, default 30 s */
	char *prompt;        /* human tools, default "Approve?" */
	int64_t expires_ms;  /* human tools, 0: never (default 1 h) */
	int64_t warn_before_ms; /* human tools: an expiry_warning this long before the deadline, 0: none */
	int on_expiry;       /* human tools: enum tool_on_expiry, default ON_EXPIRY_EXPIRE */
	char *escalate_to;   /* human tools with on_expiry = escalate: the human tool the call is handed to */
	int on_user_message; /* human tools: enum tool_on_user_message, default ON_USER_MESSAGE_KEEP */
	int approvers;       /* human tools: approvals by different names that settle a call, 1-100; 0: not given (1) */
	char *description;
	int max_attempts;    /* server tools: dispatches before "interrupted", default 3 */
	size_t out_cap;      /* server tools: stdout cap, default 1 MiB */
	struct isolate_cfg iso;
	struct mcp_cfg *mcp; /* an [mcp.NAME] server (executor EXEC_SERVER, no command) */
	/* Server tools: whether a call interrupted after its dispatch began
	 * may be dispatched again (docs/tools.md, "Calls whose outcome is
	 * unknown"): 1 yes, 0 no, -1 not said (a command's: no; an MCP
	 * tool's: its annotations, config_mcp_idempotent). */
	int idempotent;
	char *reconcile;     /* server tools: asked whether an unknown call's effect happened; NULL: none */
};

/* A conversation's limits (settings.budget over [agentd] budget_*). A
 * negative limit is none. */
struct config_budget {
	int64_t max_tokens;  /* input plus output tokens */
	int64_t max_turns;   /* model turns */
	double max_cost;
};

struct config {
	char *path;              /* the file read, or NULL */
	char *data;              /* ./agentd-data */
	char *socket;            /* NULL: DATA/agentd.sock */
	char *worker;            /* NULL: agentd-worker beside agentd */
	int64_t idle_timeout_ms; /* 300 s */
	int sync;                /* SYNC_FULL */
	int audit;               /* off */
	int64_t audit_ttl_ms;    /* 7 d */
	/* Retention (supervisor/retention.c): 0 is off. */
	int64_t end_idle_after_ms;     /* an idle conversation untouched this long is ended */
	int64_t remove_ended_after_ms; /* an ended one untouched this long is removed */
	char *retention_export;        /* NULL, or the directory a conversation is exported to before its removal */
	int64_t retention_interval_ms; /* between passes; 10 min */
	size_t max_line;         /* 1 MiB */
	size_t max_reply_bytes;  /* an `events` reply's events, encoded: 4 MiB */
	int max_workers;         /* 256 */
	int restart_limit;       /* 5 crashes ... */
	int64_t restart_window_ms; /* ... within 60 s: stop restarting */
	int64_t shutdown_timeout_ms; /* 10 s */
	size_t map_size;         /* 0: the store's default */
	size_t max_map_size;     /* 0: the store's default */
	int compact_events;      /* working-set size that triggers compaction, 0: never; 400 */
	int compact_keep;        /* events kept after a summary; 20 */
	int max_tool_rounds;     /* model rounds in a row that call tools before a turn is stopped; 25 */
	size_t model_out_cap;    /* 4 MiB */
	int allow_any_uid;       /* peers of any uid may connect (default: same uid or root) */
	char *socket_group;      /* NULL, or a group whose members may connect too (the socket 0660 in it) */
	long socket_gid;         /* socket_group's gid from /etc/group; -1: none */
	char **hide;             /* hide = PATH ...: covered in every sandbox; NULL-terminated or NULL */
	int log_level;           /* LOG_* */
	struct config_budget budget; /* the default budget: none */
	/* Several nodes sharing one store (docs/scale-out.md). */
	char *node_id;           /* NULL: the host's name */
	int64_t lease_ms;        /* a node's lease on its conversations; 10 s */
	int64_t heartbeat_ms;    /* how often it renews them; 0: a third of lease_ms */
	int64_t notify_poll_ms;  /* the fallback poll behind cross-node wakeups; 2 s */
	int ephemeral;
	size_t batch_max_events; /* events in one send batch: 100 */
	size_t batch_max_bytes;  /* their content as stored: 1 MiB */
	/* [store] (docs/scale-out.md): a PostgreSQL store instead of the data
	 * directory, and where agentd keeps its socket, pid file and locks then. */
	char *store;             /* NULL: the LMDB store in data */
	char *run_dir;           /* NULL: ./agentd-run (PostgreSQL only; LMDB uses data) */
	int store_connections;   /* workers holding store connections at once; 64 */
	int data_given;          /* data was set in the file (with store: a conflict) */
	struct model_cfg *models;
	size_t nmodels;
	struct tool_cfg *tools;
	size_t ntools;
};

/* The defaults. 0, or -ENOMEM (c is then still safe to config_free). */
int config_init(struct config *c);
/* Read an INI file over the defaults. 0; on error a message naming the file,
 * line and key in err and: the negative errno when the file cannot be opened
 * or read, -ENOMEM when path cannot be copied, -EINVAL when its content is
 * refused (or memory ran out while reading it: err says which). */
int config_load(struct config *c, const char *path, char *err, size_t errlen);
void config_free(struct config *c);

/* The named model or tool; the built-in echo model is always there. NULL if unknown. */
const struct model_cfg *config_model(const struct config *c, const char *name);
const struct tool_cfg *config_tool(const struct config *c, const char *name);
/* Whether tool (a name as the server lists it) of the MCP server tc may be
 * dispatched again after an interruption: its idempotent_tools or
 * non_idempotent_tools entry, else the server's idempotent, else its
 * annotations (read_only, idempotent_hint: 1 true, 0 false, -1 absent):
 * readOnlyHint or idempotentHint true is safe, anything else is not. */
int config_mcp_idempotent(const struct tool_cfg *tc, const char *tool, int read_only, int idempotent_hint);

/* "500ms", "30s", "5m", "1h", "7d", or a bare number of seconds. 0 or -EINVAL. */
int config_duration(const char *s, int64_t *ms);
/* "64k", "1m", "1g" (bytes, binary units) or a bare number of bytes. 0 or -EINVAL. */
int config_size(const char *s, size_t *bytes);
/* "error", "warn", "info" or "debug": its LOG_* level (>= 0), or -EINVAL. */
int config_log_level(const char *s);
/* Whether t names a PostgreSQL store (postgresql://, postgres://, or a
 * conninfo starting host= or dbname=), as store_open dispatches. */
int config_store_is_pg(const char *t);
/* t as agentd shows it (status, logs, check): a PostgreSQL target with its
 * password, if any, as ***; anything else as it is. Malloc'd; NULL: no memory. */
char *config_store_shown(const char *t);

#endif
