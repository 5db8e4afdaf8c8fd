/* virtq-attack: run as root inside a kosa8 guest, after the kernel's
 * driver was unbound from the device attacked (tests/security/run does
 * that).  Drives the device's virtio-mmio registers by hand through
 * /dev/mem, as a guest that owns its kernel could:
 *
 *     virtq-attack [rng]   malformed queues and chains (the transport),
 *                          against virtio-rng
 *     virtq-attack vsock   malformed and hostile packets (the device's own
 *                          parser and connection state), against
 *                          virtio-vsock
 *     virtq-attack blk     malformed block requests against virtio-blk (a
 *                          disk that is not the guest's root: the test
 *                          initramfs's k8.test=blkattack)
 *     virtq-attack blk-ro  writes to a read-only virtio-blk disk
 *
 * Each case prints one line, PREFIX virtq, vsockpkt, blk or blkro:
 *
 *     sec: PREFIX_NAME=ok           the device did what the spec and
 *                                   docs/vsock.md say (needs-reset, an
 *                                   error status, or ignored the request)
 *     sec: PREFIX_NAME=bad: WHY     it did not
 *
 * The host side checks that the VMM is still alive afterwards.  Built on
 * the host, static (like the agent), copied into a sandbox with `kosa8 cp`;
 * the test initramfs carries its own copy for the block cases.
 *
 * Ring memory is this process's own locked pages; their guest-physical
 * addresses come from /proc/self/pagemap (root sees the frame numbers).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* virtio-mmio v2 registers (virtio 1.x, 4.2.2). */
#define R_MAGIC 0x000
#define R_DEVICE_ID 0x008
#define R_DRV_FEAT 0x020
#define R_DRV_FEAT_SEL 0x024
#define R_QUEUE_SEL 0x030
#define R_QUEUE_NUM 0x038
#define R_QUEUE_READY 0x044
#define R_QUEUE_NOTIFY 0x050
#define R_INT_STATUS 0x060
#define R_INT_ACK 0x064
#define R_STATUS 0x070
#define R_DESC_LO 0x080
#define R_DESC_HI 0x084
#define R_AVAIL_LO 0x090
#define R_AVAIL_HI 0x094
#define R_USED_LO 0x0a0
#define R_USED_HI 0x0a4

#define S_ACK 1u
#define S_DRIVER 2u
#define S_DRIVER_OK 4u
#define S_FEATURES_OK 8u
#define S_NEEDS_RESET 0x40u

#define F_NEXT 1
#define F_WRITE 2
#define F_INDIRECT 4

#define QSIZE 8
#define PAGE 4096
#define MAGIC 0x74726976 /* "virt" */
#define ID_BLK 2
#define ID_RNG 4
#define ID_VSOCK 19
#define R_CONFIG 0x100
#define NPAGES 16

struct desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

static volatile uint8_t *regs;
/* "virtq" for the transport cases, "vsockpkt" for the vsock ones, "blk"
 * and "blkro" for the block ones. */
static const char *prefix = "virtq";
/* rng: page 0: descriptor table (first 1 KiB) and an indirect table (the
 * rest is not enough for 256 entries, so indirect tables get their own page
 * 4); page 1: avail ring; page 2: used ring; page 3: data buffer.
 * vsock: pages 5-7 the rx queue's table, avail and used rings, 8-11 its
 * receive buffers; pages 12-14 the tx queue's, 15 the packet sent.
 * blk: the rng's queue pages 0-2 and 4; page 3 a request's header and
 * status byte, 5 discard segments, 8-11 data. */
static uint8_t *pages[NPAGES];
static uint64_t phys[NPAGES];

static uint32_t rd(uint32_t off) { return *(volatile uint32_t *)(regs + off); }
static void wr(uint32_t off, uint32_t v) { *(volatile uint32_t *)(regs + off) = v; }

static void say(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("sec: %s_%s=", prefix, name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static uint64_t virt_to_phys(void *p)
{
	uint64_t entry = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return 0;
	if (pread(fd, &entry, 8, (off_t)((uintptr_t)p / PAGE) * 8) != 8)
		entry = 0;
	close(fd);
	if (!(entry >> 63) || !(entry & ((1ULL << 55) - 1)))
		return 0; /* not present, or frame numbers hidden */
	return (entry & ((1ULL << 55) - 1)) * PAGE;
}

static int alloc_pages(void)
{
	for (int i = 0; i < NPAGES; i++) {
		pages[i] = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_LOCKED | MAP_POPULATE, -1, 0);
		if (pages[i] == MAP_FAILED)
			return -errno;
		memset(pages[i], 0, PAGE);
		phys[i] = virt_to_phys(pages[i]);
		if (!phys[i])
			return -EPERM;
	}
	return 0;
}

/* A device's registers: each virtio_mmio.device=SIZE@BASE:IRQ of the
 * kernel command line is probed for the device id. */
static int find_device(int memfd, uint32_t id)
{
	char cmd[4096], *p;
	FILE *f = fopen("/proc/cmdline", "r");

	if (!f || !fgets(cmd, sizeof(cmd), f))
		return -EIO;
	fclose(f);
	for (p = cmd; (p = strstr(p, "virtio_mmio.device=")); p++) {
		char *at = strchr(p, '@');
		uint64_t base;
		void *m;

		if (!at)
			break;
		base = strtoull(at + 1, NULL, 0);
		m = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, (off_t)(base & ~(uint64_t)(PAGE - 1)));
		if (m == MAP_FAILED)
			continue;
		regs = (volatile uint8_t *)m + (base & (PAGE - 1));
		if (rd(R_MAGIC) == MAGIC && rd(R_DEVICE_ID) == id)
			return 0;
		munmap(m, PAGE);
	}
	return -ENODEV;
}

static void set_addr(uint32_t lo, uint64_t a)
{
	wr(lo, (uint32_t)a);
	wr(lo + 4, (uint32_t)(a >> 32));
}

static void reset_device(void)
{
	wr(R_STATUS, 0);
	wr(R_INT_ACK, rd(R_INT_STATUS));
	for (int i = 0; i < NPAGES; i++)
		memset(pages[i], 0, PAGE);
}

/* Device feature bits 0-23 the cases accept besides indirect descriptors
 * (blk: flush, discard, write zeroes). */
static uint32_t dev_features;

/* Features and status up to FEATURES_OK; 0 when the device took them. */
static int negotiate(bool indirect)
{
	reset_device();
	wr(R_STATUS, S_ACK);
	wr(R_STATUS, S_ACK | S_DRIVER);
	wr(R_DRV_FEAT_SEL, 0);
	wr(R_DRV_FEAT, (indirect ? 1u << 28 : 0) | dev_features);
	wr(R_DRV_FEAT_SEL, 1);
	wr(R_DRV_FEAT, 1); /* VIRTIO_F_VERSION_1 */
	wr(R_STATUS, S_ACK | S_DRIVER | S_FEATURES_OK);
	return rd(R_STATUS) & S_FEATURES_OK ? 0 : -EPROTO;
}

static void queue_setup_sel(uint32_t sel, uint32_t num, uint64_t desc, uint64_t avail, uint64_t used)
{
	wr(R_QUEUE_SEL, sel);
	wr(R_QUEUE_NUM, num);
	set_addr(R_DESC_LO, desc);
	set_addr(R_AVAIL_LO, avail);
	set_addr(R_USED_LO, used);
	wr(R_QUEUE_READY, 1);
}

static void queue_setup(uint32_t num, uint64_t desc, uint64_t avail, uint64_t used)
{
	queue_setup_sel(0, num, desc, avail, used);
}

/* A device set up the way a driver does it; 0 when it is live. */
static int setup(bool indirect)
{
	if (negotiate(indirect))
		return -EPROTO;
	queue_setup(QSIZE, phys[0], phys[1], phys[2]);
	wr(R_STATUS, S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK);
	return rd(R_STATUS) == (S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK) ? 0 : -EPROTO;
}

/* setup() or negotiate() for a case; says why when the device refused. */
static bool start(const char *name, int (*how)(bool), bool indirect)
{
	if (how(indirect) == 0)
		return true;
	say(name, "bad: set-up refused, status 0x%x", rd(R_STATUS));
	return false;
}

/* One queue of ours: table, avail and used ring pages, and how far each
 * side has got.  The queue of a one-queue device (rng, blk), q0, is pages
 * 0-2; vsock's rx and tx 5-7, 12-14. */
struct ring {
	int first_page;
	uint16_t avail_idx, used_seen;
};

static struct ring q0 = {.first_page = 0}, rxq = {.first_page = 5}, txq = {.first_page = 12};

static struct desc *ring_table(const struct ring *r) { return (struct desc *)pages[r->first_page]; }
static volatile uint16_t *ring_avail(const struct ring *r) { return (volatile uint16_t *)pages[r->first_page + 1]; }
static volatile uint8_t *ring_used(const struct ring *r) { return pages[r->first_page + 2]; }
static uint16_t ring_used_idx(const struct ring *r) { return *(volatile uint16_t *)(ring_used(r) + 2); }
static uint32_t ring_used_id(const struct ring *r, uint16_t slot)
{
	return *(volatile uint32_t *)(ring_used(r) + 4 + 8 * (slot % QSIZE));
}
static uint32_t ring_used_len(const struct ring *r, uint16_t slot)
{
	return *(volatile uint32_t *)(ring_used(r) + 8 + 8 * (slot % QSIZE));
}

/* Makes head the next available chain and notifies queue q. */
static void ring_publish(struct ring *r, uint16_t head, uint32_t q)
{
	ring_avail(r)[2 + r->avail_idx % QSIZE] = head;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ring_avail(r)[1] = ++r->avail_idx;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	wr(R_QUEUE_NOTIFY, q);
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&t, NULL);
}

/* Publishes ring entry `head` as the next available chain (avail->idx set
 * to `idx`), kicks queue 0 and waits up to 2 s for the used index to move
 * or the device to ask for a reset. */
static void kick(uint16_t head, uint16_t idx)
{
	q0.avail_idx = (uint16_t)(idx - 1);
	ring_publish(&q0, head, 0);
	for (int i = 0; i < 200; i++) {
		if (ring_used_idx(&q0) || (rd(R_STATUS) & S_NEEDS_RESET))
			break;
		sleep_ms(10);
	}
}

/* The case passed if the device asked for a reset and completed nothing. */
static void expect_reset(const char *name)
{
	uint32_t st = rd(R_STATUS);

	if (rd(R_MAGIC) != MAGIC)
		say(name, "bad: the device stopped answering (magic 0x%x)", rd(R_MAGIC));
	else if (!(st & S_NEEDS_RESET))
		say(name, "bad: status 0x%x without DEVICE_NEEDS_RESET, used idx %u", st, ring_used_idx(&q0));
	else if (ring_used_idx(&q0))
		say(name, "bad: the device completed %u chain(s) before giving up", ring_used_idx(&q0));
	else
		say(name, "ok");
}

static bool buffer_filled(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return true;
	return false;
}

/* Positive control: a well-formed request is answered with entropy.
 * Without it every "needs reset" below could be a device that never
 * worked. */
static void case_control(const char *name)
{
	if (!start(name, setup, false))
		return;
	ring_table(&q0)[0] = (struct desc){phys[3], 64, F_WRITE, 0};
	kick(0, 1);
	if (ring_used_idx(&q0) != 1 || ring_used_len(&q0, 0) != 64 || !buffer_filled(pages[3], 64) ||
	    (rd(R_STATUS) & S_NEEDS_RESET))
		say(name, "bad: used idx %u len %u status 0x%x", ring_used_idx(&q0), ring_used_len(&q0, 0), rd(R_STATUS));
	else
		say(name, "ok");
}

/* One descriptor as the whole chain. */
static void case_one(const char *name, uint64_t addr, uint32_t len, uint16_t flags)
{
	if (!start(name, setup, flags & F_INDIRECT))
		return;
	ring_table(&q0)[0] = (struct desc){addr, len, flags, 0};
	kick(0, 1);
	expect_reset(name);
}

static void case_loop(const char *name)
{
	if (!start(name, setup, false))
		return;
	ring_table(&q0)[0] = (struct desc){phys[3], 16, F_WRITE | F_NEXT, 1};
	ring_table(&q0)[1] = (struct desc){phys[3] + 16, 16, F_WRITE | F_NEXT, 0};
	kick(0, 1);
	expect_reset(name);
}

/* Every descriptor of the queue chained, the last one back to the first:
 * a chain longer than the queue. */
static void case_longer_than_queue(const char *name)
{
	if (!start(name, setup, false))
		return;
	for (int i = 0; i < QSIZE; i++)
		ring_table(&q0)[i] = (struct desc){phys[3] + 8 * i, 8, F_WRITE | F_NEXT, (uint16_t)((i + 1) % QSIZE)};
	kick(0, 1);
	expect_reset(name);
}

/* One indirect descriptor as the whole chain: its table (page 4) holds
 * the n entries given, and the descriptor claims `len` bytes of it. */
static void case_indirect(const char *name, const struct desc *entries, int n, uint32_t len)
{
	if (!start(name, setup, true))
		return;
	memcpy(pages[4], entries, (size_t)n * sizeof(*entries));
	ring_table(&q0)[0] = (struct desc){phys[4], len, F_INDIRECT, 0};
	kick(0, 1);
	expect_reset(name);
}

static void cases_indirect(void)
{
	/* Entries that loop; an entry that is itself indirect (2.7.5.3.1
	 * forbids nesting). */
	const struct desc loop[] = {{phys[3], 16, F_WRITE | F_NEXT, 1}, {phys[3] + 16, 16, F_WRITE | F_NEXT, 0}};
	const struct desc nested[] = {{phys[4], 16, F_INDIRECT, 0}};

	/* A length that claims more entries than any queue has. */
	case_indirect("indirect_len_huge", loop, 0, 16 * 4096);
	case_indirect("indirect_loop", loop, 2, sizeof(loop));
	case_indirect("indirect_nested", nested, 1, sizeof(nested));
}

/* A ring entry naming a descriptor past the table. */
static void case_head_out_of_range(const char *name)
{
	if (!start(name, setup, false))
		return;
	ring_table(&q0)[0] = (struct desc){phys[3], 16, F_WRITE, 0};
	kick(200, 1);
	expect_reset(name);
}

/* The driver claims to be far more than a ring ahead. */
static void case_avail_jump(const char *name)
{
	if (!start(name, setup, false))
		return;
	for (int i = 0; i < QSIZE; i++)
		ring_table(&q0)[i] = (struct desc){phys[3] + 8 * i, 8, F_WRITE, 0};
	kick(0, 40000);
	expect_reset(name);
}

/* Ring addresses outside guest RAM, refused when the queue is made ready. */
static void case_ring_outside_ram(const char *name)
{
	if (!start(name, negotiate, false))
		return;
	queue_setup(QSIZE, 0xfffffffff000ULL, phys[1], phys[2]);
	expect_reset(name);
}

static void case_queue_size(const char *name, uint32_t num)
{
	if (!start(name, negotiate, false))
		return;
	queue_setup(num, phys[0], phys[1], phys[2]);
	expect_reset(name);
}

/* DRIVER_OK without FEATURES_OK (3.1.1 order). */
static void case_status_skip(const char *name)
{
	reset_device();
	wr(R_STATUS, S_ACK);
	wr(R_STATUS, S_ACK | S_DRIVER);
	wr(R_STATUS, S_ACK | S_DRIVER | S_DRIVER_OK);
	expect_reset(name);
}

/* A live device told to take a status bit back. */
static void case_status_clear(const char *name)
{
	if (!start(name, setup, false))
		return;
	wr(R_STATUS, S_ACK | S_DRIVER);
	expect_reset(name);
}

/* Queue registers rewritten while the queue is live. */
static void case_live_queue_change(const char *name)
{
	if (!start(name, setup, false))
		return;
	set_addr(R_DESC_LO, 0xfffffffff000ULL);
	expect_reset(name);
}

/* Notifying queues that do not exist and selecting them: ignored, the
 * device stays live and still answers a good request. */
static void case_bogus_queue(const char *name)
{
	if (!start(name, setup, false))
		return;
	wr(R_QUEUE_NOTIFY, 7);
	wr(R_QUEUE_NOTIFY, 0xffffffff);
	wr(R_QUEUE_SEL, 99);
	wr(R_QUEUE_NUM, 4);
	wr(R_QUEUE_READY, 1);
	wr(R_QUEUE_SEL, 0);
	ring_table(&q0)[0] = (struct desc){phys[3], 32, F_WRITE, 0};
	kick(0, 1);
	if (ring_used_idx(&q0) != 1 || (rd(R_STATUS) & S_NEEDS_RESET))
		say(name, "bad: used idx %u status 0x%x", ring_used_idx(&q0), rd(R_STATUS));
	else
		say(name, "ok");
}

/* ---- virtio-vsock: the device's packet parser and connection state ---- */

#define VQ_RX 0
#define VQ_TX 1
#define RX_BUF 2048
#define HOST_CID 2
#define PROXY_PORT 1080 /* the egress proxy: a port the host listens on */
#define DEAD_PORT 4444  /* nothing listens there */

enum { OP_INVALID, OP_REQUEST, OP_RESPONSE, OP_RST, OP_SHUTDOWN, OP_RW, OP_CREDIT_UPDATE };

struct vhdr {
	uint64_t src_cid, dst_cid;
	uint32_t src_port, dst_port, len;
	uint16_t type, op;
	uint32_t flags, buf_alloc, fwd_cnt;
} __attribute__((packed));

_Static_assert(sizeof(struct vhdr) == 44, "virtio_vsock_hdr is 44 bytes");

static uint64_t guest_cid;
static uint32_t next_port = 50000; /* a fresh guest port per case */

/* Every rx descriptor posted: QSIZE buffers of RX_BUF bytes. */
static void rx_post_all(void)
{
	for (uint16_t i = 0; i < QSIZE; i++) {
		ring_table(&rxq)[i] = (struct desc){phys[8 + i / 2] + (i % 2) * RX_BUF, RX_BUF, F_WRITE, 0};
		ring_publish(&rxq, i, VQ_RX);
	}
}

static int vs_setup(bool indirect)
{
	rxq.avail_idx = rxq.used_seen = txq.avail_idx = txq.used_seen = 0;
	if (negotiate(indirect))
		return -EPROTO;
	queue_setup_sel(VQ_RX, QSIZE, phys[5], phys[6], phys[7]);
	queue_setup_sel(VQ_TX, QSIZE, phys[12], phys[13], phys[14]);
	wr(R_STATUS, S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK);
	if (rd(R_STATUS) != (S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK))
		return -EPROTO;
	guest_cid = rd(R_CONFIG) | (uint64_t)rd(R_CONFIG + 4) << 32;
	rx_post_all();
	return 0;
}

static bool vs_start(const char *name) { return start(name, vs_setup, false); }

static struct vhdr pkt(uint16_t op, uint32_t src_port, uint32_t dst_port)
{
	return (struct vhdr){.src_cid = guest_cid, .dst_cid = HOST_CID, .src_port = src_port,
			     .dst_port = dst_port, .type = 1 /* STREAM */, .op = op,
			     .buf_alloc = 65536};
}

/* Sends h as one descriptor of chain_len bytes (the header, then zeros) with
 * flags; waits up to 2 s for the device to take it.  Returns whether it
 * did (it may instead ask for a reset). */
static bool vs_send_raw(const struct vhdr *h, uint32_t chain_len, uint16_t flags)
{
	uint16_t want = (uint16_t)(txq.used_seen + 1);

	memset(pages[15], 0, PAGE);
	memcpy(pages[15], h, chain_len < sizeof(*h) ? chain_len : sizeof(*h));
	ring_table(&txq)[0] = (struct desc){phys[15], chain_len, flags, 0};
	ring_publish(&txq, 0, VQ_TX);
	for (int i = 0; i < 2000; i++) {
		if (ring_used_idx(&txq) == want) {
			txq.used_seen = want;
			return true;
		}
		if (rd(R_STATUS) & S_NEEDS_RESET)
			return false;
		if (i > 50)
			sleep_ms(1);
	}
	return false;
}

static bool vs_send(const struct vhdr *h) { return vs_send_raw(h, sizeof(*h) + h->len, 0); }

/* The next packet the device put on the rx queue, if any; its buffer is
 * posted again.  A used entry naming no buffer of ours is skipped. */
static bool rx_take(struct vhdr *out)
{
	uint32_t id;

	if (ring_used_idx(&rxq) == rxq.used_seen)
		return false;
	id = ring_used_id(&rxq, rxq.used_seen++);
	if (id >= QSIZE)
		return false;
	memcpy(out, pages[8 + id / 2] + (id % 2) * RX_BUF, sizeof(*out));
	ring_publish(&rxq, (uint16_t)id, VQ_RX);
	return true;
}

/* The next packet for our port within ms milliseconds; others (the host
 * trying the agent's port, say) are skipped. */
static bool vs_recv(uint32_t our_port, int ms, struct vhdr *out)
{
	for (int waited = 0; waited <= ms;) {
		if (rx_take(out)) {
			if (out->dst_port == our_port)
				return true;
			continue;
		}
		sleep_ms(5);
		waited += 5;
	}
	return false;
}

static bool device_live(void)
{
	return rd(R_MAGIC) == MAGIC && !(rd(R_STATUS) & S_NEEDS_RESET);
}

/* The packet was taken and answered with a reset for our port, from the
 * address it was sent to, and the device is still live. */
static void expect_rst(const char *name, const struct vhdr *h, uint32_t chain_len)
{
	struct vhdr r;

	if (!vs_send_raw(h, chain_len, 0))
		say(name, "bad: packet not taken, status 0x%x", rd(R_STATUS));
	else if (!vs_recv(h->src_port, 2000, &r))
		say(name, "bad: no reply within 2 s (want RST), status 0x%x", rd(R_STATUS));
	else if (r.op != OP_RST || r.dst_cid != guest_cid || r.src_port != h->dst_port)
		say(name, "bad: reply op %u from %llu:%u to %llu:%u (want RST from the packet's destination)",
		    r.op, (unsigned long long)r.src_cid, r.src_port, (unsigned long long)r.dst_cid, r.dst_port);
	else if (!device_live())
		say(name, "bad: status 0x%x after the RST", rd(R_STATUS));
	else
		say(name, "ok");
}

/* The packet was taken and dropped: nothing comes back for our port (a
 * reply to a spoofed source would go to someone else), device live. */
static void expect_dropped(const char *name, const struct vhdr *h, uint32_t chain_len)
{
	struct vhdr r;

	if (!vs_send_raw(h, chain_len, 0))
		say(name, "bad: packet not taken, status 0x%x", rd(R_STATUS));
	else if (vs_recv(h->src_port, 1000, &r))
		say(name, "bad: got op %u from %llu:%u", r.op, (unsigned long long)r.src_cid, r.src_port);
	else if (!device_live())
		say(name, "bad: status 0x%x", rd(R_STATUS));
	else
		say(name, "ok");
}

/* Connects to the host's proxy port: the RESPONSE comes back (0), or not. */
static int vs_connect(uint32_t port)
{
	struct vhdr h = pkt(OP_REQUEST, port, PROXY_PORT), r;

	if (!vs_send(&h) || !vs_recv(port, 3000, &r))
		return -ETIMEDOUT;
	return r.op == OP_RESPONSE && r.src_cid == HOST_CID && r.src_port == PROXY_PORT ? 0 : -EPROTO;
}

/* Positive control: a connection to a port the host listens on is
 * accepted, then closed with our RST.  Without it, every RST below could
 * be a device that refuses everything. */
static void vcase_control(const char *name)
{
	uint32_t port = next_port++;
	struct vhdr rst = pkt(OP_RST, port, PROXY_PORT);
	int err;

	if (!vs_start(name))
		return;
	if ((err = vs_connect(port)))
		say(name, "bad: no RESPONSE from the host's port %u (%s), status 0x%x", PROXY_PORT,
		    strerror(-err), rd(R_STATUS));
	else if (!vs_send(&rst) || !device_live())
		say(name, "bad: closing it: status 0x%x", rd(R_STATUS));
	else
		say(name, "ok");
}

/* Headers the device must answer with a reset (5.10.6.3: a packet it
 * cannot handle), one fresh port each. */
static void vcases_rst(void)
{
	struct vhdr h;

#define RST_CASE(label, ...)                                            \
	do {                                                            \
		h = pkt(OP_REQUEST, next_port++, PROXY_PORT);           \
		__VA_ARGS__;                                            \
		expect_rst(label, &h, sizeof(h));                       \
	} while (0)
	if (!vs_start("rst_cases"))
		return;
	RST_CASE("dst_cid_not_host", h.dst_cid = 3);
	RST_CASE("dst_cid_itself", h.dst_cid = guest_cid);
	RST_CASE("type_seqpacket", h.type = 2);
	RST_CASE("type_unknown", h.type = 0xffff);
	RST_CASE("op_invalid", h.op = OP_INVALID);
	RST_CASE("op_unknown", h.op = 0x99);
	/* A length the chain does not hold, and one past any packet. */
	RST_CASE("len_beyond_chain", h.op = OP_RW, h.len = 4096);
	RST_CASE("len_huge", h.op = OP_RW, h.len = 0xffffffffu);
	RST_CASE("rw_without_connection", h.op = OP_RW);
	RST_CASE("shutdown_without_connection", h.op = OP_SHUTDOWN, h.flags = 3);
	RST_CASE("port_nobody_listens_on", h.dst_port = DEAD_PORT);
#undef RST_CASE
}

/* Packets the device must drop without answering. */
static void vcases_drop(void)
{
	struct vhdr h;

	if (!vs_start("drop_cases"))
		return;
	h = pkt(OP_REQUEST, next_port++, PROXY_PORT);
	h.src_cid = guest_cid + 1;
	expect_dropped("src_cid_spoofed", &h, sizeof(h));
	h = pkt(OP_REQUEST, next_port++, PROXY_PORT);
	h.src_cid = HOST_CID;
	expect_dropped("src_cid_host", &h, sizeof(h));
	h = pkt(OP_REQUEST, next_port++, PROXY_PORT);
	expect_dropped("header_cut_short", &h, 20);
	/* A reset is never answered with a reset (two peers could ping-pong). */
	h = pkt(OP_RST, next_port++, DEAD_PORT);
	expect_dropped("rst_for_nothing", &h, sizeof(h));
}

/* A packet in a device-writable buffer breaks the tx queue's rules: the
 * device asks for a reset. */
static void vcase_writable_tx(const char *name)
{
	struct vhdr h = pkt(OP_REQUEST, next_port++, PROXY_PORT);

	if (!vs_start(name))
		return;
	vs_send_raw(&h, sizeof(h), F_WRITE);
	if (rd(R_MAGIC) != MAGIC)
		say(name, "bad: the device stopped answering");
	else if (!(rd(R_STATUS) & S_NEEDS_RESET))
		say(name, "bad: status 0x%x without DEVICE_NEEDS_RESET", rd(R_STATUS));
	else
		say(name, "ok");
}

/* REQUEST again on an open connection: the connection is reset. */
static void vcase_request_twice(const char *name)
{
	uint32_t port = next_port++;
	struct vhdr h = pkt(OP_REQUEST, port, PROXY_PORT), r;

	if (!vs_start(name))
		return;
	if (vs_connect(port)) {
		say(name, "bad: the first connect got no RESPONSE");
		return;
	}
	if (!vs_send(&h) || !vs_recv(port, 2000, &r))
		say(name, "bad: no reply to the second REQUEST, status 0x%x", rd(R_STATUS));
	else if (r.op != OP_RST)
		say(name, "bad: reply op %u, want RST", r.op);
	else
		say(name, "ok");
}

/* A data flood on a connection the host side refuses: the egress proxy
 * reads its 12-byte header, gets zeros and closes.  The device must reset
 * the connection and drop what follows rather than hold it (every packet
 * is within one packet's limit; 4096 of them, 16 MiB, would be far past
 * any credit).  No port of kosa8's host side keeps a connection open
 * without reading, so the credit bound itself (a reset for the byte past
 * it) is shown by the unit test test_credit_from_guest, not here. */
static void vcase_flood_refused(const char *name)
{
	uint32_t port = next_port++, sent = 0;
	struct vhdr h = pkt(OP_REQUEST, port, PROXY_PORT), r;
	bool reset = false;

	if (!vs_start(name))
		return;
	if (!vs_send(&h) || !vs_recv(port, 3000, &r) || r.op != OP_RESPONSE) {
		say(name, "bad: no RESPONSE to connect");
		return;
	}
	h.op = OP_RW;
	h.len = PAGE - sizeof(h);
	for (int i = 0; i < 4096 && !reset; i++) { /* 16 MiB, far past any credit */
		if (!vs_send(&h)) {
			say(name, "bad: packet %d not taken, status 0x%x", i, rd(R_STATUS));
			return;
		}
		sent += h.len;
		while (vs_recv(port, 0, &r))
			reset |= r.op == OP_RST;
	}
	printf("sec: info_vsockpkt_data_flood=sent %u bytes before the reset, reset %d\n", sent, reset);
	if (!reset) {
		say(name, "bad: no RST after %u bytes to a host side that closed", sent);
		return;
	}
	/* The connection is gone: more data on it is answered, not kept. */
	for (int i = 0; i < 8; i++) {
		if (!vs_send(&h) || !vs_recv(port, 2000, &r) || r.op != OP_RST) {
			say(name, "bad: packet %d after the reset not answered with RST, status 0x%x", i,
			    rd(R_STATUS));
			return;
		}
	}
	say(name, device_live() ? "ok" : "bad: device not live");
}

/* Reads the rx queue dry (until it stays empty for 200 ms): the resets
 * for ports [lo, hi) among what the device still owed us. */
static int drain_rsts(uint32_t lo, uint32_t hi)
{
	struct vhdr r;
	int got = 0;

	for (;;) {
		if (rx_take(&r)) {
			got += r.op == OP_RST && r.dst_port >= lo && r.dst_port < hi;
			continue;
		}
		sleep_ms(200);
		if (ring_used_idx(&rxq) == rxq.used_seen)
			return got;
	}
}

/* Thousands of connects to a port nobody listens on, without reading the
 * resets: the device keeps a bounded backlog of them and stays live; then
 * the rx queue is read dry and a real connect still works. */
static void vcase_rst_flood(const char *name, int n)
{
	struct vhdr h;
	int got, taken = 0;
	uint32_t port = next_port;

	if (!vs_start(name))
		return;
	next_port += (uint32_t)n;
	for (int i = 0; i < n; i++) {
		h = pkt(OP_REQUEST, port + (uint32_t)i, DEAD_PORT);
		taken += vs_send(&h);
	}
	got = drain_rsts(port, port + (uint32_t)n);
	printf("sec: info_vsockpkt_rst_flood=sent %d, taken %d, resets %d\n", n, taken, got);
	if (taken != n || !device_live())
		say(name, "bad: %d of %d taken, status 0x%x", taken, n, rd(R_STATUS));
	/* The rx ring's QSIZE buffers, then what the device keeps: 512 resets
	 * (RST_BACKLOG in src/devices/vsock_int.h); more would mean it
	 * holds one per connect, which a guest could grow without end. */
	else if (got < QSIZE || got > 1024)
		say(name, "bad: %d resets for %d connects (want %d to 1024)", got, n, QSIZE);
	else if (vs_connect(next_port++))
		say(name, "bad: no connect after the flood");
	else
		say(name, "ok");
}

/* ---- virtio-blk: the device's request parser (5.2.6) ---- */

#define T_IN 0
#define T_OUT 1
#define T_FLUSH 4
#define T_GET_ID 8
#define T_DISCARD 11
#define T_WRITE_ZEROES 13
#define BS_OK 0
#define BS_IOERR 1
#define BS_UNSUPP 2
#define BLK_F_FLUSH (1u << 9)
#define BLK_F_DISCARD (1u << 13)
#define BLK_F_WRITE_ZEROES (1u << 14)
/* Page 3 holds a request's header (offset 0) and its status byte; page 5
 * discard segments; pages 8-11 data, one descriptor each. */
#define STATUS_OFF 2048
#define STATUS_UNSET 0xee
#define CANARY 0xa5
/* What init wrote to sector 8 through the kernel's driver before
 * unbinding it, and what the case control_write writes to sector 9 (init
 * reads it back through the driver once it is bound again). */
#define PATTERN_INIT "k8-blk-attack-pattern"
#define PATTERN_HAND "k8-blk-written-by-hand"

static uint64_t capacity; /* sectors, from the device's config space */

struct seg {
	uint64_t sector;
	uint32_t num_sectors, flags;
};

/* The disk's size in sectors: the first field of blk's config space. */
static uint64_t read_capacity(void)
{
	return rd(R_CONFIG) | (uint64_t)rd(R_CONFIG + 4) << 32;
}

static struct desc hdr_desc(uint32_t type, uint64_t sector)
{
	struct {
		uint32_t type, reserved;
		uint64_t sector;
	} h = {type, 0, sector};

	memcpy(pages[3], &h, sizeof(h));
	return (struct desc){phys[3], sizeof(h), 0, 0};
}

static struct desc data_desc(int i, uint32_t len, uint16_t flags)
{
	return (struct desc){phys[8 + i], len, flags, 0};
}

static struct desc status_desc(void)
{
	pages[3][STATUS_OFF] = STATUS_UNSET;
	return (struct desc){phys[3] + STATUS_OFF, 1, F_WRITE, 0};
}

static struct desc segs_desc(const struct seg *s, int n, uint32_t len)
{
	memcpy(pages[5], s, (size_t)n * sizeof(*s));
	return (struct desc){phys[5], len, 0, 0};
}

/* Chains n descriptors as request 0 and kicks it. */
static void submit(const struct desc *d, int n)
{
	for (int i = 0; i < n; i++) {
		struct desc e = d[i];
		if (i + 1 < n) {
			e.flags |= F_NEXT;
			e.next = (uint16_t)(i + 1);
		}
		ring_table(&q0)[i] = e;
	}
	kick(0, 1);
}

/* Whether the request was answered with status `want` and `len` bytes
 * written in all (5.2.6: the status byte counts), the device still live;
 * says why not. */
static bool answered(const char *name, uint8_t want, uint32_t len)
{
	uint8_t got = pages[3][STATUS_OFF];

	if (rd(R_STATUS) & S_NEEDS_RESET)
		say(name, "bad: the device asked for a reset (status 0x%x)", rd(R_STATUS));
	else if (ring_used_idx(&q0) != 1)
		say(name, "bad: not completed within 2 s (used idx %u)", ring_used_idx(&q0));
	else if (got != want || ring_used_len(&q0, 0) != len)
		say(name, "bad: status %u, %u bytes written; want status %u, %u bytes", got,
		    ring_used_len(&q0, 0), want, len);
	else
		return true;
	return false;
}

static bool canary_intact(int page, size_t from)
{
	for (size_t i = from; i < PAGE; i++)
		if (pages[page][i] != CANARY)
			return false;
	return true;
}

/* One request of three descriptors (header, one data buffer, status). */
static void rw_request(uint32_t type, uint64_t sector, uint32_t len, uint16_t data_flags)
{
	struct desc d[] = {hdr_desc(type, sector), data_desc(0, len, data_flags), status_desc()};

	submit(d, 3);
}

/* A request with no data: the header and the status byte. */
static void bare_request(uint32_t type, uint64_t sector)
{
	struct desc d[] = {hdr_desc(type, sector), status_desc()};

	submit(d, 2);
}

/* Reads one sector into page 8 in a request of its own; 0 when answered. */
static int read_sector(uint64_t sector)
{
	if (setup(false))
		return -EPROTO;
	rw_request(T_IN, sector, 512, F_WRITE);
	return ring_used_idx(&q0) == 1 && pages[3][STATUS_OFF] == BS_OK ? 0 : -EIO;
}

/* Positive controls: without them every error below could be a device
 * that never worked. */
static void blk_control_read(const char *name)
{
	if (!start(name, setup, false))
		return;
	rw_request(T_IN, 8, 512, F_WRITE);
	if (!answered(name, BS_OK, 513))
		return;
	if (memcmp(pages[8], PATTERN_INIT, strlen(PATTERN_INIT)))
		say(name, "bad: sector 8 does not hold what init wrote there");
	else
		say(name, "ok");
}

static void blk_control_write(const char *name)
{
	if (!start(name, setup, false))
		return;
	memcpy(pages[8], PATTERN_HAND, strlen(PATTERN_HAND));
	rw_request(T_OUT, 9, 512, 0);
	if (!answered(name, BS_OK, 1))
		return;
	if (read_sector(9) || memcmp(pages[8], PATTERN_HAND, strlen(PATTERN_HAND)))
		say(name, "bad: sector 9 does not read back as written");
	else
		say(name, "ok");
}

/* The serial in a buffer of `len` bytes: no byte past it is touched. */
static void blk_get_id(const char *name, uint32_t len)
{
	if (!start(name, setup, false))
		return;
	memset(pages[8], CANARY, PAGE);
	rw_request(T_GET_ID, 0, len, F_WRITE);
	if (!answered(name, BS_OK, (len < 20 ? len : 20) + 1))
		return;
	if (memcmp(pages[8], "kosa8-disk0", len < 11 ? len : 11) || !canary_intact(8, len))
		say(name, "bad: the serial is not 'kosa8-disk0' cut to %u bytes, or bytes past it changed", len);
	else
		say(name, "ok");
}

/* The header split over two descriptors: any framing is legal (2.6.4). */
static void blk_header_split(const char *name)
{
	struct desc d[4];

	if (!start(name, setup, false))
		return;
	d[0] = hdr_desc(T_IN, 8);
	d[0].len = 8;
	d[1] = (struct desc){phys[3] + 8, 8, 0, 0};
	d[2] = data_desc(0, 512, F_WRITE);
	d[3] = status_desc();
	submit(d, 4);
	if (answered(name, BS_OK, 513))
		say(name, "ok");
}

/* A read spread over an indirect table: 4 data buffers of 1 KiB. */
static void blk_indirect_read(const char *name)
{
	struct desc *t = (struct desc *)pages[4];

	if (!start(name, setup, true))
		return;
	t[0] = hdr_desc(T_IN, 8);
	for (int i = 0; i < 4; i++)
		t[1 + i] = data_desc(i, 1024, F_WRITE);
	t[5] = status_desc();
	for (int i = 0; i < 5; i++) {
		t[i].flags |= F_NEXT;
		t[i].next = (uint16_t)(i + 1);
	}
	ring_table(&q0)[0] = (struct desc){phys[4], 6 * sizeof(*t), F_INDIRECT, 0};
	kick(0, 1);
	if (answered(name, BS_OK, 4097))
		say(name, "ok");
}

/* A read or write the device must answer with an error status, and stay
 * live. */
static void blk_rw_refused(const char *name, uint32_t type, uint64_t sector, uint32_t len, uint8_t want)
{
	if (!start(name, setup, false))
		return;
	memset(pages[8], CANARY, PAGE);
	rw_request(type, sector, len, type == T_IN ? F_WRITE : 0);
	if (!answered(name, want, 1))
		return;
	if (type == T_IN && !canary_intact(8, 0))
		say(name, "bad: the refused read wrote into the guest's buffer");
	else
		say(name, "ok");
}

/* A request of a header and a status byte only, answered with `want`. */
static void blk_bare(const char *name, uint32_t type, uint8_t want)
{
	if (!start(name, setup, false))
		return;
	bare_request(type, 0);
	if (answered(name, want, 1))
		say(name, "ok");
}

/* n discard (or write-zeroes) segments, `len` bytes of them sent,
 * answered with `want`. */
static void blk_segs(const char *name, uint32_t type, const struct seg *s, int n, uint32_t len,
			     uint8_t want)
{
	struct desc d[3];

	if (!start(name, setup, false))
		return;
	d[0] = hdr_desc(type, 0);
	if (len) {
		d[1] = segs_desc(s, n, len);
		d[2] = status_desc();
		submit(d, 3);
	} else {
		d[1] = status_desc();
		submit(d, 2);
	}
	if (answered(name, want, 1))
		say(name, "ok");
}

static void blk_cases_segs(void)
{
	struct seg many[33], one = {0, 8, 0};

	for (int i = 0; i < 33; i++)
		many[i] = (struct seg){(uint64_t)i * 8, 8, 0};
	/* 32 is the max_discard_seg the device offers. */
	blk_segs("discard_33_segments", T_DISCARD, many, 33, sizeof(many), BS_IOERR);
	blk_segs("discard_no_segment", T_DISCARD, NULL, 0, 0, BS_IOERR);
	/* One whole segment and half of another: not a multiple of 16 bytes. */
	blk_segs("discard_partial_segment", T_DISCARD, many, 2, sizeof(one) + 8, BS_IOERR);
	blk_segs("discard_unknown_flag", T_DISCARD, &(struct seg){0, 8, 2}, 1, sizeof(one), BS_UNSUPP);
	blk_segs("discard_past_end", T_DISCARD, &(struct seg){capacity - 1, 2, 0}, 1, sizeof(one), BS_IOERR);
	blk_segs("discard_sector_wraps", T_DISCARD, &(struct seg){UINT64_MAX, 1, 0}, 1, sizeof(one), BS_IOERR);
	blk_segs("write_zeroes_4g_sectors", T_WRITE_ZEROES, &(struct seg){0, UINT32_MAX, 0}, 1, sizeof(one),
			 BS_IOERR);
}

/* Whether the request was completed (whatever its status), the device
 * still live; says why not. */
static bool completed(const char *name)
{
	if (!(rd(R_STATUS) & S_NEEDS_RESET) && ring_used_idx(&q0) == 1)
		return true;
	say(name, "bad: status 0x%x, used idx %u", rd(R_STATUS), ring_used_idx(&q0));
	return false;
}

/* Buffers facing the wrong way: a read whose data buffer the device may
 * only read, a write whose data buffer it may only write.  Neither moves
 * a byte between the disk and that buffer. */
static void blk_read_into_readonly(const char *name)
{
	if (!start(name, setup, false))
		return;
	memset(pages[8], CANARY, PAGE);
	rw_request(T_IN, 8, 512, 0);
	if (!completed(name))
		return;
	if (!canary_intact(8, 0))
		say(name, "bad: the device wrote disk data into a buffer it may only read");
	else
		say(name, "ok");
}

static void blk_write_from_writable(const char *name)
{
	if (!start(name, setup, false))
		return;
	memset(pages[8], CANARY, PAGE);
	rw_request(T_OUT, 10, 512, F_WRITE);
	if (!completed(name))
		return;
	if (!canary_intact(8, 0))
		say(name, "bad: the device wrote into the data buffer of a write");
	else if (read_sector(10) || buffer_filled(pages[8], 512))
		say(name, "bad: sector 10 no longer reads as zeros");
	else
		say(name, "ok");
}

/* A request published and notified before DRIVER_OK: the notify reaches
 * the device's I/O thread through KVM's doorbell, past the transport's
 * checks, so the thread must see for itself that the driver is not ready
 * and take nothing.  Once DRIVER_OK is set, a notify gets it served. */
static void blk_notify_before_driver_ok(const char *name)
{
	if (!start(name, negotiate, false))
		return;
	queue_setup(QSIZE, phys[0], phys[1], phys[2]);
	rw_request(T_IN, 8, 512, F_WRITE); /* waits 2 s for an answer */
	if (ring_used_idx(&q0) || (rd(R_STATUS) & S_NEEDS_RESET)) {
		say(name, "bad: before DRIVER_OK the device answered (used idx %u, status 0x%x)",
		    ring_used_idx(&q0), rd(R_STATUS));
		return;
	}
	wr(R_STATUS, S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK);
	wr(R_QUEUE_NOTIFY, 0);
	for (int i = 0; i < 200 && !ring_used_idx(&q0); i++)
		sleep_ms(10);
	if (answered(name, BS_OK, 513))
		say(name, "ok");
}

/* Chains no request may have: the device asks for a reset and completes
 * nothing. */
static void blk_malformed(const char *name, struct desc *d, int n)
{
	submit(d, n);
	expect_reset(name);
}

static void blk_cases_malformed(void)
{
	struct desc d[4];

	if (start("no_status_byte", setup, false)) {
		d[0] = hdr_desc(T_IN, 8);
		d[1] = data_desc(0, 512, 0);
		blk_malformed("no_status_byte", d, 2);
	}
	if (start("header_short", setup, false)) {
		d[0] = hdr_desc(T_IN, 8);
		d[0].len = 8;
		d[1] = status_desc();
		blk_malformed("header_short", d, 2);
	}
	if (start("header_device_writable", setup, false)) {
		d[0] = hdr_desc(T_IN, 8);
		d[0].flags = F_WRITE;
		d[1] = status_desc();
		blk_malformed("header_device_writable", d, 2);
	}
	if (start("status_len_zero", setup, false)) {
		d[0] = hdr_desc(T_FLUSH, 0);
		d[1] = status_desc();
		d[1].len = 0;
		blk_malformed("status_len_zero", d, 2);
	}
	if (start("data_readable_after_status", setup, false)) {
		d[0] = hdr_desc(T_OUT, 8);
		d[1] = status_desc();
		d[2] = data_desc(0, 512, 0);
		blk_malformed("data_readable_after_status", d, 3);
	}
	if (start("data_outside_ram", setup, false)) {
		d[0] = hdr_desc(T_IN, 0);
		d[1] = (struct desc){0xfff000000000ULL, 512, F_WRITE, 0};
		d[2] = status_desc();
		blk_malformed("data_outside_ram", d, 3);
	}
	if (start("data_len_4g", setup, false)) {
		d[0] = hdr_desc(T_IN, 0);
		d[1] = data_desc(0, UINT32_MAX, F_WRITE);
		d[2] = status_desc();
		blk_malformed("data_len_4g", d, 3);
	}
}

static void attack_blk(void)
{
	dev_features = BLK_F_FLUSH | BLK_F_DISCARD | BLK_F_WRITE_ZEROES;
	capacity = read_capacity();
	blk_control_read("control_read");
	blk_control_write("control_write");
	blk_bare("control_flush", T_FLUSH, BS_OK);
	blk_segs("control_discard", T_DISCARD, &(struct seg){100, 8, 0}, 1, sizeof(struct seg), BS_OK);
	blk_get_id("control_get_id", 20);
	blk_header_split("header_split_over_two_buffers");
	blk_indirect_read("indirect_read");
	blk_notify_before_driver_ok("notify_before_driver_ok");
	blk_rw_refused("read_at_capacity", T_IN, capacity, 512, BS_IOERR);
	blk_rw_refused("read_across_end", T_IN, capacity - 1, 1024, BS_IOERR);
	blk_rw_refused("read_sector_wraps", T_IN, UINT64_MAX, 512, BS_IOERR);
	blk_rw_refused("read_sector_times_512_wraps", T_IN, 1ULL << 55, 512, BS_IOERR);
	blk_rw_refused("read_len_not_sectors", T_IN, 8, 100, BS_IOERR);
	blk_rw_refused("write_at_capacity", T_OUT, capacity, 512, BS_IOERR);
	blk_rw_refused("write_across_end", T_OUT, capacity - 1, 1024, BS_IOERR);
	blk_bare("type_unknown", 0x99, BS_UNSUPP);
	blk_bare("type_all_ones", UINT32_MAX, BS_UNSUPP);
	blk_bare("type_secure_erase", 14, BS_UNSUPP);
	blk_get_id("get_id_4_byte_buffer", 4);
	blk_cases_segs();
	blk_read_into_readonly("read_into_readonly_buffer");
	blk_write_from_writable("write_from_writable_buffer");
	blk_cases_malformed();
	/* After all that, a reset brings the device back. */
	blk_control_read("recovers_after_reset");
	reset_device();
}

/* A read-only disk (--disk-ro): every kind of write refused. */
static void attack_blk_ro(void)
{
	struct seg one = {0, 8, 0};

	dev_features = 0; /* it offers no flush, discard or write zeroes */
	capacity = read_capacity();
	blk_control_read("control_read");
	blk_rw_refused("write", T_OUT, 8, 512, BS_IOERR);
	blk_segs("discard", T_DISCARD, &one, 1, sizeof(one), BS_IOERR);
	blk_segs("write_zeroes", T_WRITE_ZEROES, &one, 1, sizeof(one), BS_IOERR);
	blk_control_read("still_reads_after_writes");
	reset_device();
}

static void attack_vsock(void)
{
	prefix = "vsockpkt";
	vcase_control("control_connect");
	vcases_rst();
	vcases_drop();
	vcase_writable_tx("tx_buffer_writable");
	vcase_request_twice("request_on_open_connection");
	vcase_flood_refused("data_flood_host_refuses");
	vcase_rst_flood("rst_flood", 3000);
	vcase_control("recovers_after_reset");
	reset_device();
}

static void attack_rng(void)
{
	case_control("control_good_request");
	case_one("desc_outside_ram", 0xfff000000000ULL, 64, F_WRITE);
	case_one("desc_len_overflow", phys[3], 0xffffffffu, F_WRITE);
	case_one("desc_addr_wraps", 0xfffffffffffff000ULL, 0x2000, F_WRITE);
	case_one("desc_readable_for_rng", phys[3], 64, 0);
	case_loop("chain_loop");
	case_longer_than_queue("chain_longer_than_queue");
	cases_indirect();
	case_head_out_of_range("head_out_of_range");
	case_avail_jump("avail_idx_jump");
	case_ring_outside_ram("ring_outside_ram");
	case_queue_size("queue_size_not_power_of_2", 7);
	case_queue_size("queue_size_over_max", 65535);
	case_status_skip("status_driver_ok_before_features_ok");
	case_status_clear("status_bit_cleared");
	case_live_queue_change("live_queue_changed");
	case_bogus_queue("bogus_queue_ignored");
	/* After all that, a reset brings the device back. */
	case_control("recovers_after_reset");
	reset_device();
}

int main(int argc, char **argv)
{
	static const struct {
		const char *arg, *prefix, *device;
		uint32_t id;
		void (*attack)(void);
	} modes[] = {
		{"rng", "virtq", "rng", ID_RNG, attack_rng},
		{"vsock", "vsockpkt", "vsock", ID_VSOCK, attack_vsock},
		{"blk", "blk", "blk", ID_BLK, attack_blk},
		{"blk-ro", "blkro", "blk", ID_BLK, attack_blk_ro},
	};
	const char *arg = argc > 1 ? argv[1] : "rng";
	int memfd, err;
	size_t m;

	for (m = 0; m < sizeof(modes) / sizeof(modes[0]) && strcmp(arg, modes[m].arg); m++)
		;
	if (argc > 2 || m == sizeof(modes) / sizeof(modes[0])) {
		fprintf(stderr, "usage: virtq-attack [rng|vsock|blk|blk-ro]\n");
		return 2;
	}
	prefix = modes[m].prefix;
	if ((err = alloc_pages())) {
		say("setup", "bad: cannot lock ring pages or read their frames: %s", strerror(-err));
		return 1;
	}
	memfd = open("/dev/mem", O_RDWR | O_SYNC);
	if (memfd < 0) {
		say("setup", "bad: /dev/mem: %s", strerror(errno));
		return 1;
	}
	if ((err = find_device(memfd, modes[m].id))) {
		say("setup", "bad: no virtio-%s device on the command line: %s", modes[m].device,
		    strerror(-err));
		return 1;
	}
	say("setup", "ok");
	modes[m].attack();
	return 0;
}
