#include <check.h>
#include "tests/suites.h"

Suite *make_protocol_suite(void)
{
	return suite_create("protocol");
}
