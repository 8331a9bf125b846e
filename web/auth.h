/*
 * auth.h: who may use agentd-web: the token, one-time login links, sessions.
 *
 * The token is the one secret: a 0600 file (created on first start with 256
 * random bits) or given in the environment. A browser proves it once, with a
 * one-time login link printed by agentd-web or by typing the token into the
 * login form, and gets a session: a random id in an HttpOnly SameSite=Strict
 * cookie, and a CSRF token the page sends back in a header on every POST.
 * Programs (Prometheus) send `Authorization: Bearer TOKEN` instead.
 *
 * State is in this process only (a restart logs everyone out) and guarded by
 * one mutex: every function may be called from any connection thread.
 */
#ifndef AGENTD_WEB_AUTH_H
#define AGENTD_WEB_AUTH_H

#include <stddef.h>

#define AUTH_ID_LEN 64      /* hex digits of a session id, CSRF token, login nonce */
#define AUTH_NAME_MAX 100   /* bytes of a user's name (resolve's by allows 128) */
#define AUTH_SESSIONS_MAX 256
#define AUTH_LINK_TTL_MS (10 * 60 * 1000)
#define AUTH_SESSION_TTL_MS (7LL * 24 * 3600 * 1000)

/* Read the token from path, or create the file (mode 0600, O_EXCL, no
 * symlink followed) with a new token when create is set and it does not
 * exist. A file others may read or write, not a regular file, or holding
 * fewer than 16 characters (or any outside printable ASCII) is refused.
 * Returns 0 (*created says whether it was made) or -errno with msg set. */
int auth_token_load(const char *path, int create, int *created, char *msg, size_t msglen);
/* Use token (16-256 printable ASCII bytes, no spaces) instead of a file.
 * Returns 0 or -EINVAL. */
int auth_token_set(const char *token);

/* 1 when given equals the token (constant time), else 0. */
int auth_token_ok(const char *given, size_t len);

/* A new one-time login nonce into out (AUTH_ID_LEN + 1 bytes), usable once
 * within AUTH_LINK_TTL_MS. Returns 0 or -ENOMEM (too many outstanding: the
 * oldest is dropped instead, so this never fails in practice). */
int auth_link_new(char *out);
/* 1 when nonce is an unused, unexpired link (it is used up now), else 0. */
int auth_link_use(const char *nonce);

/* A new session for a user named name ("" when not given) with role (a
 * users.h role: what the session may do). id and csrf get AUTH_ID_LEN hex
 * digits each (buffers of AUTH_ID_LEN + 1). At AUTH_SESSIONS_MAX the least
 * recently used session is dropped. */
void auth_session_new(const char *name, int role, char *id, char *csrf);
/* Look a session up by its cookie value: 1 and its csrf token, name and
 * role copied out (any may be NULL), 0 when unknown or expired. */
int auth_session_get(const char *id, char *csrf, char *name, size_t namelen, int *role);
/* Set a session's name. Returns 0, -ENOENT, or -EINVAL for a bad name. */
int auth_session_name(const char *id, const char *name);
void auth_session_end(const char *id);

/* 1 when name is acceptable: at most AUTH_NAME_MAX bytes, no control
 * characters (it goes into the audit trail and onto pages). */
int auth_name_ok(const char *name);

#endif
