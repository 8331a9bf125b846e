/* users.c: the users file and password checks (see users.h). */
#include "web/users.h"
#include "web/auth.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct user {
	char *name, *hash;
	enum users_role role;
};

static struct user *users;
static size_t nusers;

static const char *const ROLES[] = { "none", "viewer", "approver", "operator" };

const char *users_role_name(enum users_role r)
{
	return r >= USERS_NONE && r <= USERS_OPERATOR ? ROLES[r] : "none";
}

static enum users_role role_of(const char *s)
{
	for (int r = USERS_VIEWER; r <= USERS_OPERATOR; r++)
		if (!strcmp(s, ROLES[r]))
			return (enum users_role)r;
	return USERS_NONE;
}

void users_free(void)
{
	for (size_t i = 0; i < nusers; i++) {
		free(users[i].name);
		free(users[i].hash);
	}
	free(users);
	users = NULL;
	nusers = 0;
}

/* One line's three fields into u; 0, or -EINVAL with msg set. */
static int parse_line(char *line, const char *path, int lineno, struct user *u, char *msg, size_t msglen)
{
	char *save, *name = strtok_r(line, " \t", &save), *role = strtok_r(NULL, " \t", &save);
	char *hash = strtok_r(NULL, " \t", &save), *extra = strtok_r(NULL, " \t", &save);
	if (!name || !role || !hash || extra) {
		snprintf(msg, msglen, "%s line %d: expected NAME ROLE HASH", path, lineno);
		return -EINVAL;
	}
	if (!auth_name_ok(name)) {
		snprintf(msg, msglen, "%s line %d: the name must be at most %d bytes of printable text", path, lineno,
			 AUTH_NAME_MAX);
		return -EINVAL;
	}
	if (!(u->role = role_of(role))) {
		snprintf(msg, msglen, "%s line %d: unknown role '%.40s' (expected viewer, approver or operator)", path,
			 lineno, role);
		return -EINVAL;
	}
	/* crypto_pwhash_str_needs_rehash answers -1 for a string it cannot
	 * parse as argon2id: the check that the hash is one at all. */
	if (strncmp(hash, crypto_pwhash_argon2id_STRPREFIX, strlen(crypto_pwhash_argon2id_STRPREFIX)) ||
	    strlen(hash) >= crypto_pwhash_STRBYTES ||
	    crypto_pwhash_str_needs_rehash(hash, crypto_pwhash_OPSLIMIT_MIN, crypto_pwhash_MEMLIMIT_MIN) < 0) {
		snprintf(msg, msglen, "%s line %d: the hash is not an argon2id hash (make one with agentd-web --hash-password)",
			 path, lineno);
		return -EINVAL;
	}
	for (size_t i = 0; i < nusers; i++)
		if (!strcmp(users[i].name, name)) {
			snprintf(msg, msglen, "%s line %d: the name '%s' is given twice", path, lineno, name);
			return -EINVAL;
		}
	u->name = strdup(name);
	u->hash = strdup(hash);
	if (!u->name || !u->hash) {
		free(u->name);
		free(u->hash);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int users_load(const char *path, char *msg, size_t msglen)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0, e = 0;
	if (!f) {
		e = errno;
		snprintf(msg, msglen, "cannot read the users file %s: %s", path, strerror(e));
		return -e;
	}
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		line[strcspn(line, "\r\n")] = 0;
		char *s = line + strspn(line, " \t");
		if (!*s || *s == '#')
			continue;
		struct user *grown = realloc(users, (nusers + 1) * sizeof *users);
		if (!grown) {
			e = -ENOMEM;
			snprintf(msg, msglen, "out of memory");
			goto fail;
		}
		users = grown;
		if ((e = parse_line(s, path, lineno, &users[nusers], msg, msglen)))
			goto fail;
		nusers++;
	}
	if (ferror(f)) {
		e = -errno;
		snprintf(msg, msglen, "cannot read the users file %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!nusers) {
		e = -EINVAL;
		snprintf(msg, msglen, "the users file %s names nobody (lines are NAME ROLE HASH)", path);
		goto fail;
	}
	free(line);
	fclose(f);
	return 0;
fail:
	free(line);
	fclose(f);
	users_free();
	return e;
}

int users_enabled(void)
{
	return nusers > 0;
}

enum users_role users_check(const char *name, const char *password)
{
	const struct user *u = NULL;
	for (size_t i = 0; i < nusers; i++)
		if (!strcmp(users[i].name, name))
			u = &users[i];
	if (!nusers)
		return USERS_NONE;
	/* One check at a time: each takes the hash's 64 MiB, and every
	 * connection has its own thread (http.c), so 64 logins at once would
	 * take 4 GiB. A login waits for the one before it instead. */
	static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&one_at_a_time);
	int ok = crypto_pwhash_str_verify(u ? u->hash : users[0].hash, password, strlen(password)) == 0;
	pthread_mutex_unlock(&one_at_a_time);
	return u && ok ? u->role : USERS_NONE;
}

int users_hash(const char *password, char *out, size_t n)
{
	if (n < crypto_pwhash_STRBYTES)
		return -EINVAL;
	if (crypto_pwhash_str_alg(out, password, strlen(password), crypto_pwhash_OPSLIMIT_INTERACTIVE,
				  crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13))
		return -ENOMEM;
	return 0;
}
