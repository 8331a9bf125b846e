/* Every Check suite, one per module; add a suite here and in CMakeLists.txt. */
#ifndef AGENTD_TESTS_SUITES_H
#define AGENTD_TESTS_SUITES_H
#include <check.h>

Suite *make_mp_suite(void);
Suite *make_conformance_suite(void);
Suite *make_store_mp_suite(void);
Suite *make_proc_suite(void);
Suite *make_protocol_suite(void);
Suite *make_render_suite(void);
Suite *make_consistency_suite(void);
Suite *make_config_suite(void);
Suite *make_model_suite(void);
Suite *make_lifecycle_suite(void);
Suite *make_loop_suite(void);
Suite *make_durable_suite(void);
Suite *make_store_pg_suite(void);
Suite *make_convtree_suite(void);
Suite *make_gate_suite(void);
Suite *make_waiters_suite(void);
Suite *make_digest_suite(void);
Suite *make_cron_suite(void);

static Suite *(*const check_suites[])(void) = {
	make_mp_suite,
	make_conformance_suite,
	make_store_mp_suite,
	make_proc_suite,
	make_protocol_suite,
	make_render_suite,
	make_consistency_suite,
	make_config_suite,
	make_model_suite,
	make_lifecycle_suite,
	make_loop_suite,
	make_durable_suite,
	make_store_pg_suite,
	make_convtree_suite,
	make_gate_suite,
	make_waiters_suite,
	make_digest_suite,
	make_cron_suite,
	0,
};
#endif
