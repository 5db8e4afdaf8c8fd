/* Framed, non-blocking connection shared by the agent and the host client. */
#include "agentproto/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int ap_conn_open(struct ap_conn **out, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	struct ap_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = fd;
	c->stall_ms = AP_STALL_MS;
	*out = c;
	return 0;
}

void ap_conn_close(struct ap_conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	free(c);
}

static int reserve_out(struct ap_conn *c, size_t n)
{
	/* Compact first: the consumed head is dead space. */
	if (c->out_off && c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
	} else if (c->out_off > c->out_cap / 2) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_cap - c->out_len >= n)
		return 0;
	size_t cap = c->out_cap ? c->out_cap : 16 * 1024;
	while (cap - c->out_len < n)
		cap *= 2;
	uint8_t *p = realloc(c->out, cap);
	if (!p)
		return -ENOMEM;
	c->out = p;
	c->out_cap = cap;
	return 0;
}

int ap_conn_send(struct ap_conn *c, uint16_t type, uint32_t chan, const void *p, size_t len)
{
	if (len > AP_MAX_PAYLOAD)
		return -EMSGSIZE;
	int rc = reserve_out(c, AP_HDR_SIZE + len);
	if (rc)
		return rc;
	ap_hdr_encode(c->out + c->out_len, type, chan, (uint32_t)len);
	if (len)
		memcpy(c->out + c->out_len + AP_HDR_SIZE, p, len);
	c->out_len += AP_HDR_SIZE + len;
	return 0;
}

int ap_conn_send_error(struct ap_conn *c, uint32_t chan, int err, const char *fmt, ...)
{
	uint8_t buf[4 + 512];
	va_list ap;
	int32_t e = err < 0 ? -err : err;

	buf[0] = e;
	buf[1] = e >> 8;
	buf[2] = e >> 16;
	buf[3] = e >> 24;
	va_start(ap, fmt);
	int n = vsnprintf((char *)buf + 4, sizeof(buf) - 4, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(buf) - 5)
		n = sizeof(buf) - 5;
	return ap_conn_send(c, AP_ERROR, chan, buf, 4 + (size_t)n);
}

size_t ap_conn_pending(const struct ap_conn *c)
{
	return c->out_len - c->out_off;
}

int ap_conn_flush(struct ap_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	return 0;
}

int ap_conn_flush_all(struct ap_conn *c)
{
	for (;;) {
		int rc = ap_conn_flush(c);
		if (rc || ap_conn_pending(c) == 0)
			return rc;
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int n = poll(&p, 1, c->stall_ms);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int ap_conn_next(struct ap_conn *c, struct ap_frame *f)
{
	if (c->in_used) {
		memmove(c->in, c->in + c->in_used, c->in_len - c->in_used);
		c->in_len -= c->in_used;
		c->in_used = 0;
	}
	if (c->in_len < AP_HDR_SIZE)
		return 0;
	if (ap_hdr_decode(c->in, &f->h))
		return -EBADMSG;
	if (c->in_len < AP_HDR_SIZE + f->h.len)
		return 0;
	f->p = c->in + AP_HDR_SIZE;
	c->in_used = AP_HDR_SIZE + f->h.len;
	return 1;
}

int ap_conn_fill(struct ap_conn *c)
{
	if (c->in_used) {
		memmove(c->in, c->in + c->in_used, c->in_len - c->in_used);
		c->in_len -= c->in_used;
		c->in_used = 0;
	}
	if (c->in_len == sizeof(c->in))
		return 0;
	for (;;) {
		ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
		if (n > 0) {
			c->in_len += (size_t)n;
			return (int)n;
		}
		if (n == 0) {
			c->eof = true;
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ap_conn_recv(struct ap_conn *c, struct ap_frame *f, int timeout_ms)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
	for (;;) {
		int rc = ap_conn_next(c, f);
		if (rc)
			return rc < 0 ? rc : 0;
		rc = ap_conn_flush(c);
		if (rc)
			return rc;
		rc = ap_conn_fill(c);
		if (rc < 0)
			return rc;
		if (rc > 0)
			continue;
		int wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			wait = (int)left;
		}
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		if (ap_conn_pending(c))
			p.events |= POLLOUT;
		if (poll(&p, 1, wait) < 0 && errno != EINTR)
			return -errno;
	}
}
