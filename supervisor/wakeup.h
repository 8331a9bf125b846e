/*
 * wakeup.h: scheduled wakeups of conversations (the `schedule` op), fired
 * on time. As expiry.h's deadlines: a realtime timerfd (absolute,
 * CLOCK_REALTIME since due times are wall-clock; TFD_TIMER_CANCEL_ON_SET
 * wakes it when the clock is set) is armed to the earliest due schedule in
 * the store; when it fires, every due schedule is fired in batches of one
 * transaction each: its `scheduled` event appended, the row dropped (once)
 * or moved to its cron spec's next minute after now (a repeating one that
 * missed several fires once), then its conversation is woken as a send's
 * is. So a schedule fires once across kills and restarts; on a store that
 * several nodes share, the claim skips the conversations another
 * transaction holds and a row moved or dropped meanwhile is left alone, so
 * it fires once across nodes too, and each node looks at the store at
 * least every WAKEUP_POLL_MS for the rows other nodes wrote.
 */
#ifndef AGENTD_WAKEUP_H
#define AGENTD_WAKEUP_H

#include "store/store.h"

/* A wake fired more than this after its due time, or due before this
 * process started (missed while agentd was down), is marked late. */
#define WAKEUP_LATE_MS 60000

/* Create the timerfd and register it with the loop. 0 or -errno. */
int wakeup_open(store *st);
void wakeup_close(void);
/* Re-arm the timer to the earliest due schedule (after a commit that
 * added, moved or removed one). */
void wakeup_rearm(void);
/* Fire every schedule that is due; how many fired. */
int wakeup_fire(void);

#endif
