/* The tree of records keyed by conversation id (supervisor/convtree.h), as
 * workers.c and waiters.c keep theirs: find and insert, an id exactly as
 * long as the key field, one too long (found nowhere, never copied), a
 * second record for the same id refused, order by id for a walk, and a new
 * record made and inserted in one step. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/convtree.h"
#include "tests/suites.h"

struct rec {
	int before;     /* guards on either side of the key: a copy past it shows */
	RB_ENTRY(rec) node;
	char conv[8];   /* ids of at most 7 bytes */
	int after;
};

CONVTREE_GENERATE(rec_tree, rec, node, conv)

START_TEST(test_find_insert)
{
	struct rec_tree t = RB_INITIALIZER(&t);
	struct rec a = { 0 }, b = { 0 }, c = { 0 };
	ck_assert_ptr_null(rec_tree_find(&t, "a"));
	ck_assert_int_eq(rec_tree_insert(&t, &a, "bb"), 0);
	ck_assert_int_eq(rec_tree_insert(&t, &b, "a"), 0);
	ck_assert_int_eq(rec_tree_insert(&t, &c, "ccc"), 0);
	ck_assert_str_eq(a.conv, "bb");
	ck_assert_ptr_eq(rec_tree_find(&t, "bb"), &a);
	ck_assert_ptr_eq(rec_tree_find(&t, "a"), &b);
	ck_assert_ptr_eq(rec_tree_find(&t, "ccc"), &c);
	ck_assert_ptr_null(rec_tree_find(&t, "b"));
	ck_assert_ptr_null(rec_tree_find(&t, ""));
	/* A walk goes in id order. */
	const char *want[] = { "a", "bb", "ccc" };
	int i = 0;
	struct rec *r;
	RB_FOREACH(r, rec_tree, &t)
		ck_assert_str_eq(r->conv, want[i++]);
	ck_assert_int_eq(i, 3);
	RB_REMOVE(rec_tree, &t, &a);
	ck_assert_ptr_null(rec_tree_find(&t, "bb"));
	ck_assert_ptr_eq(rec_tree_find(&t, "ccc"), &c);
}
END_TEST

START_TEST(test_key_length)
{
	struct rec_tree t = RB_INITIALIZER(&t);
	struct rec full = { .before = 1, .after = 2 }, over = { .before = 3, .after = 4 };
	ck_assert_int_eq(rec_tree_insert(&t, &full, "1234567"), 0);
	ck_assert_ptr_eq(rec_tree_find(&t, "1234567"), &full);
	ck_assert_int_eq(full.after, 2);
	/* One byte more than the field holds: refused, the record untouched,
	 * and a lookup finds nothing (not the record its prefix names). */
	ck_assert_int_eq(rec_tree_insert(&t, &over, "12345678"), -EINVAL);
	ck_assert_int_eq(over.before, 3);
	ck_assert_int_eq(over.after, 4);
	ck_assert_int_eq(over.conv[0], 0);
	ck_assert_ptr_null(rec_tree_find(&t, "12345678"));
	char longer[300];
	memset(longer, 'x', sizeof longer - 1);
	longer[sizeof longer - 1] = 0;
	ck_assert_ptr_null(rec_tree_find(&t, longer));
}
END_TEST

START_TEST(test_duplicate)
{
	struct rec_tree t = RB_INITIALIZER(&t);
	struct rec a = { 0 }, b = { 0 };
	ck_assert_int_eq(rec_tree_insert(&t, &a, "same"), 0);
	ck_assert_int_eq(rec_tree_insert(&t, &b, "same"), -EEXIST);
	ck_assert_ptr_eq(rec_tree_find(&t, "same"), &a);
	int n = 0;
	struct rec *r;
	RB_FOREACH(r, rec_tree, &t)
		n++;
	ck_assert_int_eq(n, 1);
}
END_TEST

START_TEST(test_new)
{
	struct rec_tree t = RB_INITIALIZER(&t);
	struct rec *r = rec_tree_new(&t, "abc");
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(r->conv, "abc");
	ck_assert_int_eq(r->before, 0); /* zeroed */
	ck_assert_ptr_eq(rec_tree_find(&t, "abc"), r);
	ck_assert_ptr_null(rec_tree_new(&t, "abc"));      /* there already */
	ck_assert_ptr_null(rec_tree_new(&t, "12345678")); /* too long: nothing left behind */
	int n = 0;
	struct rec *x, *next;
	RB_FOREACH_SAFE(x, rec_tree, &t, next) {
		RB_REMOVE(rec_tree, &t, x);
		free(x);
		n++;
	}
	ck_assert_int_eq(n, 1);
}
END_TEST

Suite *make_convtree_suite(void)
{
	Suite *s = suite_create("convtree");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_find_insert);
	tcase_add_test(tc, test_key_length);
	tcase_add_test(tc, test_duplicate);
	tcase_add_test(tc, test_new);
	suite_add_tcase(s, tc);
	return s;
}
