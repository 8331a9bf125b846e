#include <check.h>
#include "tests/suites.h"

Suite *make_store_mp_suite(void)
{
	return suite_create("store_mp");
}
