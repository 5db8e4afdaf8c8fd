#include "devices/virtio_blk.h"

#include <errno.h>
#include <linux/virtio_blk.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"

#define SECTOR 512u
#define REQ_HDR_LEN 16u

struct blk_req_hdr {
	uint32_t type;
	uint32_t reserved;
	uint64_t sector;
};

struct blk_discard_seg {
	uint64_t sector;
	uint32_t num_sectors;
	uint32_t flags;
};

static const struct virtio_dev_ops blk_ops;

static struct virtio_blk_config blk_config(const struct virtio_blk *b)
{
	struct virtio_blk_config c;

	memset(&c, 0, sizeof(c));
	c.capacity = b->capacity;
	c.seg_max = VIRTIO_BLK_SEG_MAX;
	c.blk_size = SECTOR;
	c.num_queues = 1;
	c.max_discard_sectors = UINT32_MAX / SECTOR;
	c.max_discard_seg = VIRTIO_BLK_MAX_DISCARD_SEG;
	c.discard_sector_alignment = 1;
	c.max_write_zeroes_sectors = UINT32_MAX / SECTOR;
	c.max_write_zeroes_seg = VIRTIO_BLK_MAX_DISCARD_SEG;
	c.write_zeroes_may_unmap = 1;
	return c;
}

static void blk_config_read(struct virtio_mmio *t, uint32_t off, uint8_t *data, uint32_t size)
{
	struct virtio_blk_config c = blk_config(t->dev);

	if (off + size <= sizeof(c))
		memcpy(data, (uint8_t *)&c + off, size);
}

/* Gathers the data bytes [skip, skip+len) of the chain's in (or out) part
 * into an iovec array: one vectored disk call per request, not one per guest
 * buffer (system calls dominate otherwise: 10-15x slower, measured). */
static int chain_iov(const struct virtq_chain *c, bool in, size_t skip, size_t len,
		     struct iovec *iov)
{
	uint16_t first = in ? c->nout : 0, last = in ? c->nout + c->nin : c->nout;
	int n = 0;

	for (uint16_t i = first; i < last && len; i++) {
		const struct virtq_iov *v = &c->iov[i];
		size_t take;
		if (skip >= v->len) {
			skip -= v->len;
			continue;
		}
		take = v->len - skip < len ? v->len - skip : len;
		iov[n].iov_base = v->base + skip;
		iov[n].iov_len = take;
		n++;
		skip = 0;
		len -= take;
	}
	return n;
}

static bool range_ok(const struct virtio_blk *b, uint64_t sector, uint64_t bytes)
{
	return bytes % SECTOR == 0 && sector <= b->capacity &&
	       bytes / SECTOR <= b->capacity - sector;
}

static void count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static uint8_t do_rw(struct virtio_blk *b, const struct virtq_chain *c,
		     const struct blk_req_hdr *h, bool write, uint32_t *written)
{
	uint64_t bytes = write ? c->out_bytes - REQ_HDR_LEN : c->in_bytes - 1;
	struct iovec iov[VIRTQ_MAX_SIZE];
	int n, err;

	if (write && b->read_only)
		return VIRTIO_BLK_S_IOERR;
	if (!range_ok(b, h->sector, bytes))
		return VIRTIO_BLK_S_IOERR;
	if (bytes == 0)
		return VIRTIO_BLK_S_OK;
	n = chain_iov(c, !write, write ? REQ_HDR_LEN : 0, bytes, iov);
	/* Reads run side by side; a write changes the block maps they walk. */
	if (write)
		pthread_rwlock_wrlock(&b->disk_lock);
	else
		pthread_rwlock_rdlock(&b->disk_lock);
	err = write ? disk_writev(b->disk, iov, n, h->sector * SECTOR)
		    : disk_readv(b->disk, iov, n, h->sector * SECTOR);
	pthread_rwlock_unlock(&b->disk_lock);
	if (err)
		return VIRTIO_BLK_S_IOERR;
	if (write) {
		count(&b->stats.writes, 1);
		count(&b->stats.bytes_written, bytes);
	} else {
		*written = (uint32_t)bytes;
		count(&b->stats.reads, 1);
		count(&b->stats.bytes_read, bytes);
	}
	return VIRTIO_BLK_S_OK;
}

/* DISCARD and WRITE_ZEROES carry segments after the header (5.2.6). */
static uint8_t discard_segs(struct virtio_blk *b, const struct virtq_chain *c, uint64_t n)
{
	struct blk_discard_seg seg;

	for (uint64_t i = 0; i < n; i++) {
		virtq_read_out(c, REQ_HDR_LEN + i * sizeof(seg), &seg, sizeof(seg));
		if (seg.flags & ~1u)
			return VIRTIO_BLK_S_UNSUPP;
		if (!range_ok(b, seg.sector, (uint64_t)seg.num_sectors * SECTOR))
			return VIRTIO_BLK_S_IOERR;
		/* Our discard already reads back as zeros: one call serves both. */
		if (disk_discard(b->disk, seg.sector * SECTOR, (uint64_t)seg.num_sectors * SECTOR))
			return VIRTIO_BLK_S_IOERR;
	}
	return VIRTIO_BLK_S_OK;
}

static uint8_t do_discard(struct virtio_blk *b, const struct virtq_chain *c)
{
	uint64_t n = (c->out_bytes - REQ_HDR_LEN) / sizeof(struct blk_discard_seg);
	uint8_t status;

	if (b->read_only || n == 0 || n > VIRTIO_BLK_MAX_DISCARD_SEG ||
	    (c->out_bytes - REQ_HDR_LEN) % sizeof(struct blk_discard_seg))
		return VIRTIO_BLK_S_IOERR;
	pthread_rwlock_wrlock(&b->disk_lock);
	status = discard_segs(b, c, n);
	pthread_rwlock_unlock(&b->disk_lock);
	if (status == VIRTIO_BLK_S_OK)
		count(&b->stats.discards, 1);
	return status;
}

static uint8_t do_flush(struct virtio_blk *b)
{
	int err;

	pthread_rwlock_wrlock(&b->disk_lock);
	err = disk_flush(b->disk);
	pthread_rwlock_unlock(&b->disk_lock);
	count(&b->stats.flushes, 1);
	return err ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK;
}

/* Serves one request; returns the bytes written into the guest's buffers
 * (data plus the status byte). */
static uint32_t blk_handle(struct virtio_blk *b, const struct virtq_chain *c)
{
	struct blk_req_hdr h;
	uint32_t written = 0;
	uint8_t status;

	virtq_read_out(c, 0, &h, sizeof(h));
	switch (h.type) {
	case VIRTIO_BLK_T_IN:
		status = do_rw(b, c, &h, false, &written);
		break;
	case VIRTIO_BLK_T_OUT:
		status = do_rw(b, c, &h, true, &written);
		break;
	case VIRTIO_BLK_T_FLUSH:
		status = do_flush(b);
		break;
	case VIRTIO_BLK_T_GET_ID:
		written = (uint32_t)virtq_write_in(c, 0, b->serial,
						   c->in_bytes - 1 < sizeof(b->serial) ?
							   c->in_bytes - 1 : sizeof(b->serial));
		status = VIRTIO_BLK_S_OK;
		break;
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		status = do_discard(b, c);
		break;
	default:
		status = VIRTIO_BLK_S_UNSUPP;
		break;
	}
	if (status != VIRTIO_BLK_S_OK)
		count(&b->stats.errors, 1);
	/* The status byte is the chain's last writable byte. */
	virtq_write_in(c, c->in_bytes - 1, &status, 1);
	return written + 1;
}

/* A request needs a readable 16-byte header and at least one writable byte. */
static bool chain_shape_ok(const struct virtq_chain *c)
{
	return c->out_bytes >= REQ_HDR_LEN && c->in_bytes >= 1;
}

/* Raises the interrupt for what was completed, unless the driver asked
 * for none (lock held). */
static void signal_used(struct virtio_blk *b)
{
	if (!b->unsignalled)
		return;
	b->unsignalled = 0;
	b->interrupts++;
	virtio_mmio_notify_used(&b->mmio, 0);
}

static void close_window(struct virtio_blk *b)
{
	if (!b->window_end)
		return;
	virtq_suppress_kicks(&b->mmio.s.queues[0], false);
	coalesce_outcome(&b->coalesce, b->window_served);
	b->window_end = 0;
	signal_used(b);
}

/* The queue ran dry (lock held): interrupt now, or wait a while for more
 * requests to answer under the same interrupt (virtio/coalesce.h).  An
 * open window keeps its end: a driver that keeps queueing cannot hold the
 * interrupt back for longer than the window.  During it the driver need
 * not kick (each kick is an exit): its requests are answered at the end
 * anyway, so the thread takes them then. */
static void end_batch(struct virtio_blk *b)
{
	uint64_t w;

	if (!b->unsignalled || b->window_end)
		return;
	w = coalesce_window(&b->coalesce);
	if (!w) {
		signal_used(b);
		return;
	}
	b->window_end = mono_ns() + w;
	b->window_served = 0;
	virtq_suppress_kicks(&b->mmio.s.queues[0], true);
}

static void kick(struct virtio_blk *b)
{
	eventfd_ring(b->kick_fd);
}

/* Takes requests off the ring and serves them until it is dry (lock
 * held).  Several workers run this at once, each with its own chain: the
 * lock is dropped around the disk work, so requests complete out of order,
 * which virtio allows (the used ring names each by its head). */
static void serve_locked(struct virtio_blk *b, struct virtq_chain *c)
{
	struct virtio_mmio *t = &b->mmio;
	struct virtq *q = &t->s.queues[0];

	for (;;) {
		uint64_t gen = b->generation;
		bool pass_on;
		int got = !b->paused && virtio_mmio_driver_ok(t) && q->ready ? virtq_pop(q, c) : 0;
		uint32_t len;

		if (got < 0)
			virtio_mmio_fail(t, "malformed descriptor chain");
		if (got <= 0)
			break;
		if (!chain_shape_ok(c)) {
			virtio_mmio_fail(t, "block request without header or status byte");
			break;
		}
		/* Counted when taken: what the driver queued during the window. */
		if (b->window_end)
			b->window_served++;
		if (++b->inflight > b->peak_inflight)
			b->peak_inflight = b->inflight;
		/* More waiting and a worker idle: wake it for the next one.  A
		 * kick wakes every idle worker, but only the first to look finds
		 * it set; the others sleep on. */
		pass_on = b->polling && virtq_has_work(q);
		pthread_mutex_unlock(&t->lock);
		if (pass_on)
			kick(b);
		len = blk_handle(b, c);
		pthread_mutex_lock(&t->lock);
		if (--b->inflight == 0)
			pthread_cond_broadcast(&b->idle);
		/* A reset while we worked: the queue is gone, drop the result. */
		if (gen != b->generation)
			continue;
		virtq_push(q, c, len);
		b->unsignalled++;
	}
	/* Dry: interrupt for what is done, even while other workers still
	 * serve theirs, so the driver can queue more for this one. */
	end_batch(b);
}

/* Until the guest kicks, or until the open window ends: ppoll's timeout,
 * or NULL for none (lock held). */
static struct timespec *window_left(struct virtio_blk *b, struct timespec *ts)
{
	uint64_t now, left;

	if (!b->window_end)
		return NULL;
	now = mono_ns();
	left = b->window_end > now ? b->window_end - now : 0;
	*ts = (struct timespec){.tv_sec = (time_t)(left / 1000000000u), .tv_nsec = (long)(left % 1000000000u)};
	return ts;
}

/* The open window's time is up (lock held): ask for kicks again, serve
 * what the driver queued without kicking, and raise one interrupt for all
 * of it.  Whichever worker wakes first does it; the window is closed once. */
static void window_expired(struct virtio_blk *b, struct virtq_chain *c)
{
	if (!b->window_end || mono_ns() < b->window_end)
		return;
	virtq_suppress_kicks(&b->mmio.s.queues[0], false);
	serve_locked(b, c);
	close_window(b);
}

/* Every idle worker waits on the same kick eventfd; whoever reads a kick
 * first serves the ring, and passes a kick on while more requests wait
 * (serve_locked), so a batch spreads over the idle workers.  stop_fd is
 * never read: once written it wakes every worker for good. */
static void *blk_worker(void *arg)
{
	struct blk_worker *w = arg;
	struct virtio_blk *b = w->blk;
	uint64_t v;

	while (!__atomic_load_n(&b->stopping, __ATOMIC_ACQUIRE)) {
		struct pollfd p[2] = {{.fd = b->kick_fd, .events = POLLIN},
				      {.fd = b->stop_fd, .events = POLLIN}};
		struct timespec ts, *timeout;
		bool kicked;
		int r;

		pthread_mutex_lock(&b->mmio.lock);
		timeout = window_left(b, &ts);
		b->polling++;
		pthread_mutex_unlock(&b->mmio.lock);
		r = ppoll(p, 2, timeout, NULL);
		kicked = r > 0 && (p[0].revents & POLLIN) && read(b->kick_fd, &v, sizeof(v)) == sizeof(v);
		pthread_mutex_lock(&b->mmio.lock);
		b->polling--;
		if (kicked)
			serve_locked(b, w->chain);
		window_expired(b, w->chain);
		pthread_mutex_unlock(&b->mmio.lock);
	}
	return NULL;
}

static void blk_notify(struct virtio_mmio *t, uint16_t q) { kick(t->dev); }

static void blk_reset(struct virtio_mmio *t)
{
	struct virtio_blk *b = t->dev;

	b->generation++;
	/* The queue is gone: nothing to signal, no window to wait out. */
	b->unsignalled = 0;
	b->window_end = 0;
}

/* VIRTIO_RING_F_EVENT_IDX is not offered, though the transport supports it:
 * the coalescing window's kick suppression (VRING_USED_F_NO_NOTIFY) does its
 * job here, and with event indexes avail_event would decide instead.  (It
 * was dropped on 2026-12-04 for guest triple faults in the I/O suite; the
 * same faults came later without it, from the emulated helper: see
 * testbed/README.md, "Emulator faults".) */
static const struct virtio_dev_ops blk_ops = {
	.name = "virtio-blk",
	.device_id = VIRTIO_ID_BLOCK_DEVICE,
	.features = (1ULL << VIRTIO_BLK_F_SEG_MAX) | (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
		    (1ULL << VIRTIO_BLK_F_FLUSH) | (1ULL << VIRTIO_BLK_F_DISCARD) |
		    (1ULL << VIRTIO_BLK_F_WRITE_ZEROES) | (1ULL << VIRTIO_F_INDIRECT_BIT),
	.nqueues = 1,
	.config_len = sizeof(struct virtio_blk_config),
	.config_read = blk_config_read,
	.notify = blk_notify,
	.reset = blk_reset,
};

static const struct virtio_dev_ops blk_ops_ro = {
	.name = "virtio-blk",
	.device_id = VIRTIO_ID_BLOCK_DEVICE,
	.features = (1ULL << VIRTIO_BLK_F_SEG_MAX) | (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
		    (1ULL << VIRTIO_BLK_F_RO) | (1ULL << VIRTIO_F_INDIRECT_BIT),
	.nqueues = 1,
	.config_len = sizeof(struct virtio_blk_config),
	.config_read = blk_config_read,
	.notify = blk_notify,
	.reset = blk_reset,
};

static void stop_workers(struct virtio_blk *b)
{
	__atomic_store_n(&b->stopping, 1, __ATOMIC_RELEASE);
	if (b->stop_fd >= 0 && eventfd_ring(b->stop_fd) < 0)
		log_err("virtio-blk: cannot wake the I/O threads to stop them");
	for (unsigned i = 0; i < b->nworkers; i++) {
		pthread_join(b->workers[i].thread, NULL);
		free(b->workers[i].chain);
	}
	b->nworkers = 0;
}

static int start_workers(struct virtio_blk *b, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct blk_worker *w = &b->workers[i];

		w->blk = b;
		w->chain = malloc(sizeof(*w->chain));
		if (!w->chain)
			return -ENOMEM;
		if (thread_start(&w->thread, blk_worker, w) < 0) {
			free(w->chain);
			return -EAGAIN;
		}
		b->nworkers++;
	}
	return 0;
}

/* The default, or KOSA8_BLK_WORKERS when it is a count we can run. */
static unsigned worker_count(void)
{
	const char *env = getenv("KOSA8_BLK_WORKERS");
	uint64_t n;

	if (!env)
		return VIRTIO_BLK_WORKERS;
	if (parse_size(env, &n) || n < 1 || n > VIRTIO_BLK_MAX_WORKERS) {
		log_warn("virtio-blk: KOSA8_BLK_WORKERS='%s' is not a count from 1 to %d; using %d",
			 env, VIRTIO_BLK_MAX_WORKERS, VIRTIO_BLK_WORKERS);
		return VIRTIO_BLK_WORKERS;
	}
	return (unsigned)n;
}

int virtio_blk_init(struct virtio_blk *b, struct disk *disk, bool read_only, const char *serial,
		    const struct guest_mem *mem, uint64_t base, uint32_t gsi,
		    void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx)
{
	unsigned n = worker_count();

	memset(b, 0, sizeof(*b));
	b->kick_fd = b->stop_fd = -1;
	b->disk = disk;
	b->read_only = read_only;
	b->capacity = disk_size(disk) / SECTOR;
	strncpy(b->serial, serial ? serial : "kosa8", sizeof(b->serial));
	pthread_cond_init(&b->idle, NULL);
	pthread_rwlock_init(&b->disk_lock, NULL);
	coalesce_init(&b->coalesce);
	virtio_mmio_init(&b->mmio, read_only ? &blk_ops_ro : &blk_ops, b, mem, base, gsi,
			 set_irq, irq_ctx);
	b->mmio.irq_cost = &b->coalesce;
	b->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->kick_fd < 0 || b->stop_fd < 0)
		return -errno;
	return start_workers(b, n);
}

/* Until no request is in flight on any worker (lock held). */
static void wait_idle(struct virtio_blk *b)
{
	while (b->inflight)
		pthread_cond_wait(&b->idle, &b->mmio.lock);
}

void virtio_blk_drain(struct virtio_blk *b)
{
	pthread_mutex_lock(&b->mmio.lock);
	wait_idle(b);
	pthread_mutex_unlock(&b->mmio.lock);
}

void virtio_blk_pause(struct virtio_blk *b)
{
	pthread_mutex_lock(&b->mmio.lock);
	b->paused = true;
	wait_idle(b);
	/* The checkpoint saves the interrupt with the ring: raise it now, not
	 * when the window would have ended, in the middle of the save. */
	close_window(b);
	pthread_mutex_unlock(&b->mmio.lock);
}

void virtio_blk_resume(struct virtio_blk *b)
{
	pthread_mutex_lock(&b->mmio.lock);
	b->paused = false;
	pthread_mutex_unlock(&b->mmio.lock);
	kick(b); /* requests queued while paused */
}

void virtio_blk_save(struct virtio_blk *b, struct virtio_mmio_state *out)
{
	virtio_mmio_save(&b->mmio, out);
}

int virtio_blk_restore(struct virtio_blk *b, const struct virtio_mmio_state *in)
{
	int err = virtio_mmio_restore(&b->mmio, in);

	if (!err)
		kick(b);
	return err;
}

void virtio_blk_destroy(struct virtio_blk *b)
{
	unsigned nworkers = b->nworkers;

	stop_workers(b);
	/* -v: what the disk did, and whether the doorbell took the notifies
	 * (virtio_mmio_attach; tests/vm/run-all checks this line). */
	log_info("virtio-blk: %llu reads, %llu writes, %llu notifies exited to the VMM; "
		 "%llu interrupts; %llu coalescing windows caught requests, %llu expired; "
		 "interrupt cost %llu us; at most %u of %u I/O threads busy at once",
		 (unsigned long long)b->stats.reads, (unsigned long long)b->stats.writes,
		 (unsigned long long)b->mmio.notify_exits, (unsigned long long)b->interrupts,
		 (unsigned long long)b->coalesce.caught, (unsigned long long)b->coalesce.expired,
		 (unsigned long long)(b->coalesce.cost_ns / 1000), b->peak_inflight, nworkers);
	if (b->kick_fd >= 0)
		close(b->kick_fd);
	if (b->stop_fd >= 0)
		close(b->stop_fd);
	b->kick_fd = b->stop_fd = -1;
	virtio_mmio_destroy(&b->mmio);
	pthread_cond_destroy(&b->idle);
	pthread_rwlock_destroy(&b->disk_lock);
	if (b->disk && disk_close(b->disk) < 0)
		log_err("virtio-blk: final flush of the disk failed");
	b->disk = NULL;
}

/* ---- in the VMM's device table (hw/device.h) ---- */

static bool dev_wanted(const struct vm_config *cfg) { return cfg->disk_path != NULL; }

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	const struct vm_config *cfg = env->cfg;
	struct virtio_blk *b;
	struct disk *d = NULL;
	char msg[DISK_ERR_LEN];
	int err;

	err = disk_open(&d, cfg->disk_path, cfg->disk_read_only ? DISK_RDONLY : 0, msg, sizeof(msg));
	if (err) {
		snprintf(env->err, env->err_len, "disk: %.400s", msg);
		*why = env->err;
		return err;
	}
	if (!(b = malloc(sizeof(*b)))) {
		disk_close(d);
		return -ENOMEM;
	}
	err = virtio_blk_init(b, d, cfg->disk_read_only, "kosa8-disk0", env->mem, env->mmio_base,
			      env->gsi, env->set_irq, env->ctx);
	if (!err)
		err = virtio_mmio_attach(&b->mmio, env, b->kick_fd);
	if (err) {
		*why = "cannot start the block device";
		virtio_blk_destroy(b);
		free(b);
		return err;
	}
	*dev = b;
	return 0;
}

static void dev_destroy(void *dev)
{
	virtio_blk_destroy(dev);
	free(dev);
}

static void dev_pause(void *dev) { virtio_blk_pause(dev); }
static void dev_resume(void *dev) { virtio_blk_resume(dev); }
static void dev_save(void *dev, void *state) { virtio_blk_save(dev, state); }
static int dev_restore(void *dev, const void *state) { return virtio_blk_restore(dev, state); }
static struct disk *dev_disk(void *dev) { return ((struct virtio_blk *)dev)->disk; }

/* A restore with or without --disk is checked against the checkpoint's
 * disk chain (vm_checkpoint.c), so no option here. */
const struct device_ops virtio_blk_device = {
	.name = "blk",
	.what = "virtio-blk",
	.wanted = dev_wanted,
	.create = dev_create,
	.destroy = dev_destroy,
	.pause = dev_pause,
	.resume = dev_resume,
	.state_len = sizeof(struct virtio_mmio_state),
	.save = dev_save,
	.restore = dev_restore,
	.resync_irq = virtio_device_resync_irq,
	.cmdline = virtio_device_cmdline,
	.disk = dev_disk,
};
