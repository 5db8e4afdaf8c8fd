/* virtio-blk on a real layered disk file, driven through the transport as
 * Linux's driver does it: write, read back, flush, discard, and the requests
 * a hostile guest could send. */
#include <errno.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <linux/virtio_ring.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "devices/virtio_blk.h"

#define MEM_SIZE (4 << 20)
#define QSIZE 16
#define DESC 0x1000
#define AVAIL 0x2000
#define USED 0x3000
#define HDR 0x10000
#define DATA 0x20000
#define STATUS 0x11000
#define DISK_BYTES (1 << 20)

static struct guest_mem mem;
static char dir[64];
static uint16_t next_avail;

static volatile int irq_level;
static void set_irq(void *ctx, uint32_t gsi, int level) { irq_level = level; }

static void wr32(struct virtio_mmio *t, uint32_t off, uint32_t v) { t->bus.write(t, off, (uint8_t *)&v, 4); }
static uint32_t rd32(struct virtio_mmio *t, uint32_t off)
{
	uint32_t v;
	t->bus.read(t, off, (uint8_t *)&v, 4);
	return v;
}

static void put_desc(int i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	uint8_t *d = mem.base + DESC + 16 * i;

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

static uint16_t used_idx(void)
{
	uint16_t v;

	memcpy(&v, mem.base + USED + 2, 2);
	return v;
}

/* Posts a 3-part request (header, data, status) and notifies. */
static void post_request(struct virtio_blk *b, uint32_t type, uint64_t sector, uint32_t len, bool data_in)
{
	struct { uint32_t type, reserved; uint64_t sector; } h = {type, 0, sector};
	uint16_t slot = next_avail++;
	uint16_t idx = next_avail;

	memcpy(mem.base + HDR, &h, sizeof(h));
	mem.base[STATUS] = 0xee;
	if (len) {
		put_desc(0, HDR, 16, VRING_DESC_F_NEXT, 1);
		put_desc(1, DATA, len, VRING_DESC_F_NEXT | (data_in ? VRING_DESC_F_WRITE : 0), 2);
		put_desc(2, STATUS, 1, VRING_DESC_F_WRITE, 0);
	} else {
		put_desc(0, HDR, 16, VRING_DESC_F_NEXT, 2);
		put_desc(2, STATUS, 1, VRING_DESC_F_WRITE, 0);
	}
	memcpy(mem.base + AVAIL + 4 + 2 * (slot % QSIZE), &(uint16_t){0}, 2);
	memcpy(mem.base + AVAIL + 2, &idx, 2);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
}

/* Posts a request and waits for completion. */
static uint8_t request(struct virtio_blk *b, uint32_t type, uint64_t sector, uint32_t len, bool data_in)
{
	uint16_t before = used_idx();

	post_request(b, type, sector, len, data_in);
	for (int i = 0; i < 5000 && used_idx() == before; i++)
		usleep(1000);
	assert_int_not_equal(used_idx(), before);
	return mem.base[STATUS];
}

static void bring_up(struct virtio_blk *b)
{
	memset(mem.base, 0, 0x10000);
	next_avail = 0;
	wr32(&b->mmio, VIRTIO_MMIO_STATUS, 3);
	wr32(&b->mmio, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr32(&b->mmio, VIRTIO_MMIO_DRIVER_FEATURES, 1);
	/* Take what the device offers of what this driver wants. */
	wr32(&b->mmio, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	uint32_t offered = rd32(&b->mmio, VIRTIO_MMIO_DEVICE_FEATURES);
	wr32(&b->mmio, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr32(&b->mmio, VIRTIO_MMIO_DRIVER_FEATURES,
	     offered & ((1u << VIRTIO_BLK_F_FLUSH) | (1u << VIRTIO_BLK_F_DISCARD) | (1u << VIRTIO_BLK_F_RO)));
	wr32(&b->mmio, VIRTIO_MMIO_STATUS, 0xb);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_DESC_LOW, DESC);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_AVAIL_LOW, AVAIL);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_USED_LOW, USED);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_READY, 1);
	wr32(&b->mmio, VIRTIO_MMIO_STATUS, 0xf);
	assert_int_equal(rd32(&b->mmio, VIRTIO_MMIO_STATUS), 0xf);
}

static struct disk *make_disk(const char *name, bool ro)
{
	char path[128], err[DISK_ERR_LEN];
	struct disk *d = NULL;
	struct disk_create_opts o = {.size = DISK_BYTES};

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (access(path, F_OK) != 0)
		assert_int_equal(disk_create(path, NULL, &o, err, sizeof(err)), 0);
	assert_int_equal(disk_open(&d, path, ro ? DISK_RDONLY : 0, err, sizeof(err)), 0);
	return d;
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/kosa8-blk-test-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	return guest_mem_create(&mem, MEM_SIZE);
}

static int teardown(void **state)
{
	char cmd[128];

	guest_mem_destroy(&mem);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

static void test_write_read_flush(void **state)
{
	struct virtio_blk b;
	uint8_t pattern[8192];

	assert_int_equal(virtio_blk_init(&b, make_disk("rw", false), false, "serial-1", &mem,
					 0xd0001000, 6, set_irq, NULL), 0);
	/* Capacity in config space, in sectors. */
	uint32_t cap = rd32(&b.mmio, 0x100);
	assert_int_equal(cap, DISK_BYTES / 512);
	bring_up(&b);
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + 3);
	memcpy(mem.base + DATA, pattern, sizeof(pattern));
	assert_int_equal(request(&b, VIRTIO_BLK_T_OUT, 100, sizeof(pattern), false), VIRTIO_BLK_S_OK);
	memset(mem.base + DATA, 0, sizeof(pattern));
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 100, sizeof(pattern), true), VIRTIO_BLK_S_OK);
	assert_memory_equal(mem.base + DATA, pattern, sizeof(pattern));
	assert_int_equal(request(&b, VIRTIO_BLK_T_FLUSH, 0, 0, false), VIRTIO_BLK_S_OK);
	/* GET_ID answers the serial. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_GET_ID, 0, 20, true), VIRTIO_BLK_S_OK);
	assert_memory_equal(mem.base + DATA, "serial-1", 8);
	/* Discard: reads back zeros. */
	struct { uint64_t sector; uint32_t n, flags; } seg = {100, 16, 0};
	memcpy(mem.base + DATA, &seg, sizeof(seg));
	assert_int_equal(request(&b, VIRTIO_BLK_T_DISCARD, 0, sizeof(seg), false), VIRTIO_BLK_S_OK);
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 100, 8192, true), VIRTIO_BLK_S_OK);
	for (int i = 0; i < 8192; i++)
		assert_int_equal(mem.base[DATA + i], 0);
	assert_int_equal(b.stats.writes, 1);
	virtio_blk_destroy(&b);
}

static void test_bad_requests(void **state)
{
	struct virtio_blk b;

	assert_int_equal(virtio_blk_init(&b, make_disk("bad", false), false, NULL, &mem,
					 0xd0001000, 6, set_irq, NULL), 0);
	bring_up(&b);
	/* Past the end of the disk, straddling it, a sector number that overflows. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, DISK_BYTES / 512, 512, true), VIRTIO_BLK_S_IOERR);
	assert_int_equal(request(&b, VIRTIO_BLK_T_OUT, DISK_BYTES / 512 - 1, 1024, false), VIRTIO_BLK_S_IOERR);
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, UINT64_MAX / 256, 512, true), VIRTIO_BLK_S_IOERR);
	/* Not a whole number of sectors. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_OUT, 0, 100, false), VIRTIO_BLK_S_IOERR);
	/* Unknown type. */
	assert_int_equal(request(&b, 0x77, 0, 512, true), VIRTIO_BLK_S_UNSUPP);
	/* Discard with a bad segment list length. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_DISCARD, 0, 10, false), VIRTIO_BLK_S_IOERR);
	assert_true(b.stats.errors >= 5);
	/* Still alive and serving. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 0, 512, true), VIRTIO_BLK_S_OK);
	/* A chain without a status byte cannot be answered: device needs reset. */
	put_desc(0, HDR, 16, 0, 0);
	uint16_t idx = ++next_avail;
	memcpy(mem.base + AVAIL + 2, &idx, 2);
	wr32(&b.mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	for (int i = 0; i < 5000 && !(rd32(&b.mmio, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET); i++)
		usleep(1000);
	assert_true(rd32(&b.mmio, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET);
	virtio_blk_destroy(&b);
}

/* Interrupt coalescing in the device: with an interrupt known to cost a
 * lot, a completion's interrupt may wait for a window (virtio/coalesce.h),
 * but it always comes, and a checkpoint's pause raises it at once, so the
 * saved state never holds completions the guest was not told of. */
static void test_interrupt_windows(void **state)
{
	struct virtio_blk b;
	int i;

	assert_int_equal(virtio_blk_init(&b, make_disk("irq", false), false, NULL, &mem,
					 0xd0001000, 6, set_irq, NULL), 0);
	bring_up(&b);
	/* A first request: no cost measured yet, so no window. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 0, 512, true), VIRTIO_BLK_S_OK);
	for (i = 0; i < 5000 && !irq_level; i++)
		usleep(1000);
	assert_int_equal(irq_level, 1);
	assert_int_equal(b.interrupts, 1);
	/* The driver acknowledges: the transport timed it for the device. */
	usleep(20000);
	wr32(&b.mmio, VIRTIO_MMIO_INTERRUPT_ACK, 1);
	assert_int_equal(irq_level, 0);
	assert_int_equal(b.coalesce.cost_ns, COALESCE_COST_CAP_NS); /* 20 ms, capped */

	/* Now a window is open after each batch; the interrupt still comes. */
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 8, 512, true), VIRTIO_BLK_S_OK);
	for (i = 0; i < 5000 && !irq_level; i++)
		usleep(1000);
	assert_int_equal(irq_level, 1);
	assert_int_equal(b.coalesce.expired + b.coalesce.caught, 1);
	wr32(&b.mmio, VIRTIO_MMIO_INTERRUPT_ACK, 1);

	/* A pause closes an open window: the interrupt is raised by the time it
	 * returns.  The window is 2 ms at most, so the test watches the used
	 * ring without sleeping and tries again when it missed the window. */
	int seen_open = 0;
	for (int tries = 0; tries < 50 && !seen_open; tries++) {
		uint16_t before = used_idx();
		pthread_mutex_lock(&b.mmio.lock);
		b.coalesce.mult = 1;
		pthread_mutex_unlock(&b.mmio.lock);
		post_request(&b, VIRTIO_BLK_T_IN, 16, 512, true);
		for (long spin = 0; spin < 2000000000L && used_idx() == before; spin++)
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
		assert_int_not_equal(used_idx(), before);
		/* Under the device's lock: the thread pushes, then opens the
		 * window and asks for no kicks, in one hold of it. */
		uint16_t flags;
		int level;
		pthread_mutex_lock(&b.mmio.lock);
		seen_open = b.window_end != 0;
		level = irq_level;
		memcpy(&flags, mem.base + USED, 2);
		pthread_mutex_unlock(&b.mmio.lock);
		/* While a window is open the driver is asked not to kick, and
		 * the interrupt waits. */
		if (seen_open) {
			assert_int_equal(flags, VRING_USED_F_NO_NOTIFY);
			assert_int_equal(level, 0);
		}
		virtio_blk_pause(&b);
		memcpy(&flags, mem.base + USED, 2);
		assert_int_equal(flags, 0); /* and asked again when it closes */
		assert_int_equal(irq_level, 1);
		assert_int_equal(rd32(&b.mmio, VIRTIO_MMIO_INTERRUPT_STATUS) & 1, 1);
		assert_int_equal(b.window_end, 0);
		assert_int_equal(b.unsignalled, 0);
		virtio_blk_resume(&b);
		wr32(&b.mmio, VIRTIO_MMIO_INTERRUPT_ACK, 1);
	}
	assert_true(seen_open);
	virtio_blk_destroy(&b);
}

/* Request k of a batch sits in its own region: header, CHUNK bytes of
 * data, status byte, back to back, so two descriptors carry it (header
 * with data for a write, data with status for a read) and a batch fits
 * the 16-entry ring. */
#define CHUNK 0x10000
#define STRIDE (CHUNK + 0x1000)
#define BATCH (QSIZE / 2)

static uint8_t *req_data(int k) { return mem.base + DATA + (uint64_t)STRIDE * k + 16; }
static uint8_t req_status(int k) { return req_data(k)[CHUNK]; }

static void put_batch_request(int k, uint32_t type, uint64_t sector)
{
	struct { uint32_t type, reserved; uint64_t sector; } h = {type, 0, sector};
	uint64_t r = DATA + (uint64_t)STRIDE * k;

	memcpy(mem.base + r, &h, sizeof(h));
	req_data(k)[CHUNK] = 0xee;
	if (type == VIRTIO_BLK_T_OUT) {
		put_desc(2 * k, r, 16 + CHUNK, VRING_DESC_F_NEXT, 2 * k + 1);
		put_desc(2 * k + 1, r + 16 + CHUNK, 1, VRING_DESC_F_WRITE, 0);
	} else {
		put_desc(2 * k, r, 16, VRING_DESC_F_NEXT, 2 * k + 1);
		put_desc(2 * k + 1, r + 16, CHUNK + 1, VRING_DESC_F_WRITE, 0);
	}
	memcpy(mem.base + AVAIL + 4 + 2 * (next_avail % QSIZE), &(uint16_t){(uint16_t)(2 * k)}, 2);
	next_avail++;
}

/* Makes the batch available with one kick, as a driver does after a plug. */
static void publish(struct virtio_blk *b)
{
	memcpy(mem.base + AVAIL + 2, &next_avail, 2);
	wr32(&b->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
}

static void wait_used(uint16_t want)
{
	for (int i = 0; i < 10000 && used_idx() != want; i++)
		usleep(1000);
	assert_int_equal(used_idx(), want);
}

/* Every head comes back once, whatever order the workers finished in. */
static void check_used_heads(uint16_t from, int n)
{
	bool seen[BATCH] = {false};

	for (int i = 0; i < n; i++) {
		uint32_t id;
		memcpy(&id, mem.base + USED + 4 + 8 * ((from + i) % QSIZE), 4);
		assert_true(id % 2 == 0 && id / 2 < BATCH);
		assert_false(seen[id / 2]);
		seen[id / 2] = true;
	}
}

/* A batch of requests is spread over the I/O threads: with the disk held
 * (its write lock), every worker takes one and waits, so nworkers
 * requests are in flight at once; released, all complete, out of order
 * or not, with the right data. */
static void test_parallel_workers(void **state)
{
	struct virtio_blk b;
	unsigned inflight = 0;

	assert_int_equal(virtio_blk_init(&b, make_disk("par", false), false, NULL, &mem,
					 0xd0001000, 6, set_irq, NULL), 0);
	assert_true(b.nworkers >= 2);
	bring_up(&b);
	/* Writes first, each chunk its own pattern. */
	for (int k = 0; k < BATCH; k++) {
		memset(req_data(k), 0x40 + k, CHUNK);
		put_batch_request(k, VIRTIO_BLK_T_OUT, (uint64_t)k * CHUNK / 512);
	}
	publish(&b);
	wait_used(BATCH);
	check_used_heads(0, BATCH);
	for (int k = 0; k < BATCH; k++) {
		assert_int_equal(req_status(k), VIRTIO_BLK_S_OK);
		memset(req_data(k), 0, CHUNK);
	}

	/* Reads, with the disk held until every worker has one. */
	pthread_rwlock_wrlock(&b.disk_lock);
	for (int k = 0; k < BATCH; k++)
		put_batch_request(k, VIRTIO_BLK_T_IN, (uint64_t)(BATCH - 1 - k) * CHUNK / 512);
	publish(&b);
	for (int i = 0; i < 10000 && inflight < b.nworkers; i++) {
		usleep(1000);
		pthread_mutex_lock(&b.mmio.lock);
		inflight = b.inflight;
		pthread_mutex_unlock(&b.mmio.lock);
	}
	assert_int_equal(inflight, b.nworkers);
	pthread_rwlock_unlock(&b.disk_lock);
	wait_used(2 * BATCH);
	check_used_heads(BATCH, BATCH);
	for (int k = 0; k < BATCH; k++) {
		const uint8_t *d = req_data(k);
		assert_int_equal(req_status(k), VIRTIO_BLK_S_OK);
		assert_int_equal(d[0], 0x40 + BATCH - 1 - k);
		assert_int_equal(d[CHUNK - 1], 0x40 + BATCH - 1 - k);
	}
	assert_int_equal(b.peak_inflight, b.nworkers);
	/* A pause waits for all of them: nothing in flight after it. */
	virtio_blk_pause(&b);
	assert_int_equal(b.inflight, 0);
	virtio_blk_resume(&b);
	virtio_blk_destroy(&b);
}

static void test_read_only(void **state)
{
	struct virtio_blk b;

	disk_close(make_disk("ro2", false));
	assert_int_equal(virtio_blk_init(&b, make_disk("ro2", true), true, NULL, &mem,
					 0xd0001000, 6, set_irq, NULL), 0);
	wr32(&b.mmio, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	assert_true(rd32(&b.mmio, VIRTIO_MMIO_DEVICE_FEATURES) & (1u << VIRTIO_BLK_F_RO));
	bring_up(&b);
	assert_int_equal(request(&b, VIRTIO_BLK_T_OUT, 0, 512, false), VIRTIO_BLK_S_IOERR);
	assert_int_equal(request(&b, VIRTIO_BLK_T_IN, 0, 512, true), VIRTIO_BLK_S_OK);
	virtio_blk_destroy(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_read_flush),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_read_only),
		cmocka_unit_test(test_interrupt_windows),
		cmocka_unit_test(test_parallel_workers),
	};
	return cmocka_run_group_tests_name("virtio_blk", tests, setup, teardown);
}
