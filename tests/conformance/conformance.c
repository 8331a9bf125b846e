/* The store conformance suite: written against store/store.h only. */
#include <check.h>
#include "store/store.h"
#include "tests/suites.h"

Suite *make_conformance_suite(void)
{
	return suite_create("conformance");
}
