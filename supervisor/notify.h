/*
 * notify.h: agentd's side of the systemd service protocol (sd_notify(3)):
 * readiness, the watchdog, and stopping, for a `Type=notify` unit
 * (packaging/agentd.service). Outside systemd ($NOTIFY_SOCKET unset) every
 * function does nothing.
 *
 * Rules: the loop calls notify_tick()
 * from its tick and arms the tick no later than notify_deadline(), so a loop
 * that stops turning stops the pings and systemd restarts agentd.
 */
#ifndef AGENTD_SUPERVISOR_NOTIFY_H
#define AGENTD_SUPERVISOR_NOTIFY_H

#include <stdint.h>

/* READY=1 with a STATUS naming the socket: call once, when the socket
 * listens. Also reads $WATCHDOG_USEC (when $WATCHDOG_PID is unset or ours):
 * the watchdog is pinged at half of it from then on. */
void notify_ready(const char *sock_path);
/* STOPPING=1: shutdown has begun. */
void notify_stopping(void);
/* The earlier of deadline d and when the next watchdog ping is due
 * (CLOCK_MONOTONIC ms; 0 is "none", for d and for the result). */
int64_t notify_deadline(int64_t d);
/* Send WATCHDOG=1 when it is due at now (CLOCK_MONOTONIC ms). */
void notify_tick(int64_t now);

#endif
