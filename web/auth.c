/* auth.c: the token, login links and sessions (see auth.h). */
#include "web/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN_MAX 256
#define LINKS_MAX 16

struct session {
	char id[AUTH_ID_LEN + 1];
	char csrf[AUTH_ID_LEN + 1];
	char name[AUTH_NAME_MAX + 1];
	int role;
	long long created, used;
};

struct link {
	char nonce[AUTH_ID_LEN + 1];
	long long created;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char token[TOKEN_MAX + 1];
static size_t token_len;
static struct session sessions[AUTH_SESSIONS_MAX];
static struct link links[LINKS_MAX];

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void random_hex(char *out, size_t digits)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[TOKEN_MAX / 2];
	size_t n = digits / 2, got = 0;
	while (got < n) {
		ssize_t g = getrandom(r + got, n - got, 0);
		if (g > 0)
			got += (size_t)g;
	}
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[r[i] >> 4];
		out[2 * i + 1] = hex[r[i] & 15];
	}
	out[digits] = 0;
}

/* Constant time: how long a compare takes says nothing of where it failed. */
static int same(const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char d = alen != blen;
	for (size_t i = 0; i < alen && i < blen; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

static int token_valid(const char *t, size_t n)
{
	if (n < 16 || n > TOKEN_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (t[i] <= ' ' || t[i] > '~')
			return 0;
	return 1;
}

int auth_token_set(const char *t)
{
	size_t n = strlen(t);
	if (!token_valid(t, n))
		return -EINVAL;
	memcpy(token, t, n + 1);
	token_len = n;
	return 0;
}

static int create_token_file(const char *path, char *msg, size_t msglen)
{
	char t[AUTH_ID_LEN + 2];
	random_hex(t, AUTH_ID_LEN);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		snprintf(msg, msglen, "cannot create the token file %s: %s", path, strerror(e));
		return -e;
	}
	strcat(t, "\n");
	ssize_t w = write(fd, t, strlen(t));
	int e = w == (ssize_t)strlen(t) ? 0 : (w < 0 ? errno : EIO);
	if (!e && fsync(fd) < 0)
		e = errno;
	close(fd);
	if (e) {
		unlink(path);
		snprintf(msg, msglen, "cannot write the token file %s: %s", path, strerror(e));
		return -e;
	}
	t[AUTH_ID_LEN] = 0;
	return auth_token_set(t);
}

int auth_token_load(const char *path, int create, int *created, char *msg, size_t msglen)
{
	char buf[TOKEN_MAX + 2];
	struct stat st;
	*created = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create) {
		int e = create_token_file(path, msg, msglen);
		*created = e == 0;
		return e;
	}
	if (fd < 0) {
		int e = errno;
		snprintf(msg, msglen, "cannot open the token file %s: %s", path,
			 e == ELOOP ? "it is a symbolic link" : strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(msg, msglen, "the token file %s is not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		close(fd);
		snprintf(msg, msglen, "the token file %s is open to others (mode %03o): chmod 600 it", path,
			 (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0) {
		int e = errno;
		snprintf(msg, msglen, "cannot read the token file %s: %s", path, strerror(e));
		return -e;
	}
	buf[n] = 0;
	buf[strcspn(buf, "\r\n")] = 0;
	if (auth_token_set(buf)) {
		snprintf(msg, msglen, "the token file %s must hold one line of 16-%d printable characters", path,
			 TOKEN_MAX);
		return -EINVAL;
	}
	return 0;
}

int auth_token_ok(const char *given, size_t len)
{
	return token_len && same(given, len, token, token_len);
}

int auth_link_new(char *out)
{
	pthread_mutex_lock(&mu);
	struct link *l = &links[0];
	for (int i = 0; i < LINKS_MAX; i++)
		if (links[i].created < l->created || !links[i].nonce[0]) {
			l = &links[i];
			if (!l->nonce[0])
				break;
		}
	random_hex(l->nonce, AUTH_ID_LEN);
	l->created = mono_ms();
	memcpy(out, l->nonce, AUTH_ID_LEN + 1);
	pthread_mutex_unlock(&mu);
	return 0;
}

int auth_link_use(const char *nonce)
{
	int ok = 0;
	size_t n = strlen(nonce);
	long long now = mono_ms();
	pthread_mutex_lock(&mu);
	for (int i = 0; i < LINKS_MAX; i++) {
		struct link *l = &links[i];
		if (l->nonce[0] && same(nonce, n, l->nonce, AUTH_ID_LEN)) {
			ok = now - l->created <= AUTH_LINK_TTL_MS;
			memset(l, 0, sizeof *l); /* used up, or expired: gone either way */
		}
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

int auth_name_ok(const char *name)
{
	if (strlen(name) > AUTH_NAME_MAX)
		return 0;
	for (const unsigned char *s = (const unsigned char *)name; *s; s++)
		if (*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

void auth_session_new(const char *name, int role, char *id, char *csrf)
{
	long long now = mono_ms();
	pthread_mutex_lock(&mu);
	struct session *s = &sessions[0];
	for (int i = 0; i < AUTH_SESSIONS_MAX; i++) {
		struct session *x = &sessions[i];
		if (!x->id[0] || now - x->created > AUTH_SESSION_TTL_MS) {
			s = x;
			break;
		}
		if (x->used < s->used)
			s = x;
	}
	random_hex(s->id, AUTH_ID_LEN);
	random_hex(s->csrf, AUTH_ID_LEN);
	snprintf(s->name, sizeof s->name, "%s", auth_name_ok(name) ? name : "");
	s->role = role;
	s->created = s->used = now;
	memcpy(id, s->id, AUTH_ID_LEN + 1);
	memcpy(csrf, s->csrf, AUTH_ID_LEN + 1);
	pthread_mutex_unlock(&mu);
}

/* With mu held. */
static struct session *find(const char *id)
{
	size_t n = strlen(id);
	long long now = mono_ms();
	if (n != AUTH_ID_LEN)
		return NULL;
	for (int i = 0; i < AUTH_SESSIONS_MAX; i++) {
		struct session *s = &sessions[i];
		if (s->id[0] && same(id, n, s->id, AUTH_ID_LEN)) {
			if (now - s->created > AUTH_SESSION_TTL_MS) {
				memset(s, 0, sizeof *s);
				return NULL;
			}
			s->used = now;
			return s;
		}
	}
	return NULL;
}

int auth_session_get(const char *id, char *csrf, char *name, size_t namelen, int *role)
{
	pthread_mutex_lock(&mu);
	struct session *s = find(id);
	if (s && csrf)
		memcpy(csrf, s->csrf, AUTH_ID_LEN + 1);
	if (s && name)
		snprintf(name, namelen, "%s", s->name);
	if (s && role)
		*role = s->role;
	pthread_mutex_unlock(&mu);
	return s != NULL;
}

int auth_session_name(const char *id, const char *name)
{
	if (!auth_name_ok(name))
		return -EINVAL;
	pthread_mutex_lock(&mu);
	struct session *s = find(id);
	if (s)
		snprintf(s->name, sizeof s->name, "%s", name);
	pthread_mutex_unlock(&mu);
	return s ? 0 : -ENOENT;
}

void auth_session_end(const char *id)
{
	pthread_mutex_lock(&mu);
	struct session *s = find(id);
	if (s)
		memset(s, 0, sizeof *s);
	pthread_mutex_unlock(&mu);
}
