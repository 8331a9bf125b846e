/* ipc.c: the supervisor <-> worker framing (see ipc.h). */
#include "ipc/ipc.h"
#include "common/mp.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const names[] = {
	[IPC_WAKE] = "wake", [IPC_STOP] = "stop", [IPC_COMPACT] = "compact", [IPC_READY] = "ready",
	[IPC_STATE] = "state", [IPC_DELTA] = "delta",
	[IPC_COMPACTED] = "compacted", [IPC_CHILD] = "child", [IPC_WOKEN] = "woken",
	[IPC_WRITE] = "write", [IPC_GRANT] = "grant", [IPC_WRITTEN] = "written", [IPC_GO] = "go",
	[IPC_MODEL] = "model",
};
#define NTYPES ((int)(sizeof names / sizeof names[0]))

const char *ipc_type_name(int type)
{
	return type > 0 && type < NTYPES ? names[type] : NULL;
}

int ipc_pair(int fds[2])
{
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
		return -errno;
	return 0;
}

static void key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
}

int ipc_send(int fd, const struct ipc_msg *m)
{
	const char *name = ipc_type_name(m->type);
	if (!name)
		return -EINVAL;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 5);
	key(&pk, "t");
	key(&pk, name);
	key(&pk, "seq");
	msgpack_pack_uint64(&pk, m->seq);
	key(&pk, "num");
	msgpack_pack_int64(&pk, m->num);
	key(&pk, "ok");
	msgpack_pack_int(&pk, m->ok);
	key(&pk, "text");
	msgpack_pack_str_with_body(&pk, m->text ? m->text : "", m->text ? m->text_len : 0);
	int rc = 0;
	if (sb.size > IPC_MAX)
		rc = -EMSGSIZE;
	else if (send(fd, sb.data, sb.size, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		rc = -errno;
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

static int streq(const char *p, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(p, s, n) == 0;
}

/* Unknown keys are skipped so either side may add some. */
int ipc_decode(const char *buf, size_t len, struct ipc_msg *m)
{
	struct mp r;
	uint32_t n;
	memset(m, 0, sizeof *m);
	mp_init(&r, buf, len);
	if (mp_map(&r, &n))
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		const char *k, *s;
		size_t kl, sl;
		int64_t v;
		if (mp_str(&r, &k, &kl))
			return -EPROTO;
		if (streq(k, kl, "t")) {
			if (mp_str(&r, &s, &sl))
				return -EPROTO;
			for (int t = 1; t < NTYPES; t++)
				if (streq(s, sl, names[t]))
					m->type = t;
		} else if (streq(k, kl, "seq")) {
			if (mp_uint(&r, &m->seq))
				return -EPROTO;
		} else if (streq(k, kl, "num")) {
			if (mp_int(&r, &m->num))
				return -EPROTO;
		} else if (streq(k, kl, "ok")) {
			if (mp_int(&r, &v))
				return -EPROTO;
			m->ok = v != 0;
		} else if (streq(k, kl, "text")) {
			if (mp_str(&r, &m->text, &m->text_len))
				return -EPROTO;
		} else if (mp_skip(&r, NULL, NULL)) {
			return -EPROTO;
		}
	}
	if (r.p != r.end || m->type == 0)
		return -EPROTO;
	return 0;
}

int ipc_recv(int fd, struct ipc_msg *m, char *buf)
{
	struct iovec iov = { buf, IPC_MAX };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0)
		return 0;
	if (mh.msg_flags & MSG_TRUNC)
		return -EPROTO;
	int e = ipc_decode(buf, (size_t)n, m);
	return e < 0 ? e : 1;
}

int ipc_stdio_guard(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR); /* the lowest free number: fd */
		if (n < 0)
			return -errno;
		if (n != fd) {
			close(n);
			return -EBADF;
		}
	}
	return 0;
}
