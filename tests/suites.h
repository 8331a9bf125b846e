/* Every Check suite, one per module; add a suite here and in CMakeLists.txt. */
#ifndef AGENTD_TESTS_SUITES_H
#define AGENTD_TESTS_SUITES_H
#include <check.h>

Suite *make_mp_suite(void);
Suite *make_conformance_suite(void);

static Suite *(*const check_suites[])(void) = {
	make_mp_suite,
	make_conformance_suite,
	0,
};
#endif
