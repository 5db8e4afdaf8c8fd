/* virtio-vsock driven as Linux's driver drives it: the test plays the guest
 * through rings in a memfd guest RAM, and the host side through real unix
 * sockets.  Connections both ways, refusals, credit in both directions,
 * garbage from host clients and the guest, the connection limit, and the
 * transport reset after a restore. */
#include <errno.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <linux/virtio_vsock.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "devices/virtio_vsock.h"

#define MEM_SIZE (8 << 20)
#define QSIZE 64
#define NRXBUF 32
#define RXBUF 0x100000
#define RXBUF_LEN 4096
#define TXHDR 0x200000
#define TXPAY 0x210000
#define EVBUF 0x300000
#define CID 3
#define RX 0
#define TX 1
#define EV 2

static struct guest_mem mem;
static char dir[64], uds[96];
static int uds_seq;
/* Devices live here, not on a test's stack: a failing test's device is
 * still destroyed by the teardown, and the next test starts clean. */
static struct virtio_vsock dev_a, dev_b;
static struct {
	uint16_t next_avail, last_used;
} gq[3];
static bool rx_split; /* Linux 6.1 posts a header buffer and a data buffer */
static uint64_t guest_cid = CID;
static uint64_t expect_src_cid = VSOCK_HOST_CID;

static void set_irq(void *ctx, uint32_t gsi, int level) {}

static void wr32(struct virtio_vsock *v, uint32_t off, uint32_t val) { v->mmio.bus.write(&v->mmio, off, (uint8_t *)&val, 4); }
static uint32_t rd32(struct virtio_vsock *v, uint32_t off)
{
	uint32_t val;
	v->mmio.bus.read(&v->mmio, off, (uint8_t *)&val, 4);
	return val;
}

static uint8_t *qbase(int q) { return mem.base + 0x10000 * (q + 1); }

static void put_desc(int q, int i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	uint8_t *d = qbase(q) + 16 * i;

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

static void avail_add(struct virtio_vsock *v, int q, uint16_t head)
{
	uint8_t *avail = qbase(q) + 0x1000;

	memcpy(avail + 4 + 2 * (gq[q].next_avail % QSIZE), &head, 2);
	gq[q].next_avail++;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(avail + 2, &gq[q].next_avail, 2);
	wr32(v, VIRTIO_MMIO_QUEUE_NOTIFY, (uint32_t)q);
}

static uint16_t used_idx(int q)
{
	uint16_t i;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(&i, qbase(q) + 0x2000 + 2, 2);
	return i;
}

/* Takes the next used element of queue q, waiting up to ms. */
static bool used_get(int q, uint32_t *id, uint32_t *len, int ms)
{
	uint8_t *e;

	for (int i = 0; used_idx(q) == gq[q].last_used; i++) {
		if (i >= ms * 5)
			return false;
		usleep(200);
	}
	e = qbase(q) + 0x2000 + 4 + 8 * (gq[q].last_used % QSIZE);
	memcpy(id, e, 4);
	memcpy(len, e + 4, 4);
	gq[q].last_used++;
	return true;
}

static void post_rx(struct virtio_vsock *v, int i)
{
	uint64_t b = RXBUF + (uint64_t)i * RXBUF_LEN;

	if (rx_split) {
		put_desc(RX, 2 * i, b, VSOCK_HDR_LEN, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, (uint16_t)(2 * i + 1));
		put_desc(RX, 2 * i + 1, b + 64, RXBUF_LEN - 64, VRING_DESC_F_WRITE, 0);
		avail_add(v, RX, (uint16_t)(2 * i));
	} else {
		put_desc(RX, i, b, RXBUF_LEN, VRING_DESC_F_WRITE, 0);
		avail_add(v, RX, (uint16_t)i);
	}
}

static void post_event(struct virtio_vsock *v, int i)
{
	put_desc(EV, i, EVBUF + 16 * (uint64_t)i, 4, VRING_DESC_F_WRITE, 0);
	memset(mem.base + EVBUF + 16 * i, 0xee, 4);
	avail_add(v, EV, (uint16_t)i);
}

static void bring_up(struct virtio_vsock *v, bool split)
{
	memset(mem.base, 0, 0x80000);
	memset(gq, 0, sizeof(gq));
	rx_split = split;
	wr32(v, VIRTIO_MMIO_STATUS, 0);
	wr32(v, VIRTIO_MMIO_STATUS, 3);
	wr32(v, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr32(v, VIRTIO_MMIO_DRIVER_FEATURES, 1);
	wr32(v, VIRTIO_MMIO_STATUS, 0xb);
	for (int q = 0; q < 3; q++) {
		uint64_t b = (uint64_t)(qbase(q) - mem.base);
		wr32(v, VIRTIO_MMIO_QUEUE_SEL, (uint32_t)q);
		wr32(v, VIRTIO_MMIO_QUEUE_NUM, QSIZE);
		wr32(v, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)b);
		wr32(v, VIRTIO_MMIO_QUEUE_AVAIL_LOW, (uint32_t)(b + 0x1000));
		wr32(v, VIRTIO_MMIO_QUEUE_USED_LOW, (uint32_t)(b + 0x2000));
		wr32(v, VIRTIO_MMIO_QUEUE_READY, 1);
	}
	wr32(v, VIRTIO_MMIO_STATUS, 0xf);
	assert_int_equal(rd32(v, VIRTIO_MMIO_STATUS), 0xf);
	for (int i = 0; i < NRXBUF; i++)
		post_rx(v, i);
	for (int i = 0; i < 4; i++)
		post_event(v, i);
}

static void dev_init(struct virtio_vsock *v, const struct virtio_vsock_opts *o, bool split)
{
	snprintf(uds, sizeof(uds), "%s/v%d.sock", dir, ++uds_seq);
	guest_cid = CID;
	assert_int_equal(virtio_vsock_init(v, CID, uds, o, &mem, 0xd0002000, 7, set_irq, NULL), 0);
	bring_up(v, split);
}

/* Raw tx: header bytes, payload, optionally a device-writable tail. */
static void send_raw(struct virtio_vsock *v, const void *hdr, uint32_t hlen, const void *pay,
		     uint32_t plen, bool writable_tail)
{
	uint32_t id, len;
	uint16_t head = (uint16_t)((gq[TX].next_avail % (QSIZE / 4)) * 4);

	memcpy(mem.base + TXHDR, hdr, hlen);
	if (plen)
		memcpy(mem.base + TXPAY, pay, plen);
	put_desc(TX, head, TXHDR, hlen, (plen || writable_tail) ? VRING_DESC_F_NEXT : 0, (uint16_t)(head + 1));
	if (plen)
		put_desc(TX, head + 1, TXPAY, plen, writable_tail ? VRING_DESC_F_NEXT : 0, (uint16_t)(head + 2));
	if (writable_tail)
		put_desc(TX, plen ? head + 2 : head + 1, TXPAY + 0x20000, 16, VRING_DESC_F_WRITE, 0);
	avail_add(v, TX, head);
	if (!writable_tail) {
		assert_true(used_get(TX, &id, &len, 2000));
		assert_int_equal(id, head);
	}
}

static void send_pkt(struct virtio_vsock *v, uint16_t op, uint32_t src_port, uint32_t dst_port,
		     const void *pay, uint32_t plen, uint32_t flags, uint32_t buf_alloc, uint32_t fwd_cnt)
{
	struct virtio_vsock_hdr h = {
		.src_cid = guest_cid, .dst_cid = VSOCK_HOST_CID, .src_port = src_port,
		.dst_port = dst_port, .len = plen, .type = VIRTIO_VSOCK_TYPE_STREAM,
		.op = op, .flags = flags, .buf_alloc = buf_alloc, .fwd_cnt = fwd_cnt,
	};

	send_raw(v, &h, sizeof(h), pay, plen, false);
}

/* Receives one packet from the device (payload into pay, if given), and
 * gives the buffer back to the device as the driver does. */
static bool recv_pkt(struct virtio_vsock *v, struct virtio_vsock_hdr *h, uint8_t *pay, int ms)
{
	uint32_t id, len;
	int i;
	uint8_t *b;

	if (!used_get(RX, &id, &len, ms))
		return false;
	i = rx_split ? (int)id / 2 : (int)id;
	b = mem.base + RXBUF + (size_t)i * RXBUF_LEN;
	memcpy(h, b, sizeof(*h));
	assert_int_equal(len, VSOCK_HDR_LEN + h->len);
	assert_int_equal(h->src_cid, expect_src_cid);
	assert_int_equal(h->dst_cid, guest_cid);
	assert_int_equal(h->type, VIRTIO_VSOCK_TYPE_STREAM);
	if (pay && h->len)
		memcpy(pay, b + (rx_split ? 64 : VSOCK_HDR_LEN), h->len);
	post_rx(v, i);
	return true;
}

static void expect_pkt(struct virtio_vsock *v, struct virtio_vsock_hdr *h, uint16_t op,
		       uint32_t src_port, uint32_t dst_port)
{
	assert_true(recv_pkt(v, h, NULL, 2000));
	if (h->op != op || h->src_port != src_port || h->dst_port != dst_port)
		fail_msg("got op %u %u -> %u, want op %u %u -> %u", h->op, h->src_port,
			 h->dst_port, op, src_port, dst_port);
	assert_int_equal(h->src_port, src_port);
	assert_int_equal(h->dst_port, dst_port);
}

static void no_pkt(struct virtio_vsock *v, int ms)
{
	struct virtio_vsock_hdr h;

	assert_false(recv_pkt(v, &h, NULL, ms));
}

static struct virtio_vsock_stats stats(struct virtio_vsock *v)
{
	struct virtio_vsock_stats s;

	virtio_vsock_get_stats(v, &s);
	return s;
}

static void wait_conns(struct virtio_vsock *v, uint64_t n)
{
	for (int i = 0; i < 2000 && stats(v).conns_open != n; i++)
		usleep(1000);
	assert_int_equal(stats(v).conns_open, n);
}

/* ---- host side ---- */

static int unix_addr(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	assert_true(strlen(path) < sizeof(a->sun_path));
	memcpy(a->sun_path, path, strlen(path) + 1);
	return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int listen_at(uint32_t port)
{
	struct sockaddr_un a;
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s_%u", uds, port);
	unlink(path); /* left by an earlier test */
	fd = unix_addr(&a, path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 64), 0);
	return fd;
}

static int connect_host(void)
{
	struct sockaddr_un a;
	int fd = unix_addr(&a, uds);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1;
}

static int accept_host(int lfd)
{
	assert_true(readable(lfd, 2000));
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/* Reads exactly n bytes (or until EOF/timeout); returns what was read. */
static size_t read_n(int fd, void *buf, size_t n, int ms)
{
	size_t got = 0;

	while (got < n && readable(fd, ms)) {
		ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* The peer closed: EOF, or ECONNRESET when it closed with our bytes unread. */
static bool eof_within(int fd, int ms)
{
	char c;
	ssize_t r;

	if (!readable(fd, ms))
		return false;
	r = read(fd, &c, 1);
	return r == 0 || (r < 0 && errno == ECONNRESET);
}

static void put(int fd, const void *buf, size_t n)
{
	assert_int_equal(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n);
}

static uint8_t pattern(uint32_t i) { return (uint8_t)(i * 31 + 7); }

/* ---- tests ---- */

static void test_parsers(void **state)
{
	struct { const char *s; int want; uint32_t port; } lines[] = {
		{"CONNECT 52\n", 11, 52},
		{"CONNECT 4294967294\r\n", 20, 4294967294u},
		{"CONNECT 52\nextra", 11, 52},
		{"CONNECT 5", -EAGAIN, 0},
		{"CONNECT 5\r", -EAGAIN, 0},
		{"CONN", -EAGAIN, 0},
		{"CONNECT 4294967295\n", -EINVAL, 0},
		{"CONNECT 99999999999\n", -EINVAL, 0},
		{"CONNECT \n", -EINVAL, 0},
		{"CONNECT -1\n", -EINVAL, 0},
		{"CONNECT 1 2\n", -EINVAL, 0},
		{"CONNECT 5\rx\n", -EINVAL, 0},
		{"connect 5\n", -EINVAL, 0},
		{"GET / HTTP/1.1\r\n", -EINVAL, 0},
		{"CONNECT 0000000000000000000000000001\n", -EINVAL, 0},
	};
	struct virtio_vsock_hdr h = {.src_cid = 3, .dst_cid = 2, .len = 10, .type = 1, .op = 5};
	struct vsock_pkt p;

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		uint32_t port = 0;
		int r = vsock_parse_connect_line(lines[i].s, strlen(lines[i].s), &port);
		if (r != lines[i].want)
			fail_msg("line %zu \"%s\": %d, want %d", i, lines[i].s, r, lines[i].want);
		if (r > 0)
			assert_int_equal(port, lines[i].port);
	}
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h), 10, 3, &p), VSOCK_PKT_OK);
	assert_int_equal(p.len, 10);
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h) - 1, 10, 3, &p), VSOCK_PKT_DROP);
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h), 9, 3, &p), VSOCK_PKT_RST);
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h), 10, 4, &p), VSOCK_PKT_DROP);
	h.op = VIRTIO_VSOCK_OP_RST;
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h), 9, 3, &p), VSOCK_PKT_DROP);
	h.op = 8;
	assert_int_equal(vsock_parse_tx_hdr((uint8_t *)&h, sizeof(h), 10, 3, &p), VSOCK_PKT_RST);
}

static void test_guest_to_host(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	uint8_t buf[256];
	int lfd, hfd;

	dev_init(vp, NULL, true);
	/* The guest reads its CID from config space. */
	assert_int_equal(rd32(vp, 0x100), CID);
	assert_int_equal(rd32(vp, 0x104), 0);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	assert_int_equal(h.buf_alloc, VSOCK_DEFAULT_BUF_ALLOC);
	assert_int_equal(h.fwd_cnt, 0);
	hfd = accept_host(lfd);
	assert_true(hfd >= 0);

	send_pkt(vp, VIRTIO_VSOCK_OP_RW, 5000, 1234, "guest to host", 13, 0, 65536, 0);
	assert_int_equal(read_n(hfd, buf, 13, 2000), 13);
	assert_memory_equal(buf, "guest to host", 13);
	put(hfd, "host to guest", 13);
	assert_true(recv_pkt(vp, &h, buf, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(h.len, 13);
	assert_memory_equal(buf, "host to guest", 13);

	/* Half close from the guest: the host reads EOF and can still send. */
	send_pkt(vp, VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234, NULL, 0, VIRTIO_VSOCK_SHUTDOWN_SEND, 65536, 13);
	assert_true(eof_within(hfd, 2000));
	put(hfd, "late", 4);
	assert_true(recv_pkt(vp, &h, buf, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_RW);
	assert_memory_equal(buf, "late", 4);
	/* Full close: the device answers RST and forgets the connection. */
	send_pkt(vp, VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234, NULL, 0, 3, 65536, 17);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RST, 1234, 5000);
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).bytes_to_host, 13);
	assert_int_equal(stats(vp).bytes_to_guest, 17);
	close(hfd);
	close(lfd);
	virtio_vsock_destroy(vp);
	virtio_vsock_destroy(vp); /* twice is harmless */
}

/* The host opens: CONNECT line, REQUEST, RESPONSE, OK line, data, close. */
static uint32_t host_open(struct virtio_vsock *v, int *cfd, uint32_t port, const char *extra)
{
	struct virtio_vsock_hdr h;
	char line[64], want[64];
	uint32_t hp;

	*cfd = connect_host();
	snprintf(line, sizeof(line), "CONNECT %u\n%s", port, extra);
	put(*cfd, line, strlen(line));
	assert_true(recv_pkt(v, &h, NULL, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(h.dst_port, port);
	hp = h.src_port;
	assert_true(hp >= 1u << 30);
	send_pkt(v, VIRTIO_VSOCK_OP_RESPONSE, port, hp, NULL, 0, 0, 65536, 0);
	snprintf(want, sizeof(want), "OK %u\n", hp);
	memset(line, 0, sizeof(line));
	assert_int_equal(read_n(*cfd, line, strlen(want), 2000), strlen(want));
	assert_string_equal(line, want);
	return hp;
}

static void test_host_to_guest(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	uint8_t buf[64];
	int cfd, cfd2;
	uint32_t hp, hp2;

	dev_init(vp, NULL, false);
	hp = host_open(vp, &cfd, 52, "");
	put(cfd, "ping", 4);
	assert_true(recv_pkt(vp, &h, buf, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(h.src_port, hp);
	assert_int_equal(h.dst_port, 52);
	assert_memory_equal(buf, "ping", 4);
	send_pkt(vp, VIRTIO_VSOCK_OP_RW, 52, hp, "pong", 4, 0, 65536, 4);
	assert_int_equal(read_n(cfd, buf, 4, 2000), 4);
	assert_memory_equal(buf, "pong", 4);

	/* Bytes the client sent right behind its CONNECT line wait for the
	 * guest's RESPONSE and then arrive, after the OK line. */
	hp2 = host_open(vp, &cfd2, 53, "early");
	assert_int_not_equal(hp2, hp);
	assert_true(recv_pkt(vp, &h, buf, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(h.dst_port, 53);
	assert_int_equal(h.len, 5);
	assert_memory_equal(buf, "early", 5);

	/* A host half close: the guest hears only that the host stopped
	 * sending, and can still send. */
	shutdown(cfd2, SHUT_WR);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_SHUTDOWN, hp2, 53);
	assert_int_equal(h.flags, VIRTIO_VSOCK_SHUTDOWN_SEND);
	send_pkt(vp, VIRTIO_VSOCK_OP_RW, 53, hp2, "after", 5, 0, 65536, 5);
	assert_int_equal(read_n(cfd2, buf, 5, 2000), 5);
	assert_memory_equal(buf, "after", 5);

	/* The host client closes: the guest hears both directions are done,
	 * answers RST, and the connection is gone. */
	close(cfd);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_SHUTDOWN, hp, 52);
	assert_int_equal(h.flags, VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND);
	send_pkt(vp, VIRTIO_VSOCK_OP_RST, 52, hp, NULL, 0, 0, 65536, 4);
	wait_conns(vp, 1);
	/* The guest resets the other one: the host client sees EOF. */
	send_pkt(vp, VIRTIO_VSOCK_OP_RST, 53, hp2, NULL, 0, 0, 65536, 5);
	assert_true(eof_within(cfd2, 2000));
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).host_connects, 2);
	close(cfd2);
	virtio_vsock_destroy(vp);
}

static void test_refused(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	int cfd;

	dev_init(vp, NULL, false);
	/* Nothing listens at <uds>_4321. */
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5001, 4321, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RST, 4321, 5001);
	/* Nothing listens on guest port 77: the guest answers RST. */
	cfd = connect_host();
	put(cfd, "CONNECT 77\n", 11);
	assert_true(recv_pkt(vp, &h, NULL, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_REQUEST);
	send_pkt(vp, VIRTIO_VSOCK_OP_RST, 77, h.src_port, NULL, 0, 0, 0, 0);
	assert_true(eof_within(cfd, 2000));
	close(cfd);
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).refused, 1);
	no_pkt(vp, 50);
	virtio_vsock_destroy(vp);
}

/* host -> guest: never more than the guest's buf_alloc, resumed by credit. */
static void test_credit_to_guest(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	static uint8_t data[5000], got[5000];
	uint32_t total = 0;
	int lfd, hfd;

	dev_init(vp, NULL, false);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 1000, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	hfd = accept_host(lfd);
	for (uint32_t i = 0; i < sizeof(data); i++)
		data[i] = pattern(i);
	put(hfd, data, sizeof(data));
	for (uint32_t limit = 1000; limit <= 5000;) {
		while (total < limit) {
			assert_true(recv_pkt(vp, &h, got + total, 2000));
			assert_int_equal(h.op, VIRTIO_VSOCK_OP_RW);
			total += h.len;
			assert_true(total <= limit);
		}
		/* Out of credit: nothing more, though the host socket has more. */
		no_pkt(vp, 150);
		assert_int_equal(stats(vp).bytes_to_guest, limit);
		/* The guest read everything: it grants more room. */
		limit = limit == 1000 ? 2000 : 5000;
		send_pkt(vp, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 5000, 1234, NULL, 0, 0,
			 limit == 2000 ? 1000 : 10000, total);
		if (total == 5000)
			break;
	}
	assert_int_equal(total, 5000);
	assert_memory_equal(got, data, sizeof(data));
	close(hfd);
	close(lfd);
	virtio_vsock_destroy(vp);
}

/* The guest sends as its credit allows (the host reading nothing) until
 * no more credit comes; returns the bytes sent, pattern(i) for byte i. */
static uint32_t fill_until_stuck(struct virtio_vsock *v, uint32_t peer_alloc)
{
	static uint8_t chunk[4096];
	struct virtio_vsock_hdr h;
	uint32_t sent = 0, peer_fwd = 0;

	for (;;) {
		uint32_t credit = peer_alloc - (sent - peer_fwd), n = credit < 4096 ? credit : 4096;
		if (!credit) {
			if (!recv_pkt(v, &h, NULL, 300))
				return sent;
			assert_int_equal(h.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
			peer_fwd = h.fwd_cnt;
			peer_alloc = h.buf_alloc;
			continue;
		}
		for (uint32_t i = 0; i < n; i++)
			chunk[i] = pattern(sent + i);
		send_pkt(v, VIRTIO_VSOCK_OP_RW, 5000, 1234, chunk, n, 0, 65536, 0);
		sent += n;
		assert_true(sent < (64u << 20));
	}
}

/* Reads n bytes and checks them against pattern(). */
static void read_pattern(int fd, uint32_t n)
{
	static uint8_t rd[65536];
	uint32_t received = 0;

	while (received < n) {
		size_t want = n - received < sizeof(rd) ? n - received : sizeof(rd);
		size_t got = read_n(fd, rd, want, 2000);
		assert_true(got > 0);
		for (size_t i = 0; i < got; i++)
			if (rd[i] != pattern(received + (uint32_t)i))
				fail_msg("byte %zu differs", received + i);
		received += (uint32_t)got;
	}
}

/* guest -> host: the device grants only what it can hold, and a guest that
 * sends beyond its credit is reset. */
static void test_credit_from_guest(void **state)
{
	struct virtio_vsock_opts o = {.buf_alloc = 8192};
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	static uint8_t chunk[8193];
	uint32_t sent, peer_alloc;
	int lfd, hfd;

	dev_init(vp, &o, false);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	peer_alloc = h.buf_alloc;
	assert_int_equal(peer_alloc, 8192);
	hfd = accept_host(lfd);
	sent = fill_until_stuck(vp, peer_alloc);
	/* The host socket filled, then the device's buffer, then credit ran out. */
	assert_true(sent > 8192);
	assert_int_equal(stats(vp).bytes_to_host, sent - 8192);
	/* The host reads it all back, in order; the device refills credit. */
	read_pattern(hfd, sent);
	while (recv_pkt(vp, &h, NULL, 200))
		assert_int_equal(h.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
	assert_int_equal(stats(vp).bytes_to_host, sent);
	/* One byte more than the device could ever hold: reset. */
	send_pkt(vp, VIRTIO_VSOCK_OP_RW, 5000, 1234, chunk, sizeof(chunk), 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RST, 1234, 5000);
	assert_true(eof_within(hfd, 2000));
	wait_conns(vp, 0);
	close(hfd);
	close(lfd);
	virtio_vsock_destroy(vp);
}

/* The guest closes with bytes still buffered in the device: the host gets
 * every one of them before EOF, and only then does the guest get its RST. */
static void test_close_flushes(void **state)
{
	struct virtio_vsock_opts o = {.buf_alloc = 8192};
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	uint32_t sent;
	int lfd, hfd;

	dev_init(vp, &o, false);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	hfd = accept_host(lfd);
	sent = fill_until_stuck(vp, h.buf_alloc);
	send_pkt(vp, VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234, NULL, 0, 3, 65536, 0);
	no_pkt(vp, 100); /* not yet: 8 KiB wait for the host */
	assert_int_equal(stats(vp).conns_open, 1);
	read_pattern(hfd, sent);
	assert_true(eof_within(hfd, 2000));
	for (;;) {
		assert_true(recv_pkt(vp, &h, NULL, 2000));
		if (h.op == VIRTIO_VSOCK_OP_RST)
			break;
		assert_int_equal(h.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
	}
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).bytes_to_host, sent);
	close(hfd);
	close(lfd);
	virtio_vsock_destroy(vp);
}

/* The guest stops receiving: the host writer gets EPIPE, the guest can
 * still send. */
static void test_guest_stops_reading(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	uint8_t buf[8];
	int lfd, hfd;

	dev_init(vp, NULL, false);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	hfd = accept_host(lfd);
	send_pkt(vp, VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234, NULL, 0, VIRTIO_VSOCK_SHUTDOWN_RCV, 65536, 0);
	for (int i = 0; i < 2000; i++) {
		if (send(hfd, "x", 1, MSG_NOSIGNAL) < 0)
			break;
		usleep(1000);
	}
	assert_int_equal(send(hfd, "x", 1, MSG_NOSIGNAL), -1);
	assert_int_equal(errno, EPIPE);
	no_pkt(vp, 50);
	send_pkt(vp, VIRTIO_VSOCK_OP_RW, 5000, 1234, "still", 5, 0, 65536, 0);
	assert_int_equal(read_n(hfd, buf, 5, 2000), 5);
	assert_memory_equal(buf, "still", 5);
	send_pkt(vp, VIRTIO_VSOCK_OP_RST, 5000, 1234, NULL, 0, 0, 65536, 0);
	wait_conns(vp, 0);
	close(hfd);
	close(lfd);
	virtio_vsock_destroy(vp);
}

static void test_connect_garbage(void **state)
{
	struct virtio_vsock_opts o = {.handshake_ms = 300};
	const char *bad[] = {"HELLO\n", "CONNECT 99999999999\n", "CONNECT 12abc\n",
			     "CONNECT 1111111111111111111111111111111111111111"};
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h, h2;
	struct timespec t0, t1;
	int fd;

	dev_init(vp, &o, false);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fd = connect_host();
		put(fd, bad[i], strlen(bad[i]));
		/* Closed at once, well before the handshake timeout. */
		if (!eof_within(fd, 200))
			fail_msg("client %zu (\"%s\") not closed", i, bad[i]);
		close(fd);
	}
	/* Silence, and a line that never ends, last until the timeout. */
	for (int i = 0; i < 2; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		fd = connect_host();
		if (i)
			put(fd, "CONNECT 5", 9);
		assert_true(eof_within(fd, 3000));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 250);
		close(fd);
	}
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).bad_lines, 4);
	assert_int_equal(stats(vp).timeouts, 2);
	no_pkt(vp, 50); /* the guest never heard of any of them */
	/* A guest that never answers the REQUEST: the client is closed and the
	 * guest told to forget it. */
	fd = connect_host();
	put(fd, "CONNECT 60\n", 11);
	assert_true(recv_pkt(vp, &h, NULL, 2000));
	assert_int_equal(h.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_true(eof_within(fd, 3000));
	expect_pkt(vp, &h2, VIRTIO_VSOCK_OP_RST, h.src_port, 60);
	assert_int_equal(stats(vp).timeouts, 3);
	wait_conns(vp, 0);
	close(fd);
	virtio_vsock_destroy(vp);
}

static void test_connection_limit(void **state)
{
	struct virtio_vsock_opts o = {.max_conns = 8};
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h;
	int lfd, hfd[8], cfd, responses = 0, resets = 0;

	dev_init(vp, &o, false);
	lfd = listen_at(1234);
	for (uint32_t i = 0; i < 20; i++)
		send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 6000 + i, 1234, NULL, 0, 0, 65536, 0);
	for (int i = 0; i < 20; i++) {
		assert_true(recv_pkt(vp, &h, NULL, 2000));
		responses += h.op == VIRTIO_VSOCK_OP_RESPONSE;
		resets += h.op == VIRTIO_VSOCK_OP_RST;
	}
	assert_int_equal(responses, 8);
	assert_int_equal(resets, 12);
	assert_int_equal(stats(vp).conns_open, 8);
	for (int i = 0; i < 8; i++)
		assert_true((hfd[i] = accept_host(lfd)) >= 0);
	/* A host client beyond the limit is closed at once. */
	cfd = connect_host();
	assert_true(eof_within(cfd, 2000));
	close(cfd);
	/* A flood with no receive buffers left: the device owes more RSTs than
	 * it keeps, drops the excess, and stays up. */
	for (uint32_t i = 0; i < 1000; i++)
		send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 10000 + i, 1234, NULL, 0, 0, 65536, 0);
	resets = 0;
	while (recv_pkt(vp, &h, NULL, 200)) {
		assert_int_equal(h.op, VIRTIO_VSOCK_OP_RST);
		resets++;
	}
	assert_true(resets >= NRXBUF && resets < 1000);
	assert_int_equal(stats(vp).rst_dropped, 1000 - (uint64_t)resets);
	assert_int_equal(stats(vp).refused, 12 + 1 + 1000);
	assert_int_equal(stats(vp).conns_open, 8);
	/* The guest closes its eight; every host end sees EOF; room again. */
	for (uint32_t i = 0; i < 8; i++)
		send_pkt(vp, VIRTIO_VSOCK_OP_RST, 6000 + i, 1234, NULL, 0, 0, 0, 0);
	wait_conns(vp, 0);
	for (int i = 0; i < 8; i++) {
		assert_true(eof_within(hfd[i], 2000));
		close(hfd[i]);
	}
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 7000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 7000);
	close(lfd);
	virtio_vsock_destroy(vp);
}

static void bad_hdr(struct virtio_vsock *v, struct virtio_vsock_hdr hh, uint32_t payload,
		    bool want_rst)
{
	struct virtio_vsock_hdr h;
	static uint8_t pay[256];

	send_raw(v, &hh, sizeof(hh), pay, payload, false);
	if (!want_rst) {
		no_pkt(v, 50);
		return;
	}
	expect_pkt(v, &h, VIRTIO_VSOCK_OP_RST, hh.dst_port, hh.src_port);
}

static void test_bad_headers(void **state)
{
	struct virtio_vsock *const vp = &dev_a;
	struct virtio_vsock_hdr h, ok = {.src_cid = CID, .dst_cid = 2, .src_port = 5000,
					 .dst_port = 1234, .type = 1, .op = 1, .buf_alloc = 4096};
	int lfd, hfd;
	uint64_t bad0;

	dev_init(vp, NULL, false);
	lfd = listen_at(1234);
	h = ok, h.src_cid = 7;          /* spoofed source: dropped */
	bad_hdr(vp, h, 0, false);
	h = ok, h.type = 2;             /* seqpacket: not offered */
	bad_hdr(vp, h, 0, true);
	h = ok, h.op = 0;
	bad_hdr(vp, h, 0, true);
	h = ok, h.op = 99;
	bad_hdr(vp, h, 0, true);
	h = ok, h.op = 5, h.len = 100;  /* len beyond the buffer */
	bad_hdr(vp, h, 10, true);
	h = ok, h.op = 5, h.len = 0x7fffffff;
	bad_hdr(vp, h, 0, true);
	h = ok, h.op = 5, h.len = 4;    /* data for no connection */
	bad_hdr(vp, h, 4, true);
	h = ok, h.op = 7;               /* credit request for no connection */
	bad_hdr(vp, h, 0, true);
	h = ok, h.op = 3;               /* RST for no connection: silence */
	bad_hdr(vp, h, 0, false);
	h = ok, h.op = 3, h.type = 9;   /* a bad RST is not answered either */
	bad_hdr(vp, h, 0, false);
	send_raw(vp, &ok, 20, NULL, 0, false); /* shorter than a header */
	no_pkt(vp, 50);
	assert_int_equal(stats(vp).bad_packets, 8);
	/* Another destination CID: RST from that CID. */
	h = ok, h.dst_cid = 5;
	expect_src_cid = 5;
	bad_hdr(vp, h, 0, true);
	expect_src_cid = VSOCK_HOST_CID;
	assert_int_equal(stats(vp).bad_packets, 9);
	wait_conns(vp, 0);

	/* A REQUEST repeated on an open connection resets it. */
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 4096, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	hfd = accept_host(lfd);
	bad0 = stats(vp).bad_packets;
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 4096, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RST, 1234, 5000);
	assert_true(eof_within(hfd, 2000));
	assert_int_equal(stats(vp).bad_packets, bad0 + 1);
	wait_conns(vp, 0);
	close(hfd);
	assert_int_equal(rd32(vp, VIRTIO_MMIO_STATUS), 0xf);
	/* A tx chain with a device-writable buffer breaks the ring rules. */
	send_raw(vp, &ok, sizeof(ok), NULL, 0, true);
	for (int i = 0; i < 2000 && !(rd32(vp, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET); i++)
		usleep(1000);
	assert_true(rd32(vp, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET);
	close(lfd);
	virtio_vsock_destroy(vp);
}

static bool event_seen(int ms)
{
	uint32_t id, len, ev;

	if (!used_get(EV, &id, &len, ms))
		return false;
	assert_int_equal(len, 4);
	memcpy(&ev, mem.base + EVBUF + 16 * id, 4);
	assert_int_equal(ev, VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	return true;
}

static void test_save_restore(void **state)
{
	struct virtio_vsock *const vp = &dev_a, *const vp2 = &dev_b;
	struct virtio_vsock_state st;
	struct virtio_vsock_hdr h;
	int lfd, hfd, cfd;
	char path2[128];

	dev_init(vp, NULL, false);
	lfd = listen_at(1234);
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5000, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5000);
	hfd = accept_host(lfd);
	host_open(vp, &cfd, 52, "");
	wait_conns(vp, 2);

	/* Checkpoint, then rewind to it: connections are not restored, the
	 * host ends see EOF, the guest gets a transport reset event. */
	virtio_vsock_pause(vp);
	virtio_vsock_save(vp, &st);
	virtio_vsock_resume(vp);
	assert_int_equal(st.version, VIRTIO_VSOCK_STATE_VERSION);
	assert_int_equal(st.guest_cid, CID);
	no_pkt(vp, 20);
	assert_false(event_seen(20));
	assert_int_equal(virtio_vsock_restore(vp, &st), 0);
	assert_true(event_seen(2000));
	assert_true(eof_within(hfd, 2000));
	assert_true(eof_within(cfd, 2000));
	wait_conns(vp, 0);
	assert_int_equal(stats(vp).transport_resets, 1);
	close(hfd);
	close(cfd);
	/* The guest connects again on the same device. */
	send_pkt(vp, VIRTIO_VSOCK_OP_REQUEST, 5001, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp, &h, VIRTIO_VSOCK_OP_RESPONSE, 1234, 5001);
	hfd = accept_host(lfd);

	/* A state of another version is refused and changes nothing. */
	st.version = 99;
	assert_int_equal(virtio_vsock_restore(vp, &st), -EINVAL);
	assert_false(event_seen(50));
	assert_int_equal(stats(vp).conns_open, 1);

	/* Fork: a new device with a new CID and socket takes the state.  The
	 * guest learns its new CID from config space on the reset event. */
	virtio_vsock_pause(vp);
	virtio_vsock_save(vp, &st);
	virtio_vsock_destroy(vp);
	assert_true(eof_within(hfd, 2000));
	close(hfd);
	snprintf(path2, sizeof(path2), "%s/fork.sock", dir);
	assert_int_equal(virtio_vsock_init(vp2, 4, path2, NULL, &mem, 0xd0002000, 7, set_irq, NULL), 0);
	assert_int_equal(virtio_vsock_restore(vp2, &st), 0);
	assert_int_equal(rd32(vp2, VIRTIO_MMIO_STATUS), 0xf);
	assert_true(event_seen(2000));
	assert_int_equal(rd32(vp2, 0x100), 4);
	/* Until the driver has read it, the guest still sends from the old
	 * CID: still the guest's (answered at the new CID).  <uds>_1234
	 * belongs to the first device's path: the fork refuses it. */
	guest_cid = CID;
	send_pkt(vp2, VIRTIO_VSOCK_OP_REQUEST, 5002, 1234, NULL, 0, 0, 65536, 0);
	guest_cid = 4;
	expect_pkt(vp2, &h, VIRTIO_VSOCK_OP_RST, 1234, 5002);
	assert_int_equal(stats(vp2).bad_packets, 0);
	send_pkt(vp2, VIRTIO_VSOCK_OP_REQUEST, 5003, 1234, NULL, 0, 0, 65536, 0);
	expect_pkt(vp2, &h, VIRTIO_VSOCK_OP_RST, 1234, 5003);
	/* Once it has used the new CID, the old one is no longer the guest's: dropped. */
	guest_cid = CID;
	send_pkt(vp2, VIRTIO_VSOCK_OP_REQUEST, 5004, 1234, NULL, 0, 0, 65536, 0);
	guest_cid = 4;
	no_pkt(vp2, 50);
	assert_int_equal(stats(vp2).bad_packets, 1);
	virtio_vsock_destroy(vp2);
	guest_cid = CID;
	close(lfd);
}

static void test_init_errors(void **state)
{
	struct virtio_vsock *const vp = &dev_a, *const vlive = &dev_b;
	struct sockaddr_un a;
	int stale;
	struct virtio_vsock_opts o = {.max_conns = 70000};
	char longp[200], file[128];
	FILE *f;

	assert_int_equal(virtio_vsock_init(vp, 2, uds, NULL, &mem, 0xd0002000, 7, set_irq, NULL), -EINVAL);
	assert_int_equal(virtio_vsock_init(vp, 0xffffffff, uds, NULL, &mem, 0xd0002000, 7, set_irq, NULL), -EINVAL);
	assert_int_equal(virtio_vsock_init(vp, 3, uds, &o, &mem, 0xd0002000, 7, set_irq, NULL), -EINVAL);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = 0;
	assert_int_equal(virtio_vsock_init(vp, 3, longp, NULL, &mem, 0xd0002000, 7, set_irq, NULL), -ENAMETOOLONG);
	snprintf(file, sizeof(file), "%s/plain-file", dir);
	f = fopen(file, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(virtio_vsock_init(vp, 3, file, NULL, &mem, 0xd0002000, 7, set_irq, NULL), -EEXIST);
	virtio_vsock_destroy(vp); /* after a failed init: harmless */
	/* A live device's socket is not taken over; a dead one's is. */
	assert_int_equal(virtio_vsock_init(vlive, 3, uds, NULL, &mem, 0xd0002000, 7, set_irq, NULL), 0);
	assert_int_equal(virtio_vsock_init(vp, 3, uds, NULL, &mem, 0xd0003000, 8, set_irq, NULL), -EADDRINUSE);
	virtio_vsock_destroy(vlive);
	stale = unix_addr(&a, uds);
	assert_int_equal(bind(stale, (struct sockaddr *)&a, sizeof(a)), 0);
	close(stale); /* the path stays, nobody listens */
	assert_int_equal(virtio_vsock_init(vp, 3, uds, NULL, &mem, 0xd0002000, 7, set_irq, NULL), 0);
	virtio_vsock_destroy(vp);
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/kosa8-vsock-test-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(uds, sizeof(uds), "%s/v.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	return guest_mem_create(&mem, MEM_SIZE);
}

static int test_teardown(void **state)
{
	virtio_vsock_destroy(&dev_a);
	virtio_vsock_destroy(&dev_b);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	guest_mem_destroy(&mem);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_parsers, test_teardown),
		cmocka_unit_test_teardown(test_guest_to_host, test_teardown),
		cmocka_unit_test_teardown(test_host_to_guest, test_teardown),
		cmocka_unit_test_teardown(test_refused, test_teardown),
		cmocka_unit_test_teardown(test_credit_to_guest, test_teardown),
		cmocka_unit_test_teardown(test_credit_from_guest, test_teardown),
		cmocka_unit_test_teardown(test_close_flushes, test_teardown),
		cmocka_unit_test_teardown(test_guest_stops_reading, test_teardown),
		cmocka_unit_test_teardown(test_connect_garbage, test_teardown),
		cmocka_unit_test_teardown(test_connection_limit, test_teardown),
		cmocka_unit_test_teardown(test_bad_headers, test_teardown),
		cmocka_unit_test_teardown(test_save_restore, test_teardown),
		cmocka_unit_test_teardown(test_init_errors, test_teardown),
	};
	return cmocka_run_group_tests_name("virtio_vsock", tests, setup, teardown);
}
