#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "agentd";
static int log_level = LOG_INFO;

void log_init(const char *prog, int level)
{
	log_prog = prog;
	log_level = level;
}

void log_msg(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	if (level > log_level)
		return;
	char buf[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_prog,
			 (int)getpid(), names[level]);
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	if (m >= (int)sizeof msg)
		m = sizeof msg - 1;
	/* One line per event: a control character in the message (a model's
	 * stderr quoted in it, say) is escaped, so no text can end the line
	 * or forge the next one. */
	for (int i = 0; i < m && n > 0 && n < (int)sizeof buf - 5; i++) {
		unsigned char c = (unsigned char)msg[i];
		if (c == '\n')
			n += snprintf(buf + n, sizeof buf - (size_t)n, "\\n");
		else if (c < 0x20 && c != '\t')
			n += snprintf(buf + n, sizeof buf - (size_t)n, "\\x%02x", c);
		else if (c == 0x7f)
			n += snprintf(buf + n, sizeof buf - (size_t)n, "\\x7f");
		else
			buf[n++] = (char)c;
	}
	if (n >= (int)sizeof buf)
		n = sizeof buf - 1;
	buf[n++] = '\n';
	/* One write per line so lines of several processes do not interleave. */
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}
