/* virtio-vsock's connection table (devices/vsock_int.h): slots, the RSTs
 * owed to the guest, the credit both ways, and the guest's bytes buffered
 * until their host socket takes them. */
#include <errno.h>
#include <linux/virtio_vsock.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/vsock_int.h"

bool vsock_again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static bool guest_knows(const struct vsock_conn *c)
{
	return c->state == C_ESTABLISHED || (c->state == C_HOST_REQUEST && !c->need_request);
}

struct vsock_conn *vsock_conn_find(struct virtio_vsock *v, uint32_t peer, uint32_t local)
{
	for (uint32_t s = 0; s < v->nslots; s++) {
		struct vsock_conn *c = v->conns[s];
		if (c && c->state != C_HOST_LINE && c->peer_port == peer && c->local_port == local)
			return c;
	}
	return NULL;
}

void vsock_queue_rst(struct virtio_vsock *v, uint64_t cid, uint32_t local, uint32_t peer)
{
	if (v->rst_count == RST_BACKLOG) {
		v->stats.rst_dropped++; /* the guest's connect or close times out instead */
		return;
	}
	v->rsts[(v->rst_head + v->rst_count++) % RST_BACKLOG] =
		(struct vsock_rst){.local_cid = cid, .local_port = local, .peer_port = peer};
}

struct vsock_conn *vsock_conn_new(struct virtio_vsock *v, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
	struct vsock_conn *c;
	uint32_t s = 0;

	if (v->nconns >= v->opts.max_conns || !(c = calloc(1, sizeof(*c))))
		return NULL;
	while (v->conns[s])
		s++;
	c->fd = fd;
	c->slot = s;
	c->serial = ++v->next_serial;
	c->writable = true;
	ev.data.u64 = c->serial << 16 | s;
	if (epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		free(c);
		return NULL;
	}
	v->conns[s] = c;
	if (s >= v->nslots)
		v->nslots = s + 1;
	v->stats.conns_open = ++v->nconns;
	return c;
}

/* Closes the host socket and forgets the connection; rst tells the guest. */
void vsock_conn_free(struct virtio_vsock *v, struct vsock_conn *c, bool rst)
{
	if (rst && guest_knows(c))
		vsock_queue_rst(v, VSOCK_HOST_CID, c->local_port, c->peer_port);
	close(c->fd); /* also leaves the epoll set */
	v->conns[c->slot] = NULL;
	while (v->nslots && !v->conns[v->nslots - 1])
		v->nslots--;
	v->stats.conns_open = --v->nconns;
	free(c->buf);
	free(c);
}

void vsock_conn_error(struct virtio_vsock *v, struct vsock_conn *c, const char *why)
{
	v->stats.bad_packets++;
	log_warn_once(LOG_KIND, (uintptr_t)why, "virtio-vsock: %s; connection reset (logged once)", why);
	vsock_conn_free(v, c, true);
}

void vsock_drop_all(struct virtio_vsock *v)
{
	for (uint32_t s = 0; s < v->nslots; s++)
		if (v->conns[s])
			vsock_conn_free(v, v->conns[s], false);
	v->rst_count = 0;
	v->seen_generation = v->generation;
}

/* Tells the guest about freed room once it believes less than half is left. */
void vsock_credit_check(struct virtio_vsock *v, struct vsock_conn *c)
{
	if (c->fwd_cnt != c->fwd_reported && c->rx_cnt - c->fwd_reported > v->opts.buf_alloc / 2)
		c->need_credit = true;
}

/* iovecs over a chain's readable (or writable) bytes [skip, skip+len). */
int vsock_chain_iov(const struct virtq_chain *ch, bool in, size_t skip, size_t len,
		     struct iovec *iov)
{
	uint16_t i = in ? ch->nout : 0, end = in ? ch->nout + ch->nin : ch->nout;
	int n = 0;

	for (; i < end && len; i++) {
		const struct virtq_iov *b = &ch->iov[i];
		size_t take;
		if (skip >= b->len) {
			skip -= b->len;
			continue;
		}
		take = b->len - skip < len ? b->len - skip : len;
		iov[n++] = (struct iovec){.iov_base = b->base + skip, .iov_len = take};
		len -= take;
		skip = 0;
	}
	return n;
}

ssize_t vsock_send_iov(int fd, struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};

	/* MSG_NOSIGNAL: a host peer that went away is an error, not SIGPIPE. */
	return sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* After the host took our buffered bytes: finish what the guest shut. */
void vsock_conn_settle(struct virtio_vsock *v, struct vsock_conn *c)
{
	if (c->buf_len)
		return;
	if ((c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !c->host_wr_shut) {
		shutdown(c->fd, SHUT_WR);
		c->host_wr_shut = true;
	}
	/* Both directions closed: the guest waits for our RST to finish (5.10.6.6). */
	if (c->guest_shut == SHUT_BOTH)
		vsock_conn_free(v, c, true);
}

void vsock_conn_flush(struct virtio_vsock *v, struct vsock_conn *c)
{
	uint32_t cap = v->opts.buf_alloc;

	while (c->buf_len) {
		uint32_t first = cap - c->buf_head < c->buf_len ? cap - c->buf_head : c->buf_len;
		struct iovec iov[2] = {{c->buf + c->buf_head, first}, {c->buf, c->buf_len - first}};
		ssize_t w = vsock_send_iov(c->fd, iov, c->buf_len > first ? 2 : 1);
		if (w < 0 && vsock_again()) {
			c->writable = false;
			break;
		}
		if (w <= 0) {
			vsock_conn_free(v, c, true);
			return;
		}
		c->buf_head = (uint32_t)((c->buf_head + (size_t)w) % cap);
		c->buf_len -= (uint32_t)w;
		c->fwd_cnt += (uint32_t)w;
		v->stats.bytes_to_host += (uint64_t)w;
	}
	vsock_credit_check(v, c);
	vsock_conn_settle(v, c);
}
