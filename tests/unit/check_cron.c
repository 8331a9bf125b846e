/* 5-field cron expressions (common/cron.c): what parses, the clear error
 * of what does not, and the next matching minute in UTC. */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/cron.h"
#include "tests/suites.h"

/* unix ms of a UTC time */
static int64_t utc(int y, int mo, int d, int h, int mi)
{
	struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi };
	return (int64_t)timegm(&tm) * 1000;
}

static int64_t next_of(const char *spec, int64_t after)
{
	struct cron c;
	char why[200];
	ck_assert_msg(cron_parse(spec, &c, why, sizeof why) == 0, "%s: %s", spec, why);
	return cron_next(&c, after);
}

START_TEST(every_minute)
{
	ck_assert_int_eq(next_of("* * * * *", utc(2026, 1, 1, 0, 0)), utc(2026, 1, 1, 0, 1));
	/* strictly after: a time inside a minute gives the next one */
	ck_assert_int_eq(next_of("* * * * *", utc(2026, 1, 1, 0, 0) + 59999), utc(2026, 1, 1, 0, 1));
}
END_TEST

START_TEST(lists_ranges_steps)
{
	int64_t t0 = utc(2026, 3, 10, 10, 7); /* a Tuesday */
	ck_assert_int_eq(next_of("*/15 * * * *", t0), utc(2026, 3, 10, 10, 15));
	ck_assert_int_eq(next_of("5,40 * * * *", t0), utc(2026, 3, 10, 10, 40));
	ck_assert_int_eq(next_of("0 9-17/4 * * *", t0), utc(2026, 3, 10, 13, 0));
	ck_assert_int_eq(next_of("30 2 * * *", t0), utc(2026, 3, 11, 2, 30));
	ck_assert_int_eq(next_of("10/20 * * * *", t0), utc(2026, 3, 10, 10, 10));
	ck_assert_int_eq(next_of("0 0 1 */3 *", t0), utc(2026, 4, 1, 0, 0));
	ck_assert_int_eq(next_of("0 0 1 1 *", t0), utc(2027, 1, 1, 0, 0)); /* over a year end */
}
END_TEST

START_TEST(day_of_week)
{
	int64_t t0 = utc(2026, 3, 10, 10, 7); /* Tuesday */
	ck_assert_int_eq(next_of("0 8 * * 1", t0), utc(2026, 3, 16, 8, 0)); /* Monday */
	ck_assert_int_eq(next_of("0 8 * * 0", t0), utc(2026, 3, 15, 8, 0)); /* Sunday */
	ck_assert_int_eq(next_of("0 8 * * 7", t0), utc(2026, 3, 15, 8, 0)); /* 7 is Sunday too */
	ck_assert_int_eq(next_of("0 8 * * 1-5", t0), utc(2026, 3, 11, 8, 0));
	/* both restricted: either matches (the 13th is a Friday, before Monday the 16th) */
	ck_assert_int_eq(next_of("0 0 13 * 1", t0), utc(2026, 3, 13, 0, 0));
	ck_assert_int_eq(next_of("0 0 20 * 1", t0), utc(2026, 3, 16, 0, 0));
}
END_TEST

START_TEST(leap_day_and_never)
{
	ck_assert_int_eq(next_of("0 0 29 2 *", utc(2026, 3, 1, 0, 0)), utc(2028, 2, 29, 0, 0));
	ck_assert_int_eq(next_of("0 0 30 2 *", utc(2026, 3, 1, 0, 0)), -ERANGE);
}
END_TEST

static void refused(const char *spec, const char *want)
{
	struct cron c;
	char why[200] = "";
	ck_assert_int_eq(cron_parse(spec, &c, why, sizeof why), -EINVAL);
	ck_assert_msg(strstr(why, want) != NULL, "%s: '%s' lacks '%s'", spec, why, want);
}

START_TEST(bad_specs)
{
	refused("* * * *", "5 fields");
	refused("* * * * * *", "5 fields");
	refused("", "5 fields");
	refused("60 * * * *", "minute: '60' is out of range");
	refused("* 24 * * *", "hour");
	refused("* * 0 * *", "day of month");
	refused("* * * 13 *", "month");
	refused("* * * * 8", "day of week");
	refused("5-1 * * * *", "upwards");
	refused("*/0 * * * *", "step");
	refused("a * * * *", "not a number");
	refused("1,,2 * * * *", "empty item");
	refused("1- * * * *", "after '-'");
	refused("100 * * * *", "not a number");
	ck_assert_int_eq(cron_parse("* * * * *", NULL, NULL, 0), -EINVAL);
}
END_TEST

Suite *make_cron_suite(void)
{
	Suite *s = suite_create("cron");
	TCase *tc = tcase_create("cron");
	tcase_add_test(tc, every_minute);
	tcase_add_test(tc, lists_ranges_steps);
	tcase_add_test(tc, day_of_week);
	tcase_add_test(tc, leap_day_and_never);
	tcase_add_test(tc, bad_specs);
	suite_add_tcase(s, tc);
	return s;
}
