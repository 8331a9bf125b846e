/*
 * users.h: per-person accounts for agentd-web (docs/web.md, "Accounts"):
 * the users file given by --users, one `NAME ROLE HASH` a line, HASH from
 * libsodium's crypto_pwhash_str (argon2id). A role is what a person may do:
 * a viewer reads, an approver also answers approvals, an operator also acts
 * on conversations.
 *
 * Caveats: users_load runs once, before serving (after sodium_init); the
 * table is read-only from then on, so users_check may be called from any
 * connection thread without a lock.
 */
#ifndef AGENTD_WEB_USERS_H
#define AGENTD_WEB_USERS_H

#include <stddef.h>

enum users_role {
	USERS_NONE = 0,
	USERS_VIEWER = 1,   /* reads only */
	USERS_APPROVER = 2, /* also resolve and settle */
	USERS_OPERATOR = 3, /* also send, cancel, resume, fork, end */
};

/* Load the users file at path. Returns 0, or -errno / -EINVAL with msg
 * naming the file and the line: unreadable, a line that is not three
 * fields, an unknown role, a name not acceptable (auth_name_ok), a hash
 * that is not an argon2id crypto_pwhash_str string, a name given twice, or
 * no user at all. */
int users_load(const char *path, char *msg, size_t msglen);
/* 1 when a users file is loaded. */
int users_enabled(void);
/* The role of name when password is its password, else USERS_NONE. An
 * unknown name costs a verification too, so timing does not tell names. */
enum users_role users_check(const char *name, const char *password);
/* "viewer", "approver", "operator" ("none" for USERS_NONE). */
const char *users_role_name(enum users_role r);
/* Hash password (crypto_pwhash_str, argon2id, interactive limits) into out
 * (crypto_pwhash_STRBYTES bytes). Returns 0 or -ENOMEM. */
int users_hash(const char *password, char *out, size_t n);
/* Free the table. */
void users_free(void);

#endif
