/* virtio-vsock, host -> guest (devices/vsock_int.h): the rx queue's
 * packets, never more than the guest's credit, one per connection per
 * round. */
#include <endian.h>
#include <errno.h>
#include <linux/virtio_vsock.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/vsock_int.h"

static uint32_t guest_credit(const struct vsock_conn *c)
{
	uint32_t used = c->tx_cnt - c->peer_fwd_cnt;

	return used >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - used;
}

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
	got = want ? readv(c->fd, iov, vsock_chain_iov(v->rxc, true, VSOCK_HDR_LEN, want, iov)) : 0;
	if (got <= 0) { /* FIONREAD promised bytes: the socket broke under us */
		p.op = VIRTIO_VSOCK_OP_RST;
		rx_push(v, &p);
		vsock_conn_free(v, c, false);
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

void vsock_rx_pump(struct virtio_vsock *v)
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
