/* virtio-vsock, guest -> host (devices/vsock_int.h): the tx queue's
 * packets, each checked (vsock_parse_tx_hdr) before it touches a
 * connection or a host socket. */
#include <endian.h>
#include <errno.h>
#include <linux/virtio_vsock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/vsock_int.h"

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
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || !(c = vsock_conn_new(v, fd))) {
		if (fd >= 0)
			close(fd);
		v->stats.refused++;
		vsock_queue_rst(v, VSOCK_HOST_CID, p->dst_port, p->src_port);
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
		vsock_conn_error(v, c, "guest sent data after shutting down sending");
		return;
	}
	/* The credit we gave is the bound on what we hold for the guest. */
	if (p->len > cap - c->buf_len) {
		vsock_conn_error(v, c, "guest sent more than its credit");
		return;
	}
	c->rx_cnt += p->len;
	if (c->hup) { /* the host peer is gone: nothing can take these bytes */
		c->fwd_cnt += p->len;
		vsock_credit_check(v, c);
		return;
	}
	if (!c->buf_len && p->len) {
		ssize_t w = vsock_send_iov(c->fd, iov, vsock_chain_iov(ch, false, VSOCK_HDR_LEN, p->len, iov));
		if (w < 0 && !vsock_again()) {
			vsock_conn_free(v, c, true);
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
			vsock_conn_free(v, c, true);
			return;
		}
		tail = (c->buf_head + c->buf_len) % cap;
		uint32_t first = cap - tail < rest ? cap - tail : rest;
		virtq_read_out(ch, VSOCK_HDR_LEN + done, c->buf + tail, first);
		virtq_read_out(ch, VSOCK_HDR_LEN + done + first, c->buf, rest - first);
		c->buf_len += rest;
	}
	vsock_credit_check(v, c);
}

static void guest_shutdown(struct virtio_vsock *v, struct vsock_conn *c, uint32_t flags)
{
	c->guest_shut |= flags & SHUT_BOTH;
	if (c->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV)
		shutdown(c->fd, SHUT_RD); /* the host writer learns nobody reads */
	if (c->guest_shut == SHUT_BOTH && c->buf_len && !c->deadline)
		c->deadline = mono_ms() + v->opts.close_ms;
	vsock_conn_settle(v, c);
}

static void guest_response(struct virtio_vsock *v, struct vsock_conn *c)
{
	char line[VSOCK_LINE_MAX];
	int n = snprintf(line, sizeof(line), "OK %u\n", c->local_port);

	if (send(c->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n) {
		vsock_conn_free(v, c, true);
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
		vsock_conn_free(v, c, false);
		return;
	}
	if (c->state == C_HOST_REQUEST) {
		if (p->op == VIRTIO_VSOCK_OP_RESPONSE && !c->need_request) {
			guest_response(v, c);
			return;
		}
		vsock_conn_error(v, c, "guest sent a packet other than RESPONSE to a connect");
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
		vsock_conn_error(v, c, "guest sent REQUEST or RESPONSE on an open connection");
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
		c = vsock_conn_find(v, p.src_port, p.dst_port);
	if (verdict != VSOCK_PKT_OK) {
		v->stats.bad_packets++;
		log_warn_once(LOG_KIND, 1, "virtio-vsock: bad packet header from the guest (logged once)");
		if (verdict == VSOCK_PKT_RST && c)
			vsock_conn_free(v, c, true);
		else if (verdict == VSOCK_PKT_RST)
			vsock_queue_rst(v, p.dst_cid, p.dst_port, p.src_port);
		return;
	}
	if (c) {
		conn_packet(v, c, &p, ch);
		return;
	}
	if (p.op == VIRTIO_VSOCK_OP_REQUEST)
		guest_connect(v, &p);
	else if (p.op != VIRTIO_VSOCK_OP_RST)
		vsock_queue_rst(v, VSOCK_HOST_CID, p.dst_port, p.src_port);
}

void vsock_tx_process(struct virtio_vsock *v)
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
