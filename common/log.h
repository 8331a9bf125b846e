/*
 * log.h: one line per event on stderr, shared by every program: UTC time,
 * program, pid, level, message. A control character in a message is escaped,
 * so text quoted from outside (a model's stderr) cannot end the line or forge
 * the next one; each line is one write(2), so lines of several processes
 * writing to one stderr never interleave.
 */
#ifndef AGENTD_LOG_H
#define AGENTD_LOG_H

enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* prog is kept, not copied. Messages above level are dropped. */
void log_init(const char *prog, int level);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
