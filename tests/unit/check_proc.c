#include <check.h>
#include "tests/suites.h"

Suite *make_proc_suite(void)
{
	return suite_create("proc");
}
