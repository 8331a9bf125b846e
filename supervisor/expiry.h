/*
 * expiry.h: durable deadlines of human tool calls, fired on time. A realtime
 * timerfd (absolute, CLOCK_REALTIME since deadlines are wall-clock;
 * TFD_TIMER_CANCEL_ON_SET wakes it when the clock is set) is armed to the
 * earliest deadline in the store; when it fires, every call past its
 * deadline is settled by its tool's on_expiry (conv_expire: `expired`, or
 * denied or approved by "expiry") with its resolution event, in batches of
 * one transaction each, and its conversation is woken.
 */
#ifndef AGENTD_EXPIRY_H
#define AGENTD_EXPIRY_H

#include "common/config.h"
#include "store/store.h"

/* Create the timerfd and register it with the loop; cfg (kept: it must
 * outlive the module) gives each human tool's on_expiry. 0 or -errno. */
int expiry_open(store *st, const struct config *cfg);
void expiry_close(void);
/* Re-arm the timer to the earliest deadline (after a commit that may have
 * scheduled one). */
void expiry_rearm(void);
/* Fire every deadline that has passed; how many fired. */
int expiry_fire(void);
/* Give every expiry warning whose time has passed (conv_expiry_warn), in
 * the same timer's wake-ups, after the deadlines fire (a call that expires
 * meanwhile gets no warning); how many were given. */
int expiry_warn_fire(void);

#endif
