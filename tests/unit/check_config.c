/*
 * check_config.c: the INI configuration (common/config.c): every value
 * form accepted, and every bad file refused with a message naming what is
 * wrong, before agentd opens anything.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "tests/suites.h"

/* Load text as a configuration file; returns config_load's result with its
 * message in err (the file name replaced by "F"). */
static int load(const char *text, struct config *c, char *err, size_t errlen)
{
	char path[] = "/tmp/agentd-check-config-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	size_t n = strlen(text);
	ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
	close(fd);
	config_init(c);
	err[0] = 0;
	int rc = config_load(c, path, err, errlen);
	unlink(path);
	char *at = strstr(err, path);
	if (at) {
		*at = 'F';
		memmove(at + 1, at + strlen(path), strlen(at + strlen(path)) + 1);
	}
	return rc;
}

START_TEST(durations)
{
	static const struct {
		const char *s;
		int64_t ms;
	} good[] = {
		{ "500ms", 500 }, { "30s", 30000 }, { "5m", 300000 }, { "1h", 3600000 }, { "7d", 604800000 },
		{ "2", 2000 }, { "1.5s", 1500 }, { "0", 0 }, { "0.25", 250 }, { "0.4ms", 1 }, { "0.0001", 1 },
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		int64_t ms = -1;
		ck_assert_msg(config_duration(good[i].s, &ms) == 0, "'%s' refused", good[i].s);
		ck_assert_msg(ms == good[i].ms, "'%s': %lld ms", good[i].s, (long long)ms);
	}
	static const char *const bad[] = { "", "-1", "-1s", "nan", "inf", "0x10", "1e3", "5 s", " 5", "s", ".",
		"1.2.3", "5x", "5sec", "99999999999999999999d" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int64_t ms = 42;
		ck_assert_msg(config_duration(bad[i], &ms) == -EINVAL, "'%s' accepted", bad[i]);
		ck_assert_int_eq(ms, 42);
	}
	ck_assert_int_eq(config_duration(NULL, &(int64_t){ 0 }), -EINVAL);
}
END_TEST

START_TEST(sizes)
{
	static const struct {
		const char *s;
		size_t bytes;
	} good[] = {
		{ "100", 100 }, { "64k", 65536 }, { "1m", 1 << 20 }, { "1MiB", 1 << 20 }, { "2g", (size_t)2 << 30 },
		{ "3K", 3072 }, { "1mb", 1 << 20 },
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		size_t b = 0;
		ck_assert_msg(config_size(good[i].s, &b) == 0, "'%s' refused", good[i].s);
		ck_assert_msg(b == good[i].bytes, "'%s': %zu", good[i].s, b);
	}
	static const char *const bad[] = { "", "-1", "1t", "1kx", "k", "1 k", "99999999999999999999",
		"17179869184g" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t b = 42;
		ck_assert_msg(config_size(bad[i], &b) == -EINVAL, "'%s' accepted", bad[i]);
		ck_assert_uint_eq(b, 42);
	}
}
END_TEST

START_TEST(a_good_file)
{
	struct config c;
	char err[512];
	int rc = load("; comment\n[agentd]\nidle_timeout = 90s\nmap_size = 1m\nmax_map_size = 4m\n"
		      "restart_window = 2s\n\n[model.m]\ncommand = \"/usr/bin/env\" 'py thon' a\\ b\ntimeout = 5s\n"
		      "retries = 0\n\n[tool.t]\ncommand = ./t\n[tool.h]\nexecutor = human\nexpires = 0\n",
		      &c, err, sizeof err);
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(c.idle_timeout_ms, 90000);
	ck_assert_uint_eq(c.map_size, 1 << 20);
	ck_assert_uint_eq(c.max_map_size, 4 << 20);
	ck_assert_int_eq(c.restart_window_ms, 2000);
	ck_assert_uint_eq(c.batch_max_events, 100); /* the defaults */
	ck_assert_uint_eq(c.batch_max_bytes, 1 << 20);
	config_free(&c);
	rc = load("[agentd]\nbatch_max_events = 10000\nbatch_max_bytes = 1k\n", &c, err, sizeof err);
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(c.batch_max_events, 10000);
	ck_assert_uint_eq(c.batch_max_bytes, 1024);
	config_free(&c);
	rc = load("; comment\n[agentd]\nidle_timeout = 90s\nmap_size = 1m\nmax_map_size = 4m\n"
		  "restart_window = 2s\n\n[model.m]\ncommand = \"/usr/bin/env\" 'py thon' a\\ b\ntimeout = 5s\n"
		  "retries = 0\n\n[tool.t]\ncommand = ./t\n[tool.h]\nexecutor = human\nexpires = 0\n",
		  &c, err, sizeof err);
	ck_assert_msg(rc == 0, "%s", err);
	const struct model_cfg *m = config_model(&c, "m");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->timeout_ms, 5000);
	ck_assert_int_eq(m->retries, 0);
	ck_assert_ptr_nonnull(config_model(&c, "echo"));
	ck_assert_ptr_null(config_model(&c, "nope"));
	const struct tool_cfg *h = config_tool(&c, "h");
	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(h->executor, EXEC_HUMAN);
	ck_assert_int_eq(h->expires_ms, 0);
	ck_assert_str_eq(h->prompt, "Approve?");
	config_free(&c);
}
END_TEST

/* Isolation keys in tools and models; an [mcp.NAME] server is a tool named NAME. */
START_TEST(isolation_and_mcp)
{
	struct config c;
	char err[512];
	int rc = load("[model.m]\ncommand = m\nenv = OPENAI_API_KEY\nuser = nobody\n"
		      "[tool.t]\ncommand = t\nenv = A 'B=two words'\nuser = nobody\ngroup = root\nrlimit_as = 64m\n"
		      "rlimit_cpu = 1500ms\nrlimit_nofile = 64\nsandbox = no\n"
		      "[mcp.fs]\ncommand = node srv.js\nargs = stdio '/a b'\ntimeout = 5s\nstart_timeout = 3s\n"
		      "env = TOKEN\nmax_attempts = 2\nhide = /srv/keys '/a b'\n[mcp.ev]\ncommand = x\nprefix = e_\n"
		      "[agentd]\nhide = /etc/agentd\n",
		      &c, err, sizeof err);
	ck_assert_msg(rc == 0, "%s", err);
	const struct model_cfg *m = config_model(&c, "m");
	ck_assert_str_eq(m->iso.env[0], "OPENAI_API_KEY");
	ck_assert_ptr_null(m->iso.env[1]);
	ck_assert_int_eq(m->iso.uid, 65534);
	ck_assert_int_eq(m->iso.gid, 65534);
	const struct tool_cfg *t = config_tool(&c, "t");
	ck_assert_str_eq(t->iso.env[1], "B=two words");
	ck_assert_int_eq(t->iso.uid, 65534);
	ck_assert_int_eq(t->iso.gid, 0);
	ck_assert_uint_eq(t->iso.rlimit_as, 64 << 20);
	ck_assert_int_eq(t->iso.rlimit_cpu, 2); /* whole seconds, rounded up */
	ck_assert_int_eq(t->iso.rlimit_nofile, 64);
	ck_assert_ptr_null(t->mcp);
	ck_assert_int_eq(t->iso.sandbox_off, 1);
	ck_assert_ptr_null(t->iso.hide);
	ck_assert_int_eq(m->iso.sandbox_off, 0); /* sandboxed unless said */
	ck_assert_str_eq(c.hide[0], "/etc/agentd");
	ck_assert_ptr_null(c.hide[1]);
	const struct tool_cfg *fs = config_tool(&c, "fs");
	ck_assert_str_eq(fs->iso.hide[0], "/srv/keys");
	ck_assert_str_eq(fs->iso.hide[1], "/a b");
	ck_assert_ptr_null(fs->iso.hide[2]);
	ck_assert_ptr_nonnull(fs->mcp);
	ck_assert_int_eq(fs->executor, EXEC_SERVER);
	ck_assert_ptr_null(fs->command);
	ck_assert_str_eq(fs->mcp->command, "node srv.js");
	ck_assert_str_eq(fs->mcp->args, "stdio '/a b'");
	ck_assert_str_eq(fs->mcp->prefix, "fs__");
	ck_assert_int_eq(fs->timeout_ms, 5000);
	ck_assert_int_eq(fs->mcp->start_timeout_ms, 3000);
	ck_assert_int_eq(fs->max_attempts, 2);
	ck_assert_int_eq(fs->iso.uid, -1);
	ck_assert_str_eq(config_tool(&c, "ev")->mcp->prefix, "e_");
	ck_assert_int_eq(config_tool(&c, "ev")->mcp->start_timeout_ms, 20000);
	config_free(&c);
}
END_TEST

/* idempotent and reconcile (docs/tools.md, "Calls whose outcome is unknown"): a
 * command's default is no; an MCP tool's follows the lists, then the
 * server's idempotent, then its annotations. */
START_TEST(idempotency)
{
	struct config c;
	char err[512];
	int rc = load("[tool.a]\ncommand = a\n[tool.b]\ncommand = b\nidempotent = yes\nreconcile = ./check 'x y'\n"
		      "[mcp.m]\ncommand = m\nidempotent_tools = w, x\nnon_idempotent_tools = x,y\n"
		      "[mcp.n]\ncommand = n\nidempotent = no\n",
		      &c, err, sizeof err);
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(config_tool(&c, "a")->idempotent, -1);
	ck_assert_ptr_null(config_tool(&c, "a")->reconcile);
	ck_assert_int_eq(config_tool(&c, "b")->idempotent, 1);
	ck_assert_str_eq(config_tool(&c, "b")->reconcile, "./check 'x y'");
	const struct tool_cfg *m = config_tool(&c, "m"), *n = config_tool(&c, "n");
	ck_assert_int_eq(config_mcp_idempotent(m, "w", 0, 0), 1);  /* listed */
	ck_assert_int_eq(config_mcp_idempotent(m, "x", 1, 1), 0);  /* in both lists: not */
	ck_assert_int_eq(config_mcp_idempotent(m, "y", 1, 1), 0);
	ck_assert_int_eq(config_mcp_idempotent(m, "z", 1, -1), 1); /* readOnlyHint */
	ck_assert_int_eq(config_mcp_idempotent(m, "z", 0, 1), 1);  /* idempotentHint */
	ck_assert_int_eq(config_mcp_idempotent(m, "z", 0, 0), 0);
	ck_assert_int_eq(config_mcp_idempotent(m, "z", -1, -1), 0); /* no hints: not */
	ck_assert_int_eq(config_mcp_idempotent(m, "ww", 1, 1), 1);  /* a whole name only */
	ck_assert_int_eq(config_mcp_idempotent(m, "ww", 0, 0), 0);
	ck_assert_int_eq(config_mcp_idempotent(n, "z", 1, 1), 0);   /* the server's idempotent over hints */
	config_free(&c);
}
END_TEST

/* Each bad file, and the message that must name its fault. */
static const struct {
	const char *text;
	const char *err;
} bad_files[] = {
	{ "[agentd]\nidle_timeout = nan\n", "F:2: bad value 'nan' for 'idle_timeout' in [agentd]" },
	{ "[agentd]\nidle_timeout = 5 s\n", "F:2: bad value '5 s' for 'idle_timeout' in [agentd]" },
	{ "[agentd]\nrestart_window = 0\n", "F:2: bad value '0' for 'restart_window' in [agentd]" },
	{ "[agentd]\nmap_size = 1k\n", "F:2: bad value '1k' for 'map_size' in [agentd]" },
	{ "[agentd]\nmax_map_size = 32k\n", "F:2: bad value '32k' for 'max_map_size' in [agentd]" },
	{ "[agentd]\nmap_size = 2m\nmax_map_size = 1m\n",
	  "F: map_size (2097152 bytes) is larger than max_map_size (1048576 bytes) in [agentd]" },
	{ "[agentd]\nmax_workers = 0\n", "F:2: bad value '0' for 'max_workers' in [agentd]" },
	{ "[agentd]\nrestart_limit = 17\n", "F:2: bad value '17' for 'restart_limit' in [agentd]" },
	{ "[agentd]\nmax_line = 100\n", "F:2: bad value '100' for 'max_line' in [agentd]" },
	{ "[agentd]\nsync = sometimes\n", "F:2: bad value 'sometimes' for 'sync' in [agentd]" },
	{ "[agentd]\nlog_level = chatty\n", "F:2: bad value 'chatty' for 'log_level' in [agentd]" },
	{ "[agentd]\ncolour = on\n", "F:2: unknown key 'colour' in [agentd]" },
	{ "[agent]\ndata = x\n", "F:2: unknown section [agent]" },
	{ "[model.a b]\ncommand = x\n", "F:2: unknown section [model.a b]" },
	{ "[model.echo]\ncommand = x\n", "F:2: [model.echo] is built in and cannot be configured" },
	{ "[tool.t]\ncommand = x\nenv = 1BAD\n", "F:3: bad value '1BAD' for 'env' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nenv = A-B=1\n", "F:3: bad value 'A-B=1' for 'env' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nenv = 'A\n", "F:3: bad value ''A' for 'env' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nuser = no-such-user-here\n",
	  "F: [tool.t] user: no user named 'no-such-user-here' in /etc/passwd" },
	{ "[model.m]\ncommand = x\ngroup = no-such-group\n",
	  "F: [model.m] group: no group named 'no-such-group' in /etc/group" },
	{ "[tool.t]\ncommand = x\nrlimit_as = 1k\n", "F:3: bad value '1k' for 'rlimit_as' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nrlimit_cpu = 0\n", "F:3: bad value '0' for 'rlimit_cpu' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nrlimit_nofile = 2\n", "F:3: bad value '2' for 'rlimit_nofile' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nnetwork = off\n", "F:3: bad value 'off' for 'network' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nsandbox = off\n", "F:3: bad value 'off' for 'sandbox' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nhide = /p0 /p1 /p2 /p3 /p4 /p5 /p6 /p7 /p8 /p9 /p10 /p11 /p12 /p13 /p14 /p15 /p16 /p17 /p18 /p19 /p20 /p21 /p22 /p23 /p24 /p25 /p26 /p27 /p28 /p29 /p30 /p31 /p32\n", "F:3: 'hide' in [tool.t] names more than 32 paths" },
	{ "[agentd]\nhide = 'unterminated\n", "F:2: bad value ''unterminated' for 'hide' in [agentd]" },
	{ "[tool.h]\nexecutor = human\nhide = /x\n",
	  "F: [tool.h] is a human tool: no process runs, so env, user, group, network, sandbox, hide and rlimit_* do not apply" },
	{ "[tool.h]\nexecutor = human\nnetwork = none\n",
	  "F: [tool.h] is a human tool: no process runs, so env, user, group, network, sandbox, hide and rlimit_* do not apply" },
	{ "[tool.h]\nexecutor = human\nuser = nobody\n",
	  "F: [tool.h] is a human tool: no process runs, so env, user, group, network, sandbox, hide and rlimit_* do not apply" },
	{ "[mcp.s]\nargs = x\n", "F: [mcp.s] needs a command (stdio) or a url (streamable HTTP)" },
	{ "[mcp.s]\n", "F:1: [mcp.s] is empty: an MCP server needs a command or a url" },
	{ "[mcp.s]\ncommand = x\nurl = http://h/mcp\n", "F: [mcp.s] needs a command or a url, not both" },
	{ "[mcp.s]\nurl = h/mcp\n", "F:2: bad value 'h/mcp' for 'url' in [mcp.s]" },
	{ "[mcp.s]\nurl = http://\n", "F:2: bad value 'http://' for 'url' in [mcp.s]" },
	{ "[mcp.s]\nurl = http://h/mcp\nheaders = \"X: $$1\" \"X: 2\"\n",
	  "F: [mcp.s] headers: X cannot be configured: it is given twice" },
	{ "[mcp.s]\nurl = http://h/mcp\nheaders = \"Accept: x\"\n",
	  "F: [mcp.s] headers: Accept cannot be configured: agentd sets it" },
	{ "[mcp.s]\ncommand = x\nexecutor = human\n", "F:3: unknown key 'executor' in [mcp.s]" },
	{ "[mcp.s]\ncommand = x\ndescription = d\n", "F:3: unknown key 'description' in [mcp.s]" },
	{ "[mcp.s]\ncommand = x\nprefix = a b\n", "F:3: bad value 'a b' for 'prefix' in [mcp.s]" },
	{ "[tool.s]\ncommand = x\n[mcp.s]\ncommand = y\n",
	  "F:4: [mcp.s] and [tool.s] share a name: a tool's name is unique" },
	{ "[mcp.s]\ncommand = y\n[tool.s]\ncommand = x\n",
	  "F:4: [tool.s] and [mcp.s] share a name: a tool's name is unique" },
	{ "[mcp.s x]\ncommand = y\n",
	  "F:2: unknown section [mcp.s x] (expected [agentd], [store], [model.NAME], [tool.NAME] or [mcp.NAME]" },
	{ "[store]\ntarget = /var/lib/agentd\n", "F:2: bad value '/var/lib/agentd' for 'target' in [store]" },
	{ "[store]\nconnections = 0\n", "F:2: bad value '0' for 'connections' in [store]" },
	{ "[store]\nbogus = 1\n", "F:2: unknown key 'bogus' in [store]" },
	{ "[agentd]\ndata = /srv/a\n[store]\ntarget = postgresql:///agentd\n",
	  "F: both data in [agentd] and target in [store] are set: one store" },
	{ "[agentd]\nrun_dir =\n", "F:2: bad value '' for 'run_dir' in [agentd]" },
	{ "[model.m]\ntimeout = 5s\n", "F: [model.m] needs a command (or kind = openai or anthropic)" },
	{ "[model.m]\ncommand = \"unterminated\n",
	  "F: [model.m] command: an unterminated quote, a trailing backslash or no word: \"unterminated" },
	{ "[model.m]\ncommand = it's\n", "F: [model.m] command: an unterminated quote" },
	{ "[tool.t]\ncommand = ./t \\\n", "F: [tool.t] command: an unterminated quote, a trailing backslash" },
	{ "[tool.t]\ncommand =\n", "F: [tool.t] command: an unterminated quote, a trailing backslash or no word: " },
	{ "[tool.t]\nexecutor = server\n", "F: [tool.t] is a server tool and needs a command" },
	{ "[tool.t]\nexecutor = human\ncommand = ./t\n", "F: [tool.t] is a human tool: it takes no command" },
	{ "[tool.t]\nexecutor = robot\n", "F:2: bad value 'robot' for 'executor' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nidempotent = maybe\n", "F:3: bad value 'maybe' for 'idempotent' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nreconcile =\n", "F:3: bad value '' for 'reconcile' in [tool.t]" },
	{ "[tool.t]\ncommand = x\nreconcile = 'open\n", "F: [tool.t] command: an unterminated quote" },
	{ "[tool.t]\nexecutor = human\nidempotent = yes\n",
	  "F: [tool.t] is a human tool: idempotent and reconcile are for tools that run" },
	{ "[tool.t]\nexecutor = human\nreconcile = ./r\n",
	  "F: [tool.t] is a human tool: idempotent and reconcile are for tools that run" },
	{ "[tool.t]\ncommand = x\nidempotent_tools = a\n", "F:3: unknown key 'idempotent_tools' in [tool.t]" },
	{ "[mcp.s]\ncommand = x\nidempotent = sometimes\n", "F:3: bad value 'sometimes' for 'idempotent' in [mcp.s]" },
	{ "[agentd]\nthis line has no equals sign\n", "F:2: syntax error" },
	{ "[agentd]\n  idle_timeout = 5s\n  sync = full\n", "F:2: an indented line (it would continue the value above)" },
	{ "[agentd]\nsync = full\n\vmax_workers = 0\n", "F:3: an indented line" },
	{ "[agentd] max_workers = 0\n", "F:1: text after the section header: 'max_workers = 0'" },
	{ "\xEF\xBB\xBF[bogus]\n", "F:1: unknown section [bogus]" },
	{ "[model.echo]\n", "F:1: [model.echo] is built in and cannot be configured" },
	{ "[agentd]\nsync ;= full\nmax_workers = 0\n", "F:2: syntax error" },
	{ "[tool.t]\ncommand = x\ndescription = "
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\njunk\n",
	  "F:4: syntax error" }, /* a line of 198 bytes is whole: the lines after it keep their numbers */
	{ "[bogus section]\n", "F:1: unknown section [bogus section]" },
	{ "[agentd]\n[model.m]\n", "F:2: [model.m] is empty: a model needs a command" },
	{ "[tool.approve]\n", "F:1: [tool.approve] is empty: a server tool needs a command (or executor = human)" },
	{ "[agentd]\nmap_size = 128g\n",
	  "F: map_size (137438953472 bytes) is larger than max_map_size (68719476736 bytes, its default) in [agentd]" },
	{ "[agentd]\ncompact_events = 3\ncompact_keep = 10\n",
	  "F: compact_keep (10) must be under compact_events (3) in [agentd]" },
	{ "[agentd]\nmax_line = 2g\n", "F:2: bad value '2g' for 'max_line' in [agentd]" },
	{ "[agentd]\nmax_reply_bytes = 100\n", "F:2: bad value '100' for 'max_reply_bytes' in [agentd]" },
	{ "[agentd]\nmax_reply_bytes = 2g\n", "F:2: bad value '2g' for 'max_reply_bytes' in [agentd]" },
	{ "[agentd]\nbatch_max_events = 0\n", "F:2: bad value '0' for 'batch_max_events' in [agentd]" },
	{ "[agentd]\nbatch_max_events = 10001\n", "F:2: bad value '10001' for 'batch_max_events' in [agentd]" },
	{ "[agentd]\nbatch_max_bytes = 1023\n", "F:2: bad value '1023' for 'batch_max_bytes' in [agentd]" },
	{ "[agentd]\nbatch_max_bytes = 2g\n", "F:2: bad value '2g' for 'batch_max_bytes' in [agentd]" },
	{ "[agentd]\nmodel_output_cap = 9000000000g\n", "F:2: bad value '9000000000g' for 'model_output_cap'" },
	{ "[agentd]\nsync = full\n\n; a comment\n[tool.t]\ncommand = x\noutput_cap = 2g\n",
	  "F:7: bad value '2g' for 'output_cap' in [tool.t]" },
	{ "[agentd]\nmax_workers = 3\nmax_workers = 4\n", "F:3: 'max_workers' is set twice in [agentd]" },
	{ "[agentd]\nmodel_output_cap = 0\n", "F:2: bad value '0' for 'model_output_cap' in [agentd]" },
	{ "[tool.t]\ncommand = x\noutput_cap = 1023\n", "F:3: bad value '1023' for 'output_cap' in [tool.t]" },
	{ "[tool.t]\ncommand = x\ndescription = "
	  "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
	  "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789\n",
	  "F:3: a line over 198 bytes" },
	{ "[model.m]\ncommand = a\n[tool.t]\ncommand = t\n[model.m]\ncommand = b\n", "F:6: 'command' is set twice in [model.m]" },
};

START_TEST(bad_file_refused)
{
	struct config c;
	char err[512];
	int rc = load(bad_files[_i].text, &c, err, sizeof err);
	ck_assert_msg(rc == -EINVAL, "accepted: %s", bad_files[_i].text);
	ck_assert_msg(strncmp(err, bad_files[_i].err, strlen(bad_files[_i].err)) == 0, "for [%s]: '%s', want '%s'",
		      bad_files[_i].text, err, bad_files[_i].err);
	config_free(&c);
}
END_TEST

/* [store]: a PostgreSQL target, its connection limit, the run directory;
 * and what logs and status show of a target: never its password. */
START_TEST(store_section)
{
	struct config c;
	char err[512];
	ck_assert_int_eq(load("[agentd]\nrun_dir = /run/agentd\n[store]\ntarget = postgresql://u:pw@db/agentd\n"
			      "connections = 8\n", &c, err, sizeof err), 0);
	ck_assert_str_eq(c.store, "postgresql://u:pw@db/agentd");
	ck_assert_str_eq(c.run_dir, "/run/agentd");
	ck_assert_int_eq(c.store_connections, 8);
	config_free(&c);
	ck_assert_int_eq(load("[agentd]\nsync = full\n", &c, err, sizeof err), 0);
	ck_assert_ptr_null(c.store);
	ck_assert_int_eq(c.store_connections, 64);
	config_free(&c);
	static const char *const shown[][2] = {
		{ "postgresql://u:secret@db:5432/agentd", "postgresql://u:***@db:5432/agentd" },
		{ "postgresql://u:x@db/agentd", "postgresql://u:***@db/agentd" },
		{ "postgresql://u@db/agentd?password=secret&sslmode=require",
		  "postgresql://u@db/agentd?password=***&sslmode=require" },
		{ "postgresql://db/agentd", "postgresql://db/agentd" },
		{ "host=db password=secret dbname=a", "host=db password=*** dbname=a" },
		{ "host=db password = 'se cret' dbname=a", "host=db password = *** dbname=a" },
		{ "dbname=a password=ab", "dbname=a password=**" },
		{ "/var/lib/agentd", "/var/lib/agentd" },
	};
	for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
		char *got = config_store_shown(shown[i][0]);
		ck_assert_str_eq(got, shown[i][1]);
		free(got);
	}
	ck_assert(config_store_is_pg("postgres://h/d") && config_store_is_pg("dbname=x") &&
		  !config_store_is_pg("./agentd-data"));
}
END_TEST

START_TEST(missing_file)
{
	struct config c;
	char err[512];
	config_init(&c);
	ck_assert_int_eq(config_load(&c, "/nonexistent/agentd.ini", err, sizeof err), -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/agentd.ini: No such file or directory");
	config_free(&c);
}
END_TEST

/* A directory opens, then every read fails: it looked like an empty file and
 * agentd went on to fail copying it (exit 1, not a configuration error). */
START_TEST(directory_refused)
{
	struct config c;
	char err[512];
	config_init(&c);
	ck_assert_int_eq(config_load(&c, "/tmp", err, sizeof err), -EISDIR);
	ck_assert_str_eq(err, "/tmp: cannot be read: Is a directory");
	config_free(&c);
}
END_TEST

Suite *make_config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *t = tcase_create("values");
	tcase_add_test(t, durations);
	tcase_add_test(t, sizes);
	tcase_add_test(t, a_good_file);
	tcase_add_test(t, isolation_and_mcp);
	tcase_add_test(t, idempotency);
	tcase_add_loop_test(t, bad_file_refused, 0, (int)(sizeof bad_files / sizeof bad_files[0]));
	tcase_add_test(t, store_section);
	tcase_add_test(t, missing_file);
	tcase_add_test(t, directory_refused);
	suite_add_tcase(s, t);
	return s;
}
