/* The one runner for every Check suite (Check's fork mode: each test runs in
 * its own process, so a fixture's LMDB environment never crosses a fork). */
#include <check.h>
#include <stdlib.h>

#include "tests/suites.h"

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
