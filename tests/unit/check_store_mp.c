/*
 * The store's multi-process rules (docs/architecture.md, "The store"), with real processes.
 *
 * Every other process is tests/store_child (STORE_CHILD), fork+exec'd so that
 * it opens its own environment: a forked copy of the test never touches the
 * test's handle. The test's own handle lives in a checked fixture (it runs
 * inside the test's fork) in a fresh mkdtemp directory; an unchecked fixture
 * owns the parent directory and removes it even when a failed test _exit()ed
 * before its teardown. Children wait on pipes: readiness is a byte on their
 * stdout, release is EOF on their stdin (so a dead test frees them too), and
 * conditions are polled against deadlines scaled by AGENTD_TEST_SLOW.
 *
 * This file makes the suite from its cases; the tests of each topic are in
 * store_mp/mp_<topic>.c, the fixtures and helpers they share in
 * store_mp/mp_fixture.c (store_mp/store_mp.h).
 */
#include <check.h>

#include "tests/suites.h"
#include "tests/unit/store_mp/store_mp.h"

/* A case of this suite: its own directory per test, children reaped. */
static TCase *mp_case(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_add_unchecked_fixture(tc, mp_base_setup, mp_base_teardown);
	tcase_add_checked_fixture(tc, mp_setup, mp_teardown);
	tcase_set_timeout(tc, 30 * slow_factor());
	suite_add_tcase(s, tc);
	return tc;
}

Suite *make_store_mp_suite(void)
{
	Suite *s = suite_create("store_mp");
	TCase *tc = mp_case(s, "processes");
	mp_procs_add(tc);
	mp_map_add(tc);
	mp_fencing_add(tc);
	mp_flush_add(mp_case(s, "shared flushes"));
	mp_cache_add(mp_case(s, "writer cache"));
	mp_ahead_add(mp_case(s, "written ahead"));
	return s;
}
