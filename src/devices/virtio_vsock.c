#include "devices/virtio_vsock.h"

#include <endian.h>
#include <errno.h>
#include <linux/virtio_vsock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/thread.h"

#define RXQ 0
#define TXQ 1
#define EVQ 2
/* Work per loop turn, so that a busy device lets the vCPUs at the lock. */
#define TX_BUDGET 32
#define RX_BUDGET 64
#define ACCEPT_BUDGET 16
#define LOOP_EVENTS 64
#define RST_BACKLOG 512
#define HOST_PORT_FIRST (1u << 30) /* host ports we pick for host -> guest */
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)
#define LOG_KIND 0x56534bu /* "VSK" for log_once */
/* epoll tags: conns carry (serial << 16 | slot); the rest serial 0. */
#define TAG_KICK 1
#define TAG_LISTEN 2

enum conn_state {
	C_HOST_LINE,    /* host client accepted, its CONNECT line not read yet */
	C_HOST_REQUEST, /* REQUEST owed or sent to the guest, awaiting RESPONSE */
	C_ESTABLISHED,
};

struct vsock_conn {
	int fd;
	uint32_t slot;
	uint64_t serial;
	enum conn_state state;
	uint32_t local_port, peer_port; /* host side, guest side */
	bool readable, writable, rdhup, hup;  /* edge-triggered socket state */
	bool need_request, need_response, need_credit;
	bool shut_sent;                 /* we told the guest the host is done */
	bool host_wr_shut;
	uint32_t guest_shut;            /* VIRTIO_VSOCK_SHUTDOWN_* the guest sent */
	/* host -> guest: the guest's credit */
	uint32_t peer_buf_alloc, peer_fwd_cnt, tx_cnt;
	/* guest -> host: our credit, and bytes the host socket has not taken */
	uint32_t rx_cnt, fwd_cnt, fwd_reported;
	uint8_t *buf;
	uint32_t buf_head, buf_len;
	uint64_t deadline;              /* ms, CLOCK_MONOTONIC; 0 = none */
};

struct vsock_rst {
	uint64_t local_cid;
	uint32_t local_port, peer_port;
};

static bool again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* ---- parsers ---- */

enum vsock_verdict vsock_parse_tx_hdr(const uint8_t *buf, size_t len, uint64_t room,
				      uint64_t guest_cid, struct vsock_pkt *p)
{
	struct virtio_vsock_hdr h;

	memset(p, 0, sizeof(*p));
	if (len < sizeof(h))
		return VSOCK_PKT_DROP;
	memcpy(&h, buf, sizeof(h));
	*p = (struct vsock_pkt){
		.src_cid = le64toh(h.src_cid), .dst_cid = le64toh(h.dst_cid),
		.src_port = le32toh(h.src_port), .dst_port = le32toh(h.dst_port),
		.len = le32toh(h.len), .type = le16toh(h.type), .op = le16toh(h.op),
		.flags = le32toh(h.flags), .buf_alloc = le32toh(h.buf_alloc),
		.fwd_cnt = le32toh(h.fwd_cnt),
	};
	/* A spoofed source cannot be answered: the reply would go elsewhere. */
	if (p->src_cid != guest_cid)
		return VSOCK_PKT_DROP;
	if (p->dst_cid != VSOCK_HOST_CID || p->type != VIRTIO_VSOCK_TYPE_STREAM ||
	    p->op == VIRTIO_VSOCK_OP_INVALID || p->op > VIRTIO_VSOCK_OP_CREDIT_REQUEST ||
	    p->len > VSOCK_MAX_PKT || p->len > room)
		/* Never answer a reset with a reset: two peers could ping-pong. */
		return p->op == VIRTIO_VSOCK_OP_RST ? VSOCK_PKT_DROP : VSOCK_PKT_RST;
	return VSOCK_PKT_OK;
}

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

/* ---- connections ---- */

static bool guest_knows(const struct vsock_conn *c)
{
	return c->state == C_ESTABLISHED || (c->state == C_HOST_REQUEST && !c->need_request);
}

static struct vsock_conn *conn_find(struct virtio_vsock *v, uint32_t peer, uint32_t local)
{
	for (uint32_t s = 0; s < v->nslots; s++) {
		struct vsock_conn *c = v->conns[s];
		if (c && c->state != C_HOST_LINE && c->peer_port == peer && c->local_port == local)
			return c;
	}
	return NULL;
}

static void queue_rst(struct virtio_vsock *v, uint64_t cid, uint32_t local, uint32_t peer)
{
	if (v->rst_count == RST_BACKLOG) {
		v->stats.rst_dropped++; /* the guest's connect or close times out instead */
		return;
	}
	v->rsts[(v->rst_head + v->rst_count++) % RST_BACKLOG] =
		(struct vsock_rst){.local_cid = cid, .local_port = local, .peer_port = peer};
}

static struct vsock_conn *conn_new(struct virtio_vsock *v, int fd)
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
static void conn_free(struct virtio_vsock *v, struct vsock_conn *c, bool rst)
{
	if (rst && guest_knows(c))
		queue_rst(v, VSOCK_HOST_CID, c->local_port, c->peer_port);
	close(c->fd); /* also leaves the epoll set */
	v->conns[c->slot] = NULL;
	while (v->nslots && !v->conns[v->nslots - 1])
		v->nslots--;
	v->stats.conns_open = --v->nconns;
	free(c->buf);
	free(c);
}

static void conn_error(struct virtio_vsock *v, struct vsock_conn *c, const char *why)
{
	v->stats.bad_packets++;
	log_warn_once(LOG_KIND, (uintptr_t)why, "virtio-vsock: %s; connection reset (logged once)", why);
	conn_free(v, c, true);
}

static void drop_all(struct virtio_vsock *v)
{
	for (uint32_t s = 0; s < v->nslots; s++)
		if (v->conns[s])
			conn_free(v, v->conns[s], false);
	v->rst_count = 0;
	v->seen_generation = v->generation;
}

static uint32_t guest_credit(const struct vsock_conn *c)
{
	uint32_t used = c->tx_cnt - c->peer_fwd_cnt;

	return used >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - used;
}

/* Tells the guest about freed room once it believes less than half is left. */
static void credit_check(struct virtio_vsock *v, struct vsock_conn *c)
{
	if (c->fwd_cnt != c->fwd_reported && c->rx_cnt - c->fwd_reported > v->opts.buf_alloc / 2)
		c->need_credit = true;
}

/* iovecs over a chain's readable (or writable) bytes [skip, skip+len). */
static int chain_iov(const struct virtq_chain *ch, bool in, size_t skip, size_t len,
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

static ssize_t send_iov(int fd, struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};

	/* MSG_NOSIGNAL: a host peer that went away is an error, not SIGPIPE. */
	return sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* After the host took our buffered bytes: finish what the guest shut. */
static void conn_settle(struct virtio_vsock *v, struct vsock_conn *c)
{
	if (c->buf_len)
		return;
	if ((c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !c->host_wr_shut) {
		shutdown(c->fd, SHUT_WR);
		c->host_wr_shut = true;
	}
	/* Both directions closed: the guest waits for our RST to finish (5.10.6.6). */
	if (c->guest_shut == SHUT_BOTH)
		conn_free(v, c, true);
}

static void conn_flush(struct virtio_vsock *v, struct vsock_conn *c)
{
	uint32_t cap = v->opts.buf_alloc;

	while (c->buf_len) {
		uint32_t first = cap - c->buf_head < c->buf_len ? cap - c->buf_head : c->buf_len;
		struct iovec iov[2] = {{c->buf + c->buf_head, first}, {c->buf, c->buf_len - first}};
		ssize_t w = send_iov(c->fd, iov, c->buf_len > first ? 2 : 1);
		if (w < 0 && again()) {
			c->writable = false;
			break;
		}
		if (w <= 0) {
			conn_free(v, c, true);
			return;
		}
		c->buf_head = (uint32_t)((c->buf_head + (size_t)w) % cap);
		c->buf_len -= (uint32_t)w;
		c->fwd_cnt += (uint32_t)w;
		v->stats.bytes_to_host += (uint64_t)w;
	}
	credit_check(v, c);
	conn_settle(v, c);
}

/* ---- guest -> host (tx queue) ---- */

static void guest_connect(struct virtio_vsock *v, const struct vsock_pkt *p)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct vsock_conn *c;
	int fd;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s_%u", v->uds_path, p->dst_port);
	/* At the limit the host listener is not even bothered. */
	fd = v->nconns < v->opts.max_conns ?
		     socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : -1;
	/* Non-blocking: a listener whose backlog is full refuses (EAGAIN). */
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || !(c = conn_new(v, fd))) {
		if (fd >= 0)
			close(fd);
		v->stats.refused++;
		queue_rst(v, VSOCK_HOST_CID, p->dst_port, p->src_port);
		return;
	}
	c->state = C_ESTABLISHED;
	c->local_port = p->dst_port;
	c->peer_port = p->src_port;
	c->peer_buf_alloc = p->buf_alloc;
	c->peer_fwd_cnt = p->fwd_cnt;
	c->need_response = true;
	v->stats.guest_connects++;
}

static void guest_data(struct virtio_vsock *v, struct vsock_conn *c, const struct vsock_pkt *p,
		       const struct virtq_chain *ch)
{
	struct iovec iov[VIRTQ_MAX_SIZE];
	uint32_t cap = v->opts.buf_alloc, done = 0;

	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) {
		conn_error(v, c, "guest sent data after shutting down sending");
		return;
	}
	/* The credit we gave is the bound on what we hold for the guest. */
	if (p->len > cap - c->buf_len) {
		conn_error(v, c, "guest sent more than its credit");
		return;
	}
	c->rx_cnt += p->len;
	if (c->hup) { /* the host peer is gone: nothing can take these bytes */
		c->fwd_cnt += p->len;
		credit_check(v, c);
		return;
	}
	if (!c->buf_len && p->len) {
		ssize_t w = send_iov(c->fd, iov, chain_iov(ch, false, VSOCK_HDR_LEN, p->len, iov));
		if (w < 0 && !again()) {
			conn_free(v, c, true);
			return;
		}
		if (w < (ssize_t)p->len)
			c->writable = false;
		done = w > 0 ? (uint32_t)w : 0;
		c->fwd_cnt += done;
		v->stats.bytes_to_host += done;
	}
	if (done < p->len) {
		uint32_t rest = p->len - done, tail;
		if (!c->buf && !(c->buf = malloc(cap))) {
			conn_free(v, c, true);
			return;
		}
		tail = (c->buf_head + c->buf_len) % cap;
		uint32_t first = cap - tail < rest ? cap - tail : rest;
		virtq_read_out(ch, VSOCK_HDR_LEN + done, c->buf + tail, first);
		virtq_read_out(ch, VSOCK_HDR_LEN + done + first, c->buf, rest - first);
		c->buf_len += rest;
	}
	credit_check(v, c);
}

static void guest_shutdown(struct virtio_vsock *v, struct vsock_conn *c, uint32_t flags)
{
	c->guest_shut |= flags & SHUT_BOTH;
	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV)
		shutdown(c->fd, SHUT_RD); /* the host writer learns nobody reads */
	if (c->guest_shut == SHUT_BOTH && c->buf_len && !c->deadline)
		c->deadline = mono_ms() + v->opts.close_ms;
	conn_settle(v, c);
}

static void guest_response(struct virtio_vsock *v, struct vsock_conn *c)
{
	char line[VSOCK_LINE_MAX];
	int n = snprintf(line, sizeof(line), "OK %u\n", c->local_port);

	if (send(c->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n) {
		conn_free(v, c, true);
		return;
	}
	c->state = C_ESTABLISHED;
	c->deadline = 0;
	c->readable = true; /* the client may have written before our OK */
}

static void conn_packet(struct virtio_vsock *v, struct vsock_conn *c, const struct vsock_pkt *p,
			const struct virtq_chain *ch)
{
	c->peer_buf_alloc = p->buf_alloc; /* every packet carries the guest's credit */
	c->peer_fwd_cnt = p->fwd_cnt;
	if (p->op == VIRTIO_VSOCK_OP_RST) {
		conn_free(v, c, false);
		return;
	}
	if (c->state == C_HOST_REQUEST) {
		if (p->op == VIRTIO_VSOCK_OP_RESPONSE && !c->need_request) {
			guest_response(v, c);
			return;
		}
		conn_error(v, c, "guest sent a packet other than RESPONSE to a connect");
		return;
	}
	switch (p->op) {
	case VIRTIO_VSOCK_OP_RW:
		guest_data(v, c, p, ch);
		return;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		guest_shutdown(v, c, p->flags);
		return;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		c->need_credit = true;
		return;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		return;
	default: /* REQUEST or RESPONSE on an open connection */
		conn_error(v, c, "guest sent REQUEST or RESPONSE on an open connection");
		return;
	}
}

static void tx_packet(struct virtio_vsock *v, const struct virtq_chain *ch)
{
	uint8_t raw[VSOCK_HDR_LEN];
	size_t got = virtq_read_out(ch, 0, raw, sizeof(raw));
	struct vsock_pkt p;
	enum vsock_verdict verdict = vsock_parse_tx_hdr(raw, got, ch->out_bytes - got,
							v->guest_cid, &p);
	struct vsock_conn *c = NULL;

	if (v->prev_cid && verdict == VSOCK_PKT_OK)
		v->prev_cid = 0; /* the guest has the new CID */
	else if (v->prev_cid && p.src_cid == v->prev_cid)
		verdict = vsock_parse_tx_hdr(raw, got, ch->out_bytes - got, v->prev_cid, &p);

	if (verdict == VSOCK_PKT_OK || p.dst_cid == VSOCK_HOST_CID)
		c = conn_find(v, p.src_port, p.dst_port);
	if (verdict != VSOCK_PKT_OK) {
		v->stats.bad_packets++;
		log_warn_once(LOG_KIND, 1, "virtio-vsock: bad packet header from the guest (logged once)");
		if (verdict == VSOCK_PKT_RST && c)
			conn_free(v, c, true);
		else if (verdict == VSOCK_PKT_RST)
			queue_rst(v, p.dst_cid, p.dst_port, p.src_port);
		return;
	}
	if (c) {
		conn_packet(v, c, &p, ch);
		return;
	}
	if (p.op == VIRTIO_VSOCK_OP_REQUEST)
		guest_connect(v, &p);
	else if (p.op != VIRTIO_VSOCK_OP_RST)
		queue_rst(v, VSOCK_HOST_CID, p.dst_port, p.src_port);
}

static void tx_process(struct virtio_vsock *v)
{
	struct virtio_mmio *t = &v->mmio;
	struct virtq *q = &t->s.queues[TXQ];

	for (int n = 0; n < TX_BUDGET; n++) {
		int got = virtio_mmio_driver_ok(t) && q->ready ? virtq_pop(q, v->txc) : 0;
		if (got < 0)
			virtio_mmio_fail(t, "malformed descriptor chain on the tx queue");
		if (got <= 0)
			return;
		if (v->txc->nin) {
			virtio_mmio_fail(t, "tx packet with device-writable buffers");
			return;
		}
		tx_packet(v, v->txc);
		virtq_push(q, v->txc, 0);
		v->pushed[TXQ] = true;
	}
	v->more_work = true;
}

/* ---- host -> guest (rx queue) ---- */

/* Takes a receive buffer: 1, 0 when the guest has none posted, -EINVAL when
 * it broke the rules.  Popped only when there is a packet for it, so no
 * buffer is ever held across a loop turn (or a checkpoint). */
static int rx_pop(struct virtio_vsock *v)
{
	struct virtio_mmio *t = &v->mmio;
	struct virtq *q = &t->s.queues[RXQ];
	int got = virtio_mmio_driver_ok(t) && q->ready ? virtq_pop(q, v->rxc) : 0;

	if (got < 0) {
		virtio_mmio_fail(t, "malformed descriptor chain on the rx queue");
		return -EINVAL;
	}
	/* Room for a header and at least one byte: every buffer can carry data. */
	if (got && (v->rxc->nout || v->rxc->in_bytes <= VSOCK_HDR_LEN)) {
		virtio_mmio_fail(t, "rx buffer read-only or no longer than a packet header");
		return -EINVAL;
	}
	return got;
}

static void rx_push(struct virtio_vsock *v, const struct vsock_pkt *p)
{
	struct virtio_vsock_hdr h = {
		.src_cid = htole64(p->src_cid), .dst_cid = htole64(p->dst_cid),
		.src_port = htole32(p->src_port), .dst_port = htole32(p->dst_port),
		.len = htole32(p->len), .type = htole16(p->type), .op = htole16(p->op),
		.flags = htole32(p->flags), .buf_alloc = htole32(p->buf_alloc),
		.fwd_cnt = htole32(p->fwd_cnt),
	};

	virtq_write_in(v->rxc, 0, &h, sizeof(h));
	virtq_push(&v->mmio.s.queues[RXQ], v->rxc, VSOCK_HDR_LEN + p->len);
	v->pushed[RXQ] = true;
	if (p->op == VIRTIO_VSOCK_OP_RST)
		v->stats.rst_sent++;
}

static struct vsock_pkt conn_pkt(const struct virtio_vsock *v, const struct vsock_conn *c,
				 uint16_t op, uint32_t flags)
{
	return (struct vsock_pkt){
		.src_cid = VSOCK_HOST_CID, .dst_cid = v->guest_cid,
		.src_port = c->local_port, .dst_port = c->peer_port,
		.type = VIRTIO_VSOCK_TYPE_STREAM, .op = op, .flags = flags,
		.buf_alloc = v->opts.buf_alloc, .fwd_cnt = c->fwd_cnt,
	};
}

/* Sends a control packet: 1, or -EAGAIN (no buffer) / -EINVAL. */
static int send_ctrl(struct virtio_vsock *v, struct vsock_conn *c, uint16_t op, uint32_t flags)
{
	struct vsock_pkt p = conn_pkt(v, c, op, flags);
	int r = rx_pop(v);

	if (r <= 0)
		return r ? r : -EAGAIN;
	rx_push(v, &p);
	c->fwd_reported = c->fwd_cnt;
	return 1;
}

static int send_data(struct virtio_vsock *v, struct vsock_conn *c, uint32_t want)
{
	struct iovec iov[VIRTQ_MAX_SIZE];
	struct vsock_pkt p = conn_pkt(v, c, VIRTIO_VSOCK_OP_RW, 0);
	int r = rx_pop(v);
	ssize_t got;

	if (r <= 0)
		return r ? r : -EAGAIN;
	if (want > v->rxc->in_bytes - VSOCK_HDR_LEN)
		want = (uint32_t)(v->rxc->in_bytes - VSOCK_HDR_LEN);
	got = want ? readv(c->fd, iov, chain_iov(v->rxc, true, VSOCK_HDR_LEN, want, iov)) : 0;
	if (got <= 0) { /* FIONREAD promised bytes: the socket broke under us */
		p.op = VIRTIO_VSOCK_OP_RST;
		rx_push(v, &p);
		conn_free(v, c, false);
		return 1;
	}
	p.len = (uint32_t)got;
	rx_push(v, &p);
	c->fwd_reported = c->fwd_cnt;
	c->tx_cnt += (uint32_t)got;
	v->stats.bytes_to_guest += (uint64_t)got;
	return 1;
}

/* What the host side has for the guest: data within credit, or the news
 * that the host peer stopped sending. */
static int conn_rx_data(struct virtio_vsock *v, struct vsock_conn *c)
{
	uint32_t credit = guest_credit(c), want;
	int avail = 0, r;

	if ((c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV) || c->shut_sent || !c->readable)
		return 0;
	if (ioctl(c->fd, FIONREAD, &avail) < 0)
		avail = 0;
	if (avail > 0) {
		if (!credit)
			return 0; /* back-pressure: the bytes wait in the host socket */
		want = (uint32_t)avail < credit ? (uint32_t)avail : credit;
		return send_data(v, c, want < VSOCK_MAX_PKT ? want : VSOCK_MAX_PKT);
	}
	if (!c->rdhup) {
		c->readable = false;
		return 0;
	}
	r = send_ctrl(v, c, VIRTIO_VSOCK_OP_SHUTDOWN,
		      VIRTIO_VSOCK_SHUTDOWN_SEND | (c->hup ? VIRTIO_VSOCK_SHUTDOWN_RCV : 0));
	if (r == 1) {
		c->shut_sent = true;
		if (c->hup) /* host fully gone: wait a while for the guest's RST */
			c->deadline = mono_ms() + v->opts.close_ms;
	}
	return r;
}

/* At most one packet for c: 1 sent, 0 nothing to send, <0 stop the pump. */
static int conn_rx_one(struct virtio_vsock *v, struct vsock_conn *c)
{
	int r;

	if (c->state == C_HOST_LINE)
		return 0;
	if (c->need_request) {
		if ((r = send_ctrl(v, c, VIRTIO_VSOCK_OP_REQUEST, 0)) == 1)
			c->need_request = false;
		return r;
	}
	if (c->state != C_ESTABLISHED)
		return 0;
	if (c->need_response) {
		if ((r = send_ctrl(v, c, VIRTIO_VSOCK_OP_RESPONSE, 0)) == 1)
			c->need_response = false;
		return r;
	}
	if (c->need_credit) {
		if ((r = send_ctrl(v, c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0)) == 1)
			c->need_credit = false;
		return r;
	}
	return conn_rx_data(v, c);
}

static void rx_pump(struct virtio_vsock *v)
{
	int budget = RX_BUDGET;
	bool progress = true;

	while (v->rst_count && budget > 0) {
		struct vsock_rst *e = &v->rsts[v->rst_head];
		struct vsock_pkt p = {
			.src_cid = e->local_cid, .dst_cid = v->guest_cid,
			.src_port = e->local_port, .dst_port = e->peer_port,
			.type = VIRTIO_VSOCK_TYPE_STREAM, .op = VIRTIO_VSOCK_OP_RST,
			.buf_alloc = v->opts.buf_alloc,
		};
		if (rx_pop(v) <= 0)
			return;
		rx_push(v, &p);
		v->rst_head = (v->rst_head + 1) % RST_BACKLOG;
		v->rst_count--;
		budget--;
	}
	/* Round-robin, one packet per connection per round: no connection
	 * starves the others of receive buffers. */
	while (progress && budget > 0) {
		progress = false;
		for (uint32_t k = 0; k < v->nslots && budget > 0; k++) {
			struct vsock_conn *c = v->conns[(v->rr + k) % v->nslots];
			int r = c ? conn_rx_one(v, c) : 0;
			if (r < 0)
				return;
			if (r > 0) {
				progress = true;
				budget--;
			}
		}
		v->rr = v->nslots ? (v->rr + 1) % v->nslots : 0;
	}
	if (!budget)
		v->more_work = true;
}

static void event_deliver(struct virtio_vsock *v)
{
	struct virtio_mmio *t = &v->mmio;
	struct virtq *q = &t->s.queues[EVQ];
	uint32_t id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	int got;

	if (!v->event_pending || !virtio_mmio_driver_ok(t) || !q->ready)
		return;
	if ((got = virtq_pop(q, v->txc)) < 0)
		virtio_mmio_fail(t, "malformed descriptor chain on the event queue");
	if (got <= 0)
		return;
	if (v->txc->nout || v->txc->in_bytes < sizeof(id)) {
		virtio_mmio_fail(t, "event buffer read-only or too short");
		return;
	}
	virtq_write_in(v->txc, 0, &id, sizeof(id));
	virtq_push(q, v->txc, sizeof(id));
	v->pushed[EVQ] = true;
	v->event_pending = false;
	v->stats.transport_resets++;
}

/* ---- host sockets ---- */

static uint32_t alloc_host_port(struct virtio_vsock *v, uint32_t peer)
{
	for (uint32_t tries = 0; tries <= v->opts.max_conns; tries++) {
		uint32_t p = v->next_host_port++;
		if (v->next_host_port < HOST_PORT_FIRST || v->next_host_port == UINT32_MAX)
			v->next_host_port = HOST_PORT_FIRST;
		if (!conn_find(v, peer, p))
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

	if (n < 0 && again())
		return;
	r = n > 0 ? vsock_parse_connect_line(line, (size_t)n, &port) : -EINVAL;
	if (r == -EAGAIN && !c->rdhup)
		return;
	if (r < 0 || recv(c->fd, line, (size_t)r, MSG_DONTWAIT) != r ||
	    !(c->local_port = alloc_host_port(v, port))) {
		v->stats.bad_lines++;
		conn_free(v, c, false);
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

static void host_accept(struct virtio_vsock *v)
{
	for (int i = 0; i < ACCEPT_BUDGET; i++) {
		int fd = accept4(v->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct vsock_conn *c;
		if (fd < 0 && (again() || errno == ECONNABORTED))
			return;
		if (fd < 0) { /* out of descriptors: stop listening a moment, do not spin */
			log_once(LOG_KIND, 2, "virtio-vsock: accept: %s (logged once)", strerror(errno));
			listen_arm(v, false);
			v->listen_paused_until = mono_ms() + 100;
			return;
		}
		if (!(c = conn_new(v, fd))) {
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

static void conn_event(struct virtio_vsock *v, struct vsock_conn *c, uint32_t ev)
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
		conn_free(v, c, true);
		return;
	}
	if (c->writable && c->buf_len)
		conn_flush(v, c);
	else if (c->hup)
		conn_settle(v, c);
}

/* Expires handshakes and closes; returns ms until the next deadline, or -1. */
static int check_deadlines(struct virtio_vsock *v)
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
			conn_free(v, c, true);
			v->more_work = true; /* its RST goes out on the next turn */
		} else if (c->deadline < next) {
			next = c->deadline;
		}
	}
	return next == UINT64_MAX ? -1 : (int)(next - now < 60000 ? next - now : 60000);
}

/* ---- the loop ---- */

static void dispatch(struct virtio_vsock *v, const struct epoll_event *e)
{
	uint64_t tag = e->data.u64, cnt;
	struct vsock_conn *c;

	if (tag == TAG_KICK) {
		if (read(v->kick_fd, &cnt, sizeof(cnt)) < 0) {
			/* already drained by an earlier turn */
		}
	} else if (tag == TAG_LISTEN) {
		host_accept(v);
	} else if ((c = v->conns[(tag & 0xffff) % v->opts.max_conns]) && c->serial == tag >> 16) {
		conn_event(v, c, e->events); /* else: closed earlier in this turn */
	}
}

void virtio_vsock_poll(struct virtio_vsock *v, int timeout_ms)
{
	struct epoll_event ev[LOOP_EVENTS];
	struct virtio_mmio *t = &v->mmio;
	int n, wait = v->wait_ms;

	if (timeout_ms >= 0 && (wait < 0 || wait > timeout_ms))
		wait = timeout_ms;
	n = epoll_wait(v->epoll_fd, ev, LOOP_EVENTS, wait);
	pthread_mutex_lock(&t->lock);
	while (v->paused && !v->opts.no_thread && !__atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&v->resumed, &t->lock);
	if (v->paused || __atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	/* A reset or restore since the last turn: the guest forgot every connection. */
	if (v->generation != v->seen_generation)
		drop_all(v);
	v->more_work = false;
	for (int i = 0; i < n; i++)
		dispatch(v, &ev[i]);
	check_deadlines(v); /* expired ones may owe the guest an RST: send it now */
	tx_process(v);
	event_deliver(v);
	rx_pump(v);
	for (uint16_t q = 0; q < 3; q++)
		if (v->pushed[q]) {
			v->pushed[q] = false;
			virtio_mmio_notify_used(t, q);
		}
	v->wait_ms = check_deadlines(v);
	if (v->more_work)
		v->wait_ms = 0;
	pthread_mutex_unlock(&t->lock);
}

static void *vsock_thread(void *arg)
{
	struct virtio_vsock *v = arg;

	while (!__atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE))
		virtio_vsock_poll(v, -1);
	return NULL;
}

static void kick(struct virtio_vsock *v)
{
	if (v->kick_fd >= 0)
		eventfd_ring(v->kick_fd);
}

/* ---- transport callbacks (mmio.lock held, vCPU thread) ---- */

static void vsock_config_read(struct virtio_mmio *t, uint32_t off, uint8_t *data, uint32_t size)
{
	struct virtio_vsock *v = t->dev;
	uint64_t cid = htole64(v->guest_cid);

	if (off + size <= sizeof(cid))
		memcpy(data, (uint8_t *)&cid + off, size);
}

static void vsock_notify(struct virtio_mmio *t, uint16_t q) { kick(t->dev); }
static void vsock_activate(struct virtio_mmio *t) { kick(t->dev); }

static void vsock_reset(struct virtio_mmio *t)
{
	struct virtio_vsock *v = t->dev;

	v->generation++;
	v->event_pending = false;
	kick(v);
}

static const struct virtio_dev_ops vsock_ops = {
	.name = "virtio-vsock",
	.device_id = VIRTIO_ID_VSOCK_DEVICE,
	.features = 1ULL << VIRTIO_F_INDIRECT_BIT,
	.nqueues = 3,
	.config_len = sizeof(struct virtio_vsock_config),
	.config_read = vsock_config_read,
	.notify = vsock_notify,
	.activate = vsock_activate,
	.reset = vsock_reset,
};

/* ---- life cycle ---- */

static int open_listener(struct virtio_vsock *v)
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

static int set_opts(struct virtio_vsock *v, const struct virtio_vsock_opts *o)
{
	v->opts = o ? *o : (struct virtio_vsock_opts){0};
	if (!v->opts.max_conns)
		v->opts.max_conns = VSOCK_DEFAULT_MAX_CONNS;
	if (!v->opts.buf_alloc)
		v->opts.buf_alloc = VSOCK_DEFAULT_BUF_ALLOC;
	if (!v->opts.handshake_ms)
		v->opts.handshake_ms = VSOCK_DEFAULT_HANDSHAKE_MS;
	if (!v->opts.close_ms)
		v->opts.close_ms = VSOCK_DEFAULT_CLOSE_MS;
	return v->opts.max_conns > 0xffff || v->opts.buf_alloc > 64 * 1024 * 1024 ? -EINVAL : 0;
}

int virtio_vsock_init(struct virtio_vsock *v, uint64_t guest_cid, const char *uds_path,
		      const struct virtio_vsock_opts *opts, const struct guest_mem *mem,
		      uint64_t base, uint32_t gsi,
		      void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx)
{
	struct epoll_event kev = {.events = EPOLLIN, .data.u64 = TAG_KICK};
	struct epoll_event lev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
	int err;

	memset(v, 0, sizeof(*v));
	v->epoll_fd = v->kick_fd = v->listen_fd = -1;
	v->wait_ms = -1;
	v->next_host_port = HOST_PORT_FIRST;
	v->guest_cid = guest_cid;
	pthread_cond_init(&v->resumed, NULL);
	virtio_mmio_init(&v->mmio, &vsock_ops, v, mem, base, gsi, set_irq, irq_ctx);
	v->inited = true;
	/* CIDs 0-2 are reserved, and Linux keeps CIDs in 32 bits (-1 = any). */
	if (guest_cid < 3 || guest_cid >= UINT32_MAX || (err = set_opts(v, opts)))
		goto fail_inval;
	if (!uds_path || !*uds_path || strlen(uds_path) >= sizeof(v->uds_path)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	memcpy(v->uds_path, uds_path, strlen(uds_path) + 1);
	v->conns = calloc(v->opts.max_conns, sizeof(*v->conns));
	v->rsts = calloc(RST_BACKLOG, sizeof(*v->rsts));
	v->txc = malloc(sizeof(*v->txc));
	v->rxc = malloc(sizeof(*v->rxc));
	err = -ENOMEM;
	if (!v->conns || !v->rsts || !v->txc || !v->rxc)
		goto fail;
	v->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	v->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->epoll_fd < 0 || v->kick_fd < 0 ||
	    epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, v->kick_fd, &kev) < 0) {
		err = -errno;
		goto fail;
	}
	if ((err = open_listener(v)))
		goto fail;
	if (epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, v->listen_fd, &lev) < 0) {
		err = -errno;
		goto fail;
	}
	if (!v->opts.no_thread) {
		if (thread_start(&v->thread, vsock_thread, v) < 0) {
			err = -EAGAIN;
			goto fail;
		}
		v->thread_started = true;
	}
	return 0;
fail_inval:
	err = -EINVAL;
fail:
	virtio_vsock_destroy(v);
	return err;
}

void virtio_vsock_destroy(struct virtio_vsock *v)
{
	if (!v->inited)
		return;
	if (v->thread_started) {
		pthread_mutex_lock(&v->mmio.lock);
		__atomic_store_n(&v->stopping, 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&v->resumed);
		pthread_mutex_unlock(&v->mmio.lock);
		kick(v);
		pthread_join(v->thread, NULL);
		v->thread_started = false;
	}
	if (v->conns)
		drop_all(v);
	virtio_mmio_destroy(&v->mmio);
	if (v->listen_fd >= 0) {
		close(v->listen_fd);
		unlink(v->uds_path);
	}
	if (v->kick_fd >= 0)
		close(v->kick_fd);
	if (v->epoll_fd >= 0)
		close(v->epoll_fd);
	free(v->conns);
	free(v->rsts);
	free(v->txc);
	free(v->rxc);
	pthread_cond_destroy(&v->resumed);
	v->inited = false;
}

void virtio_vsock_pause(struct virtio_vsock *v)
{
	/* The loop holds the lock for a whole turn: once we have it, no turn is
	 * under way, and the next one waits for resume. */
	pthread_mutex_lock(&v->mmio.lock);
	v->paused = true;
	pthread_mutex_unlock(&v->mmio.lock);
}

void virtio_vsock_resume(struct virtio_vsock *v)
{
	pthread_mutex_lock(&v->mmio.lock);
	v->paused = false;
	pthread_cond_broadcast(&v->resumed);
	pthread_mutex_unlock(&v->mmio.lock);
	kick(v);
}

void virtio_vsock_save(struct virtio_vsock *v, struct virtio_vsock_state *out)
{
	memset(out, 0, sizeof(*out));
	out->version = VIRTIO_VSOCK_STATE_VERSION;
	out->guest_cid = v->guest_cid;
	virtio_mmio_save(&v->mmio, &out->mmio);
}

int virtio_vsock_restore(struct virtio_vsock *v, const struct virtio_vsock_state *in)
{
	bool was_paused;
	int err;

	if (in->version != VIRTIO_VSOCK_STATE_VERSION)
		return -EINVAL;
	/* Paused throughout, so that no turn of the loop sees the new queues
	 * with the old connections. */
	pthread_mutex_lock(&v->mmio.lock);
	was_paused = v->paused;
	v->paused = true;
	pthread_mutex_unlock(&v->mmio.lock);
	err = virtio_mmio_restore(&v->mmio, &in->mmio);
	pthread_mutex_lock(&v->mmio.lock);
	if (!err) {
		v->generation++;
		v->event_pending = true;
		v->prev_cid = in->guest_cid != v->guest_cid ? in->guest_cid : 0;
	}
	v->paused = was_paused;
	pthread_cond_broadcast(&v->resumed);
	pthread_mutex_unlock(&v->mmio.lock);
	kick(v);
	return err;
}

void virtio_vsock_get_stats(struct virtio_vsock *v, struct virtio_vsock_stats *out)
{
	pthread_mutex_lock(&v->mmio.lock);
	*out = v->stats;
	pthread_mutex_unlock(&v->mmio.lock);
}

/* ---- in the VMM's device table (hw/device.h) ---- */

static bool dev_wanted(const struct vm_config *cfg) { return cfg->vsock_uds != NULL; }

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct virtio_vsock *v = malloc(sizeof(*v));
	int err;

	if (!v)
		return -ENOMEM;
	err = virtio_vsock_init(v, env->cfg->vsock_cid, env->cfg->vsock_uds, NULL, env->mem,
				env->mmio_base, env->gsi, env->set_irq, env->ctx);
	if (err) {
		snprintf(env->err, env->err_len,
			 "cannot start vsock on %.300s: %s (a non-socket file there, or a bad --cid)",
			 env->cfg->vsock_uds, strerror(-err));
		*why = env->err;
		free(v);
		return err;
	}
	if ((err = virtio_mmio_attach(&v->mmio, env, v->kick_fd))) {
		*why = "cannot register the vsock device";
		virtio_vsock_destroy(v);
		free(v);
		return err;
	}
	*dev = v;
	return 0;
}

static void dev_destroy(void *dev)
{
	virtio_vsock_destroy(dev);
	free(dev);
}

static void dev_pause(void *dev) { virtio_vsock_pause(dev); }
static void dev_resume(void *dev) { virtio_vsock_resume(dev); }
static void dev_save(void *dev, void *state) { virtio_vsock_save(dev, state); }
/* Open connections are not in a checkpoint: the guest gets a transport
 * reset and connects again (virtio 1.2, 5.10.6.6). */
static int dev_restore(void *dev, const void *state) { return virtio_vsock_restore(dev, state); }

const struct device_ops virtio_vsock_device = {
	.name = "vsock",
	.what = "virtio-vsock",
	.wanted = dev_wanted,
	.option = "--vsock PATH",
	.create = dev_create,
	.destroy = dev_destroy,
	.pause = dev_pause,
	.resume = dev_resume,
	.state_len = sizeof(struct virtio_vsock_state),
	.save = dev_save,
	.restore = dev_restore,
	.resync_irq = virtio_device_resync_irq,
	.cmdline = virtio_device_cmdline,
};
