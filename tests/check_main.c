/* The runner of the Check suites (Check's fork mode: each test runs in its
 * own process, so a fixture's LMDB environment never crosses a fork): every
 * suite of suites.h in check_all, or with CHECK_ONE_SUITE defined, that one
 * suite alone, for a suite that fakes a module another suite links for real
 * (check_commit's fake control socket beside check_waiters'). */
#include <check.h>
#include <stdlib.h>

#ifdef CHECK_ONE_SUITE
Suite *CHECK_ONE_SUITE(void);
static Suite *(*const check_suites[])(void) = { CHECK_ONE_SUITE, 0 };
#else
#include "tests/suites.h"
#endif

int main(void)
{
	SRunner *sr = srunner_create(NULL);
	for (size_t i = 0; check_suites[i]; i++)
		srunner_add_suite(sr, check_suites[i]());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
