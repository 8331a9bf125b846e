/*
 * cron.h: 5-field cron expressions (minute hour day-of-month month
 * day-of-week), evaluated in UTC, for scheduled wakeups.
 *
 * Each field is `*`, a number, a range `a-b`, any of those with a step
 * (`*` then `/n`, `a-b/n`, `a/n` = a to the field's last value), or a
 * comma-separated list of them. Ranges: minute 0-59, hour 0-23, day of
 * month 1-31, month 1-12, day of week 0-7 (0 and 7 are Sunday). Numbers
 * only (no names, no `@daily`, no `L`/`W`/`#`). As in Vixie cron, when
 * both the day of month and the day of week are restricted (neither is
 * `*`), a day matches when either does.
 */
#ifndef AGENTD_COMMON_CRON_H
#define AGENTD_COMMON_CRON_H

#include <stddef.h>
#include <stdint.h>

#define CRON_SPEC_MAX 256 /* bytes of a spec cron_parse accepts */

struct cron {
	uint64_t minute; /* bit m: minute m matches */
	uint32_t hour, dom;
	uint16_t month;  /* bits 1..12 */
	uint8_t dow;     /* bits 0..6 (7 is folded into 0) */
	int dom_any, dow_any; /* the field was `*` (or `*` with step 1) */
};

/* Parse spec into c. 0, or -EINVAL with why (a NUL-terminated reason
 * naming the field, at most errlen bytes; why may be NULL). */
int cron_parse(const char *spec, struct cron *c, char *why, size_t errlen);

/* The first matching minute strictly after after_ms (unix ms, UTC), as
 * unix ms (a whole minute). -ERANGE when none comes within 8 years (a
 * spec such as `0 0 30 2 *` never matches). */
int64_t cron_next(const struct cron *c, int64_t after_ms);

#endif
