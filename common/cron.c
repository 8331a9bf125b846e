/* cron.c: 5-field cron expressions in UTC (see cron.h). */
#include "common/cron.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
	const char *name;
	int lo, hi;
} fields[5] = { { "minute", 0, 59 }, { "hour", 0, 23 }, { "day of month", 1, 31 }, { "month", 1, 12 },
		{ "day of week", 0, 7 } };

static int why_set(char *why, size_t n, const char *fmt, const char *field, const char *item)
{
	if (why && n)
		snprintf(why, n, fmt, field, item);
	return -EINVAL;
}

/* A decimal number of at most 2 digits at *p, advanced past it; -1 when none. */
static int num(const char **p)
{
	int v = 0, d = 0;
	while (**p >= '0' && **p <= '9' && d < 3) {
		v = v * 10 + (**p - '0');
		(*p)++;
		d++;
	}
	return d == 0 || d > 2 ? -1 : v;
}

/* One item of field f (item is NUL-terminated) into *bits; *any when it is
 * `*` or `*` with step 1. */
static int item_parse(int f, const char *item, uint64_t *bits, int *any, char *why, size_t n)
{
	const char *p = item, *name = fields[f].name;
	int lo = fields[f].lo, hi = fields[f].hi, a, b, step = 1, star = 0;
	if (*p == '*') {
		star = 1;
		a = lo, b = hi;
		p++;
	} else {
		if ((a = num(&p)) < 0)
			return why_set(why, n, "%s: '%s' is not a number, a range or *", name, item);
		b = a;
		if (*p == '-') {
			p++;
			if ((b = num(&p)) < 0)
				return why_set(why, n, "%s: '%s': a range needs a number after '-'", name, item);
		}
	}
	if (*p == '/') {
		p++;
		if ((step = num(&p)) <= 0)
			return why_set(why, n, "%s: '%s': a step is a number from 1", name, item);
		if (!star && b == a && item[strcspn(item, "-")] == 0)
			b = hi; /* a/n: from a to the last value */
	}
	if (*p)
		return why_set(why, n, "%s: '%s' is not a number, a range or *", name, item);
	if (a < lo || b > hi || a > hi || b < lo)
		return why_set(why, n, "%s: '%s' is out of range", name, item);
	if (a > b)
		return why_set(why, n, "%s: '%s': a range goes upwards", name, item);
	for (int v = a; v <= b; v += step)
		*bits |= (uint64_t)1 << v;
	if (star && step == 1)
		*any = 1;
	return 0;
}

/* Field f (a comma-separated list, NUL-terminated) into *bits. */
static int field_parse(int f, char *text, uint64_t *bits, int *any, char *why, size_t n)
{
	*bits = 0;
	*any = 0;
	char *save = NULL;
	if (!*text || text[strlen(text) - 1] == ',' || *text == ',' || strstr(text, ",,"))
		return why_set(why, n, "%s: '%s' has an empty item", fields[f].name, text);
	for (char *it = strtok_r(text, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
		int e = item_parse(f, it, bits, any, why, n);
		if (e)
			return e;
	}
	return 0;
}

int cron_parse(const char *spec, struct cron *c, char *why, size_t n)
{
	char buf[CRON_SPEC_MAX + 1];
	if (!spec || !c)
		return why_set(why, n, "%s%s", "no cron expression", "");
	size_t len = strlen(spec);
	if (len > CRON_SPEC_MAX)
		return why_set(why, n, "a cron expression is at most %s bytes%s", "256", "");
	memcpy(buf, spec, len + 1);
	char *f[5], *save = NULL, *tok = strtok_r(buf, " \t", &save);
	int nf = 0;
	for (; tok && nf < 5; tok = strtok_r(NULL, " \t", &save))
		f[nf++] = tok;
	if (nf != 5 || tok)
		return why_set(why, n, "'%s': a cron expression has 5 fields (minute hour day-of-month month day-of-week)%s",
			       spec, "");
	uint64_t bits[5];
	int any[5];
	for (int i = 0; i < 5; i++) {
		int e = field_parse(i, f[i], &bits[i], &any[i], why, n);
		if (e)
			return e;
	}
	memset(c, 0, sizeof *c);
	c->minute = bits[0];
	c->hour = (uint32_t)bits[1];
	c->dom = (uint32_t)bits[2];
	c->month = (uint16_t)bits[3];
	c->dow = (uint8_t)((bits[4] | (bits[4] >> 7)) & 0x7f); /* 7 is Sunday, as 0 */
	c->dom_any = any[2];
	c->dow_any = any[4];
	return 0;
}

static int day_matches(const struct cron *c, const struct tm *tm)
{
	int dom = (c->dom >> tm->tm_mday) & 1, dow = (c->dow >> tm->tm_wday) & 1;
	if (c->dom_any || c->dow_any)
		return dom && dow; /* the one that is * matches every day */
	return dom || dow;
}

int64_t cron_next(const struct cron *c, int64_t after_ms)
{
	time_t t = (time_t)(after_ms / 60000 + 1) * 60; /* the next whole minute */
	if (after_ms < 0)
		t = 0;
	time_t end = t + (time_t)8 * 366 * 86400;
	struct tm tm;
	while (t < end) {
		if (!gmtime_r(&t, &tm))
			return -ERANGE;
		if (!((c->month >> (tm.tm_mon + 1)) & 1)) {
			tm.tm_mon++, tm.tm_mday = 1, tm.tm_hour = 0, tm.tm_min = 0; /* the next month's start */
		} else if (!day_matches(c, &tm)) {
			tm.tm_mday++, tm.tm_hour = 0, tm.tm_min = 0;
		} else if (!((c->hour >> tm.tm_hour) & 1)) {
			tm.tm_hour++, tm.tm_min = 0;
		} else if (!((c->minute >> tm.tm_min) & 1)) {
			tm.tm_min++;
		} else {
			return (int64_t)t * 1000;
		}
		tm.tm_sec = 0;
		t = timegm(&tm); /* normalises the field carried over */
	}
	return -ERANGE;
}
