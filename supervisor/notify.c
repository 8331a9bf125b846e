/*
 * notify.c: sd_notify for a Type=notify unit (notify.h). libsystemd's
 * sd_notify() is a no-op without $NOTIFY_SOCKET, so agentd run by hand, by a
 * test or by another supervisor behaves as before.
 *
 * The environment is left as it is: workers inherit $NOTIFY_SOCKET, and the
 * unit's NotifyAccess=main makes systemd ignore anything but agentd's own
 * messages, so a worker (or a model command) cannot declare agentd ready or
 * keep its watchdog fed.
 */
#include "supervisor/notify.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

static int64_t interval_ms; /* 0: no watchdog */
static int64_t next_ping;

static void watchdog_init(void)
{
	uint64_t usec = 0;
	/* > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is ours. */
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		/* Half the timeout, as sd_watchdog_enabled(3) advises: one late
		 * tick must not cost a restart. At least 1 ms. */
		interval_ms = (int64_t)(usec / 2000);
		if (interval_ms < 1)
			interval_ms = 1;
		log_info("systemd watchdog: %llu ms; pinging every %lld ms", (unsigned long long)(usec / 1000),
			 (long long)interval_ms);
	}
}

void notify_ready(const char *sock_path)
{
	watchdog_init();
	int r = sd_notifyf(0, "READY=1\nSTATUS=listening on %s", sock_path);
	if (r < 0)
		log_warn("sd_notify(READY=1): %s", strerror(-r));
	next_ping = 0; /* the first ping goes with the next tick */
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=stopping: workers hibernate");
}

int64_t notify_deadline(int64_t d)
{
	if (!interval_ms)
		return d;
	int64_t due = next_ping ? next_ping : 1; /* 1: at once */
	return !d || due < d ? due : d;
}

void notify_tick(int64_t now)
{
	if (!interval_ms || now < next_ping)
		return;
	sd_notify(0, "WATCHDOG=1");
	next_ping = now + interval_ms;
}
