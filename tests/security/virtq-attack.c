/* virtq-attack: run as root inside a kosa8 guest, after the kernel's
 * virtio_rng driver was unbound from its device (tests/security/run does
 * that).  Drives the virtio-rng device's virtio-mmio registers by hand
 * through /dev/mem and hands it malformed queues and chains, as a guest that
 * owns its kernel could.  Each case prints one line
 *
 *     sec: virtq_NAME=ok            the device did what the spec and
 *                                   docs/vsock.md say (needs-reset, or
 *                                   ignored the request)
 *     sec: virtq_NAME=bad: WHY      it did not
 *
 * The host side checks that the VMM is still alive afterwards.  Built on
 * the host, static (like the agent), copied in with `kosa8 cp`.
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
#define ID_RNG 4

struct desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

static volatile uint8_t *regs;
/* Page 0: descriptor table (first 1 KiB) and an indirect table (the rest is
 * not enough for 256 entries, so indirect tables get their own page 4);
 * page 1: avail ring; page 2: used ring; page 3: data buffer. */
static uint8_t *pages[5];
static uint64_t phys[5];

static uint32_t rd(uint32_t off) { return *(volatile uint32_t *)(regs + off); }
static void wr(uint32_t off, uint32_t v) { *(volatile uint32_t *)(regs + off) = v; }

static void say(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("sec: virtq_%s=", name);
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
	for (int i = 0; i < 5; i++) {
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

/* The rng device's registers: each virtio_mmio.device=SIZE@BASE:IRQ of the
 * kernel command line is probed for device id 4. */
static int find_rng(int memfd, uint64_t *base_out)
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
		if (rd(R_MAGIC) == MAGIC && rd(R_DEVICE_ID) == ID_RNG) {
			*base_out = base;
			return 0;
		}
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
	for (int i = 0; i < 5; i++)
		memset(pages[i], 0, PAGE);
}

/* Features and status up to FEATURES_OK; 0 when the device took them. */
static int negotiate(bool indirect)
{
	reset_device();
	wr(R_STATUS, S_ACK);
	wr(R_STATUS, S_ACK | S_DRIVER);
	wr(R_DRV_FEAT_SEL, 0);
	wr(R_DRV_FEAT, indirect ? 1u << 28 : 0);
	wr(R_DRV_FEAT_SEL, 1);
	wr(R_DRV_FEAT, 1); /* VIRTIO_F_VERSION_1 */
	wr(R_STATUS, S_ACK | S_DRIVER | S_FEATURES_OK);
	return rd(R_STATUS) & S_FEATURES_OK ? 0 : -EPROTO;
}

static void queue_setup(uint32_t num, uint64_t desc, uint64_t avail, uint64_t used)
{
	wr(R_QUEUE_SEL, 0);
	wr(R_QUEUE_NUM, num);
	set_addr(R_DESC_LO, desc);
	set_addr(R_AVAIL_LO, avail);
	set_addr(R_USED_LO, used);
	wr(R_QUEUE_READY, 1);
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

static struct desc *table(void) { return (struct desc *)pages[0]; }
static volatile uint16_t *avail(void) { return (volatile uint16_t *)pages[1]; }
static volatile uint16_t *used_idx(void) { return (volatile uint16_t *)(pages[2] + 2); }
static uint32_t used_len(uint16_t slot) { return *(volatile uint32_t *)(pages[2] + 4 + 8 * slot + 4); }

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
	avail()[2 + (uint16_t)(idx - 1) % QSIZE] = head;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	avail()[1] = idx;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	wr(R_QUEUE_NOTIFY, 0);
	for (int i = 0; i < 200; i++) {
		if (*used_idx() || (rd(R_STATUS) & S_NEEDS_RESET))
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
		say(name, "bad: status 0x%x without DEVICE_NEEDS_RESET, used idx %u", st, *used_idx());
	else if (*used_idx())
		say(name, "bad: the device completed %u chain(s) before giving up", *used_idx());
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
	table()[0] = (struct desc){phys[3], 64, F_WRITE, 0};
	kick(0, 1);
	if (*used_idx() != 1 || used_len(0) != 64 || !buffer_filled(pages[3], 64) ||
	    (rd(R_STATUS) & S_NEEDS_RESET))
		say(name, "bad: used idx %u len %u status 0x%x", *used_idx(), used_len(0), rd(R_STATUS));
	else
		say(name, "ok");
}

/* One descriptor as the whole chain. */
static void case_one(const char *name, uint64_t addr, uint32_t len, uint16_t flags)
{
	if (!start(name, setup, flags & F_INDIRECT))
		return;
	table()[0] = (struct desc){addr, len, flags, 0};
	kick(0, 1);
	expect_reset(name);
}

static void case_loop(const char *name)
{
	if (!start(name, setup, false))
		return;
	table()[0] = (struct desc){phys[3], 16, F_WRITE | F_NEXT, 1};
	table()[1] = (struct desc){phys[3] + 16, 16, F_WRITE | F_NEXT, 0};
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
		table()[i] = (struct desc){phys[3] + 8 * i, 8, F_WRITE | F_NEXT, (uint16_t)((i + 1) % QSIZE)};
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
	table()[0] = (struct desc){phys[4], len, F_INDIRECT, 0};
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
	table()[0] = (struct desc){phys[3], 16, F_WRITE, 0};
	kick(200, 1);
	expect_reset(name);
}

/* The driver claims to be far more than a ring ahead. */
static void case_avail_jump(const char *name)
{
	if (!start(name, setup, false))
		return;
	for (int i = 0; i < QSIZE; i++)
		table()[i] = (struct desc){phys[3] + 8 * i, 8, F_WRITE, 0};
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
	table()[0] = (struct desc){phys[3], 32, F_WRITE, 0};
	kick(0, 1);
	if (*used_idx() != 1 || (rd(R_STATUS) & S_NEEDS_RESET))
		say(name, "bad: used idx %u status 0x%x", *used_idx(), rd(R_STATUS));
	else
		say(name, "ok");
}

int main(void)
{
	uint64_t base;
	int memfd, err;

	if ((err = alloc_pages())) {
		say("setup", "bad: cannot lock ring pages or read their frames: %s", strerror(-err));
		return 1;
	}
	memfd = open("/dev/mem", O_RDWR | O_SYNC);
	if (memfd < 0) {
		say("setup", "bad: /dev/mem: %s", strerror(errno));
		return 1;
	}
	if ((err = find_rng(memfd, &base))) {
		say("setup", "bad: no virtio-rng device on the command line: %s", strerror(-err));
		return 1;
	}
	say("setup", "ok");
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
	return 0;
}
