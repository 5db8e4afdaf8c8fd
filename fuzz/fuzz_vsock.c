/* Fuzzes the virtio-vsock device as a hostile guest sees it: the input is a
 * script of tx packets (header and payload as the guest writes them), host
 * actions on real unix sockets (accept, write, close, CONNECT lines) and
 * receive-buffer starvation, run through the device's event loop turn by
 * turn (no thread).  Every packet must end in a state change, an RST, a
 * drop or DEVICE_NEEDS_RESET; ASan checks every byte the device touches.
 * The connect-line parser gets each record too. */
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/virtio_vsock.h"

#define RAM (1 << 20)
#define QSIZE 64
#define NRX 16
#define RXBUF 0x40000
#define TXBUF 0x80000
#define EVBUF 0xa0000
#define CID 3
#define MAX_HOST 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct guest_mem mem;
static struct virtio_vsock dev;
static char uds[96];
static int lfd[2] = {-1, -1};
static int host[MAX_HOST];
static int nhost;
static uint16_t next_avail[3], last_used[3];

static void no_irq(void *ctx, uint32_t gsi, int level) {}

static void wr32(uint32_t off, uint32_t val) { dev.mmio.bus.write(&dev.mmio, off, (uint8_t *)&val, 4); }
static uint8_t *qbase(int q) { return mem.base + 0x10000 * (q + 1); }

static void put_desc(int q, int i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	uint8_t *d = qbase(q) + 16 * i;

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

static void avail_add(int q, uint16_t head)
{
	memcpy(qbase(q) + 0x1000 + 4 + 2 * (next_avail[q] % QSIZE), &head, 2);
	next_avail[q]++;
	memcpy(qbase(q) + 0x1000 + 2, &next_avail[q], 2);
	wr32(VIRTIO_MMIO_QUEUE_NOTIFY, (uint32_t)q);
}

/* Gives back every receive buffer the device filled, as the driver does. */
static void recycle_rx(void)
{
	uint16_t used;

	memcpy(&used, qbase(0) + 0x2000 + 2, 2);
	while (last_used[0] != used) {
		uint32_t id;
		memcpy(&id, qbase(0) + 0x2000 + 4 + 8 * (last_used[0] % QSIZE), 4);
		last_used[0]++;
		avail_add(0, (uint16_t)(id % QSIZE));
	}
}

static void bring_up(void)
{
	memset(mem.base, 0, 0x100000);
	memset(next_avail, 0, sizeof(next_avail));
	memset(last_used, 0, sizeof(last_used));
	wr32(VIRTIO_MMIO_STATUS, 0);
	wr32(VIRTIO_MMIO_STATUS, 3);
	wr32(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr32(VIRTIO_MMIO_DRIVER_FEATURES, 1);
	wr32(VIRTIO_MMIO_STATUS, 0xb);
	for (int q = 0; q < 3; q++) {
		uint32_t b = (uint32_t)(qbase(q) - mem.base);
		wr32(VIRTIO_MMIO_QUEUE_SEL, (uint32_t)q);
		wr32(VIRTIO_MMIO_QUEUE_NUM, QSIZE);
		wr32(VIRTIO_MMIO_QUEUE_DESC_LOW, b);
		wr32(VIRTIO_MMIO_QUEUE_AVAIL_LOW, b + 0x1000);
		wr32(VIRTIO_MMIO_QUEUE_USED_LOW, b + 0x2000);
		wr32(VIRTIO_MMIO_QUEUE_READY, 1);
	}
	wr32(VIRTIO_MMIO_STATUS, 0xf);
	for (int i = 0; i < NRX; i++) {
		put_desc(0, i, RXBUF + (uint64_t)i * 4096, 4096, VRING_DESC_F_WRITE, 0);
		avail_add(0, (uint16_t)i);
	}
	for (int i = 0; i < 2; i++) {
		put_desc(2, i, EVBUF + 16 * (uint64_t)i, 4, VRING_DESC_F_WRITE, 0);
		avail_add(2, (uint16_t)i);
	}
}

static int listener(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0)
		abort();
	return fd;
}

static char dir[] = "/tmp/kosa8-fuzz-vsock-XXXXXX";

/* Leaves no sockets or directory behind in /tmp. */
static void cleanup(void)
{
	char path[128];

	virtio_vsock_destroy(&dev);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s_%d", uds, i + 1);
		unlink(path);
	}
	rmdir(dir);
}

static void init_once(void)
{
	struct virtio_vsock_opts o = {.max_conns = 12, .buf_alloc = 4096, .no_thread = true};
	char path[128];

	if (!mkdtemp(dir) || guest_mem_create(&mem, RAM) < 0)
		abort();
	snprintf(uds, sizeof(uds), "%s/v", dir);
	if (virtio_vsock_init(&dev, CID, uds, &o, &mem, 0xd0000000, 5, no_irq, NULL) < 0)
		abort();
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s_%d", uds, i + 1);
		lfd[i] = listener(path);
	}
	atexit(cleanup);
}

/* A tx packet: [flags][split][len lo][len hi] then len bytes. */
static size_t tx_record(const uint8_t *d, size_t n)
{
	static const uint64_t cids[2] = {CID, VSOCK_HOST_CID};
	size_t len, hdr_part;
	uint8_t *buf = mem.base + TXBUF;
	uint16_t head = (uint16_t)((next_avail[1] % (QSIZE / 2)) * 2);

	if (n < 4)
		return n;
	len = (size_t)d[2] | (size_t)d[3] << 8;
	if (len > n - 4)
		len = n - 4;
	memcpy(buf, d + 4, len);
	/* Mostly right addresses, so that the state machine is reached. */
	if ((d[0] & 1) && len >= 16) {
		memcpy(buf, &cids[0], 8);
		memcpy(buf + 8, &cids[1], 8);
	}
	hdr_part = d[1] < len ? d[1] : len;
	if (hdr_part && hdr_part < len) {
		put_desc(1, head, TXBUF, (uint32_t)hdr_part, VRING_DESC_F_NEXT, (uint16_t)(head + 1));
		put_desc(1, head + 1, TXBUF + hdr_part, (uint32_t)(len - hdr_part),
			 (d[0] & 2) ? VRING_DESC_F_WRITE : 0, 0);
	} else {
		put_desc(1, head, TXBUF, (uint32_t)len, 0, 0);
	}
	avail_add(1, head);
	return 4 + len;
}

/* Host side: accept, write, close, or a client with a CONNECT line. */
static size_t host_record(const uint8_t *d, size_t n)
{
	uint8_t op;
	size_t len;

	if (n < 2)
		return n;
	op = d[0];
	len = d[1] % 48;
	if (len > n - 2)
		len = n - 2;
	switch (op % 4) {
	case 0:
		for (int i = 0; i < 2 && nhost < MAX_HOST; i++) {
			int fd = accept4(lfd[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0)
				host[nhost++] = fd;
		}
		break;
	case 1:
		if (nhost && send(host[op / 4 % nhost], d + 2, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* full or closed: both are states the device must handle */
		}
		break;
	case 2:
		if (nhost) {
			int i = op / 4 % nhost;
			close(host[i]);
			host[i] = host[--nhost];
		}
		break;
	case 3:
		if (nhost < MAX_HOST) {
			struct sockaddr_un a = {.sun_family = AF_UNIX};
			int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			snprintf(a.sun_path, sizeof(a.sun_path), "%s", uds);
			if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
				if (send(fd, d + 2, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
					/* the device may already have closed it */
				}
				host[nhost++] = fd;
			} else if (fd >= 0) {
				close(fd);
			}
		}
		break;
	}
	return 2 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct virtio_vsock_state st;
	bool starve = false;
	uint32_t port;
	size_t off = 0;
	struct vsock_pkt p;

	if (!mem.base)
		init_once();
	vsock_parse_tx_hdr(data, size, size, CID, &p);
	vsock_parse_connect_line((const char *)data, size, &port);
	bring_up();
	virtio_vsock_poll(&dev, 0);
	for (int rec = 0; off < size && rec < 64; rec++) {
		uint8_t kind = data[off++];
		switch (kind % 5) {
		case 0:
		case 1:
			off += tx_record(data + off, size - off);
			break;
		case 2:
			off += host_record(data + off, size - off);
			break;
		case 3:
			starve = !starve;
			break;
		case 4:
			if (kind & 0x80) {
				virtio_vsock_pause(&dev);
				virtio_vsock_save(&dev, &st);
				virtio_vsock_resume(&dev);
				if (virtio_vsock_restore(&dev, &st) < 0)
					abort(); /* our own state must load */
			}
			break;
		}
		virtio_vsock_poll(&dev, 0);
		if (!starve)
			recycle_rx();
		virtio_vsock_poll(&dev, 0);
	}
	/* A reset forgets every connection; the host ends are ours to close. */
	wr32(VIRTIO_MMIO_STATUS, 0);
	virtio_vsock_poll(&dev, 0);
	if (dev.nconns)
		abort(); /* a reset must leave no connection behind */
	while (nhost)
		close(host[--nhost]);
	/* Connections the device made that the host never accepted: gone too,
	 * so that one input does not leave state for the next. */
	for (int i = 0; i < 2; i++) {
		int fd;
		while ((fd = accept4(lfd[i], NULL, NULL, SOCK_NONBLOCK)) >= 0)
			close(fd);
	}
	return 0;
}
