/*
 * agentctl.h: what agentctl's files share (agentctl.c: main and messages;
 * commands.c: the command table and the help built from it; request.c: a
 * command line into its request; show.c: readable output; run.c: a command
 * run against agentd through client/ctl.h). Internal to agentctl: its
 * contract with the world is docs/agentctl.md.
 */
#ifndef AGENTD_AGENTCTL_H
#define AGENTD_AGENTCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef AGENTD_VERSION
#define AGENTD_VERSION "unknown"
#endif

enum {
	EXIT_OK = 0,    /* agentd replied ok:true */
	EXIT_REPLY = 1, /* agentd replied ok:false */
	EXIT_USAGE = 2, /* bad command line, or no usable connection */
};

/* Where agentctl looks when neither -s nor $AGENTD_SOCKET says: scripts/run.sh's
 * agentd, seen from the directory it runs in, then the installed service's
 * (packaging/agentd.service). */
#define DEFAULT_SOCKET "./agentd-data/agentd.sock"
#ifndef AGENTD_RUN_SOCKET
#define AGENTD_RUN_SOCKET "/run/agentd/agentd.sock"
#endif
#define DEFAULT_TIMEOUT_MS 60000

/* Real numbers: requests carry 17 significant digits so agentd gets exactly the
 * double that was parsed; readable output uses 15, which gives back the decimal
 * a person typed (0.1 rather than 0.10000000000000001). Text is made by
 * jsonmp_dumps: json_dumps can leave out an object key when an allocation
 * inside it fails, and a request short of a key is another request. */
#define SEND_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17))
#define SHOW_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15))

/* ------------------------------------------------------------------------ */
/* The command table (commands.c)                                           */

enum kind {
	K_STR,      /* string field */
	K_UINT,     /* non-negative integer field */
	K_JSON,     /* any JSON value */
	K_ENUM,     /* one of `choices` ("a|b"), matched case-insensitively */
	K_CONST,    /* flag: sets `field` to the string `choices` */
	K_TRUE,     /* flag: sets `field` to true */
	K_SET_STR,  /* settings.<field>: string */
	K_SET_LIST, /* settings.<field>: array of strings, repeatable */
	K_SET_KV,   /* settings.<field>: object from KEY=VALUE, repeatable */
	K_CONTENT,  /* send's TEXT: a string, or a JSON object with --json-content */
	K_RAW,      /* raw's JSON: the whole request line */
	K_LOCAL,    /* flag read by agentctl itself (--json-content) */
	K_RES_STR,  /* result.<field>: string (approve and deny's --comment) */
	K_SET_JSON, /* settings.<field>: any JSON value */
	K_BATCH,    /* send's --batch FILE: a JSON array of events, in place of TEXT */
	K_META_KV,  /* metadata.KEY: string VALUE from KEY=VALUE, repeatable */
	K_META_DEL, /* metadata.KEY: null (update: delete the key), repeatable */
	K_PATH,     /* string field: a path, made absolute against agentctl's working directory */
};

struct param {
	const char *name;  /* "--after", or a positional's placeholder ("CONV") */
	const char *field; /* the request field it fills */
	enum kind kind;
	const char *meta;  /* the option's argument placeholder; NULL for flags */
	const char *choices;
	bool required;     /* options only: positionals are always required */
	const char *help;
};

enum {
	CMD_WATCH = 1 << 0,    /* stream after the reply */
	CMD_RAW = 1 << 1,      /* the request is the user's line */
	CMD_NEED_OPT = 1 << 2, /* at least one option must be given */
	CMD_SLOW = 1 << 3,     /* may take minutes (a model call): no default timeout */
	CMD_PENDING = 1 << 4,  /* agentctl's own: several requests (see run_pending) */
	CMD_DIGEST = 1 << 5,   /* resolve: args_digest asked of agentd when not given (see with_digest) */
};

struct command {
	const char *name;
	const char *op;
	const char *summary; /* one line, for `agentctl --help` */
	const char *doc;     /* what it does and what it prints */
	const struct param *pos;
	const struct param *opt;
	void (*show)(const json_t *reply);
	unsigned flags;
	const char *example;
	const char *fixed; /* JSON object merged into the request first, or NULL */
	const char *ids;   /* -q prints this: "FIELD", or "ARRAY/FIELD" for each row; NULL: nothing */
};

extern const struct command commands[];
extern const size_t ncommands;

/* The row named name, or NULL. */
const struct command *find_command(const char *name);
void print_main_help(FILE *f);
void print_command_help(const struct command *cmd, FILE *f);

/* ------------------------------------------------------------------------ */
/* Messages and what a run holds (agentctl.c)                               */

struct options {
	const char *socket;
	bool json;
	bool quiet;         /* -q: ids only (struct command's ids) */
	int64_t timeout_ms; /* 0: wait for ever */
	bool timeout_set;   /* given on the command line */
};

extern const char *cur_cmd; /* the command being run, for messages */

/* What a run holds on the heap. agentctl exits from deep inside (a usage error,
 * a lost connection, the end of a watch); release_held() runs at exit and frees
 * whatever is recorded here, so leak checkers (the test suite's ASan pass runs
 * agentctl) stay quiet without each of those paths unwinding by hand. */
struct held {
	json_t *req;      /* the request being built */
	const char **pos; /* its positional arguments */
	char *input;      /* stdin, read for a TEXT or JSON of "-" */
	char *key;        /* a --param key being added */
	char *request;    /* the request line */
	json_t *reply;
	json_t *page;     /* pending: the list reply being walked */
	char *after;      /* pending: the next page's cursor */
};
extern struct held held;

/* A usage error: exit 2 with a pointer to the help. */
__attribute__((format(printf, 1, 2))) _Noreturn void usage_error(const char *fmt, ...);
/* A connection or system failure: exit 2, the message not naming the command. */
__attribute__((format(printf, 1, 2))) _Noreturn void fail(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void warn(const char *fmt, ...);
/* p, or exit 2 with "out of memory" when it is NULL. */
void *must(void *p);
char *xstrdup(const char *s);
/* json_object_set_new that exits on failure: a request short of a field is another request. */
void put(json_t *o, const char *key, json_t *v);

/* ------------------------------------------------------------------------ */
/* Building the request (request.c)                                         */

/* Global options may come before the command or among its arguments. Returns
 * true when argv[*i] was one (and advances *i past it and its value). */
bool global_option(int argc, char **argv, int *i, struct options *o);
/* A command's arguments as its request line: JSON, or for raw the user's
 * line (free it). *extra_ms: how much longer the reply may take (--wait).
 * Exits on usage errors and on --help. */
char *build_request(const struct command *cmd, int argc, char **argv, struct options *o, int64_t *extra_ms);

/* ------------------------------------------------------------------------ */
/* Readable output (show.c)                                                 */

void show_ping(const json_t *reply);
void show_create(const json_t *reply);
void show_fields(const json_t *reply);
void show_get(const json_t *reply);
void show_list(const json_t *reply);
void show_events(const json_t *reply);
void show_tool_call(const json_t *reply);
void show_tool_calls(const json_t *reply);
void show_summary(const json_t *reply);
void show_audit(const json_t *reply);
void show_status(const json_t *reply);
void show_metrics(const json_t *reply);
void show_nodes(const json_t *reply);
void show_pending(const json_t *reply);
void show_runs(const json_t *reply);
void show_schedules(const json_t *reply);
/* SEQ TYPE CONTENT: the line format of events and watch. */
void print_event(const json_t *ev);
/* v as compact JSON for a person (15 digits); exits when out of memory. */
char *dump(const json_t *v);
/* How a value reads in a table cell or after "key: " (null_text for null). */
char *text_of(const json_t *v, const char *null_text);
/* stdout failing is not agentd's fault but the user must know: exit 2; a
 * reader that went away exits code_if_gone. */
void check_stdout(int code_if_gone);

/* ------------------------------------------------------------------------ */
/* Running a command (run.c)                                                */

/* Where agentd may be listening, in the order tried: -s, else
 * $AGENTD_SOCKET, else the defaults (DEFAULT_SOCKET, AGENTD_RUN_SOCKET). */
struct sockets {
	const char *path[2];
	int n;
	const char *from; /* "-s", "$AGENTD_SOCKET", or NULL for the defaults */
};

/* Send request, print the reply (and for watch the stream); the exit code. */
int run(const struct command *cmd, const struct sockets *ss, const char *request, int64_t extra_ms,
	const struct options *o);
/* pending: several requests on one connection; the exit code. */
int run_pending(const struct sockets *ss, const struct options *o);
/* Close the connection, if one is open (at exit). */
void run_release(void);

#endif
