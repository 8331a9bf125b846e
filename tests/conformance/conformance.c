/*
 * The store conformance suite: every behaviour store/store.h promises, one
 * test per behaviour, written against store.h alone (plus libc, Check and
 * msgpack-c to build content), so a second backend links it unchanged.
 *
 * Each test runs in its own fork (Check's fork mode); the checked fixture
 * opens a fresh store in a fresh mkdtemp() directory inside that fork, so no
 * environment ever crosses a fork. Time comes from a fake clock the tests set.
 * With AGENTD_TEST_STORE=pg every store directory stands for a fresh
 * PostgreSQL store of its own (a schema, target.h): the same tests, unchanged,
 * run against the PostgreSQL backend.
 *
 * This file makes the suite from its cases; the tests of each topic are in
 * conf_<topic>.c, the fixture and the helpers they share in conf_fixture.c
 * and conf_rows.c (conformance.h).
 */
#include <check.h>

#include "tests/conformance/conformance.h"
#include "tests/suites.h"

/* The cases in the order they run: a name, its checked fixture (a fresh
 * store, audit off or on) and what adds its tests (conf_<topic>.c). */
static const struct conf_case {
	const char *name;
	void (*setup)(void);
	void (*add)(TCase *tc);
} conf_cases[] = {
	{ "events", conf_setup, conf_events_add },
	{ "stream", conf_setup, conf_stream_add },
	{ "summaries", conf_setup, conf_summaries_add },
	{ "conversations", conf_setup, conf_conversations_add },
	{ "ids", conf_setup, conf_ids_add },
	{ "lease_usage", conf_setup, conf_lease_usage_add },
	{ "tool_calls", conf_setup, conf_tool_calls_add },
	{ "expiries", conf_setup, conf_expiries_add },
	{ "schedules", conf_setup, conf_schedules_add },
	{ "delete", conf_setup, conf_delete_add },
	{ "audit_off", conf_setup, conf_audit_off_add },
	{ "audit", conf_setup_audit, conf_audit_add },
	{ "runs", conf_setup, conf_runs_add },
	{ "transactions", conf_setup, conf_transactions_add },
	{ "content", conf_setup, conf_content_add },
	{ "open", conf_setup, conf_open_add },
	{ "edges", conf_setup, conf_edges_add },
	{ "metadata", conf_setup, conf_metadata_add },
	{ "audit_edges", conf_setup_audit, conf_audit_edges_add },
	{ "nodes", conf_setup, conf_nodes_add },
	{ "log_at", conf_setup, conf_log_at_add },
	{ "runs_each", conf_setup, conf_runs_each_add },
	{ "convs_lock", conf_setup, conf_convs_lock_add },
};

Suite *make_conformance_suite(void)
{
	Suite *s = suite_create("conformance");
	for (size_t i = 0; i < sizeof conf_cases / sizeof conf_cases[0]; i++) {
		TCase *tc = tcase_create(conf_cases[i].name);
		tcase_add_checked_fixture(tc, conf_cases[i].setup, conf_teardown);
		tcase_set_timeout(tc, 60);
		suite_add_tcase(s, tc);
		conf_cases[i].add(tc);
	}
	return s;
}
