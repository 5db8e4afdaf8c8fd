/* virtio-vsock's host side (devices/vsock_int.h): the listening socket,
 * host clients' CONNECT lines, the host ports they get, socket events and
 * the deadlines of handshakes and closes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/vsock_int.h"

int vsock_parse_connect_line(const char *s, size_t n, uint32_t *port)
{
	static const char verb[] = "CONNECT ";
	const size_t vlen = sizeof(verb) - 1;
	size_t scan = n < VSOCK_LINE_MAX ? n : VSOCK_LINE_MAX, end, i;
	const char *nl = memchr(s, '\n', scan);
	uint64_t val = 0;

	/* Refuse what cannot become a valid line without waiting for more. */
	if (memcmp(s, verb, scan < vlen ? scan : vlen))
		return -EINVAL;
	end = nl ? (size_t)(nl - s) : scan;
	if (end > vlen && s[end - 1] == '\r') /* before the newline, or last so far */
		end--;
	for (i = vlen; i < end; i++)
		if (s[i] < '0' || s[i] > '9' || i - vlen >= 10)
			return -EINVAL;
	if (!nl)
		return scan >= VSOCK_LINE_MAX ? -EINVAL : -EAGAIN;
	if (end <= vlen)
		return -EINVAL;
	for (i = vlen; i < end; i++)
		val = val * 10 + (uint64_t)(s[i] - '0');
	if (val >= UINT32_MAX) /* VMADDR_PORT_ANY is not a port */
		return -EINVAL;
	*port = (uint32_t)val;
	return (int)(nl - s) + 1;
}

static uint32_t alloc_host_port(struct virtio_vsock *v, uint32_t peer)
{
	for (uint32_t tries = 0; tries <= v->opts.max_conns; tries++) {
		uint32_t p = v->next_host_port++;
		if (v->next_host_port < HOST_PORT_FIRST || v->next_host_port == UINT32_MAX)
			v->next_host_port = HOST_PORT_FIRST;
		if (!vsock_conn_find(v, peer, p))
			return p;
	}
	return 0;
}

/* Reads the client's CONNECT line, peeking so that bytes after it stay in
 * the socket for the guest. */
static void host_line(struct virtio_vsock *v, struct vsock_conn *c)
{
	char line[VSOCK_LINE_MAX];
	ssize_t n = recv(c->fd, line, sizeof(line), MSG_PEEK | MSG_DONTWAIT);
	uint32_t port = 0;
	int r;

	if (n < 0 && vsock_again())
		return;
	r = n > 0 ? vsock_parse_connect_line(line, (size_t)n, &port) : -EINVAL;
	if (r == -EAGAIN && !c->rdhup)
		return;
	if (r < 0 || recv(c->fd, line, (size_t)r, MSG_DONTWAIT) != r ||
	    !(c->local_port = alloc_host_port(v, port))) {
		v->stats.bad_lines++;
		vsock_conn_free(v, c, false);
		return;
	}
	c->peer_port = port;
	c->state = C_HOST_REQUEST;
	c->need_request = true;
	c->readable = false;
	c->deadline = mono_ms() + v->opts.handshake_ms;
}

static void listen_arm(struct virtio_vsock *v, bool on)
{
	struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.u64 = TAG_LISTEN};

	epoll_ctl(v->epoll_fd, EPOLL_CTL_MOD, v->listen_fd, &ev);
}

void vsock_host_accept(struct virtio_vsock *v)
{
	for (int i = 0; i < ACCEPT_BUDGET; i++) {
		int fd = accept4(v->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct vsock_conn *c;
		if (fd < 0 && (vsock_again() || errno == ECONNABORTED))
			return;
		if (fd < 0) { /* out of descriptors: stop listening a moment, do not spin */
			log_once(LOG_KIND, 2, "virtio-vsock: accept: %s (logged once)", strerror(errno));
			listen_arm(v, false);
			v->listen_paused_until = mono_ms() + 100;
			return;
		}
		if (!(c = vsock_conn_new(v, fd))) {
			close(fd);
			v->stats.refused++;
			continue;
		}
		c->state = C_HOST_LINE;
		c->deadline = mono_ms() + v->opts.handshake_ms;
		v->stats.host_connects++;
	}
	v->more_work = true;
}

void vsock_conn_event(struct virtio_vsock *v, struct vsock_conn *c, uint32_t ev)
{
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
		c->readable = true;
	if (ev & (EPOLLRDHUP | EPOLLHUP))
		c->rdhup = true;
	if (ev & EPOLLHUP) {
		c->hup = true;
		c->buf_len = 0; /* nobody will read these bytes any more */
	}
	if (ev & EPOLLOUT)
		c->writable = true;
	if (c->state == C_HOST_LINE) {
		host_line(v, c);
		return;
	}
	if (ev & EPOLLERR) {
		vsock_conn_free(v, c, true);
		return;
	}
	if (c->writable && c->buf_len)
		vsock_conn_flush(v, c);
	else if (c->hup)
		vsock_conn_settle(v, c);
}

/* Expires handshakes and closes; returns ms until the next deadline, or -1. */
int vsock_check_deadlines(struct virtio_vsock *v)
{
	uint64_t now = mono_ms(), next = UINT64_MAX;

	if (v->listen_paused_until && v->listen_paused_until <= now) {
		v->listen_paused_until = 0;
		listen_arm(v, true);
	}
	if (v->listen_paused_until)
		next = v->listen_paused_until;
	for (uint32_t s = 0; s < v->nslots; s++) {
		struct vsock_conn *c = v->conns[s];
		if (!c || !c->deadline)
			continue;
		if (c->deadline <= now) {
			v->stats.timeouts++;
			vsock_conn_free(v, c, true);
			v->more_work = true; /* its RST goes out on the next turn */
		} else if (c->deadline < next) {
			next = c->deadline;
		}
	}
	return next == UINT64_MAX ? -1 : (int)(next - now < 60000 ? next - now : 60000);
}

int vsock_open_listener(struct virtio_vsock *v)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct stat st;

	memcpy(a.sun_path, v->uds_path, strlen(v->uds_path) + 1);
	if (lstat(a.sun_path, &st) == 0) {
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0;
		if (probe >= 0)
			close(probe);
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if (live) /* another device listens there: never steal its path */
			return -EADDRINUSE;
		unlink(a.sun_path); /* left by a VMM that died */
	}
	v->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (v->listen_fd < 0 || bind(v->listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(v->listen_fd, 128) < 0)
		return -errno;
	return 0;
}
