/* virtio block device (virtio 1.x, 5.2) on kosa8's layered disk.
 *
 * Requests are served by the device's I/O threads, so a vCPU that kicks the
 * queue goes straight back to the guest while the disk works, and several
 * requests are in the disk at once (reads side by side; writes, flushes and
 * discards one at a time, as the layered disk needs).  Every request
 * is checked (header size, sector range, data length, status byte) and a bad
 * one completes with VIRTIO_BLK_S_IOERR; a chain that breaks the ring rules
 * marks the device DEVICE_NEEDS_RESET.  Neither stops the VMM.
 *
 * A request finished before the driver queued the next would cost an
 * interrupt each; when the queue runs dry the thread may instead wait a
 * short window for more and answer them under one interrupt, the window
 * sized and turned off by virtio/coalesce.h's policy. */
#ifndef KOSA8_VIRTIO_BLK_H
#define KOSA8_VIRTIO_BLK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "disk/disk.h"
#include "virtio/mmio.h"

#define VIRTIO_ID_BLOCK_DEVICE 2
#define VIRTIO_BLK_SEG_MAX (VIRTQ_MAX_SIZE - 2)
#define VIRTIO_BLK_MAX_DISCARD_SEG 32

struct virtio_blk_stats {
	uint64_t reads, writes, flushes, discards, errors;
	uint64_t bytes_read, bytes_written;
};

/* I/O threads per device: two overlap a request's copy with the next
 * one's on a second host CPU (bench/results/sandbox.md, 2026-12-06).
 * KOSA8_BLK_WORKERS in the VMM's environment (1 to the maximum) overrides
 * it, for benchmarks that compare. */
#define VIRTIO_BLK_WORKERS 2
#define VIRTIO_BLK_MAX_WORKERS 8

struct virtio_blk;

struct blk_worker {
	struct virtio_blk *blk;
	pthread_t thread;
	struct virtq_chain *chain; /* the request it serves */
};

struct virtio_blk {
	struct virtio_mmio mmio;
	struct disk *disk;
	bool read_only;
	uint64_t capacity;      /* in 512-byte sectors */
	char serial[20];        /* VIRTIO_BLK_T_GET_ID answer */
	int kick_fd;            /* eventfd: the guest's notify wakes the I/O threads (KVM
	                         * signals it, virtio_mmio_attach; else the vCPU) */
	int stop_fd;            /* eventfd, written once by destroy */
	struct blk_worker workers[VIRTIO_BLK_MAX_WORKERS];
	unsigned nworkers;
	volatile int stopping;
	/* Reads of the disk run side by side, anything else alone. */
	pthread_rwlock_t disk_lock;
	/* Under mmio.lock: */
	uint64_t generation;    /* bumped by reset: in-flight results are dropped */
	unsigned inflight;      /* requests between pop and push, over all workers */
	unsigned peak_inflight; /* the most at once (for -v) */
	unsigned polling;       /* workers idle, waiting for a kick */
	bool paused;            /* checkpoint: take no new request */
	pthread_cond_t idle;    /* inflight fell to 0 */
	/* Interrupt coalescing (virtio/coalesce.h), all under mmio.lock: */
	struct coalesce coalesce;
	unsigned unsignalled;   /* completions pushed, their interrupt not yet raised */
	uint64_t window_end;    /* CLOCK_MONOTONIC ns the open window ends; 0: none */
	unsigned window_served; /* requests served while it was open */
	uint64_t interrupts;    /* interrupts decided on (for -v; the driver may have asked for none) */
	struct virtio_blk_stats stats;
};

/* Takes ownership of disk.  Returns 0 or a negative errno. */
int virtio_blk_init(struct virtio_blk *b, struct disk *disk, bool read_only, const char *serial,
		    const struct guest_mem *mem, uint64_t base, uint32_t gsi,
		    void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx);
/* Stops the I/O threads, flushes and closes the disk. */
void virtio_blk_destroy(struct virtio_blk *b);

/* Waits until no request is in flight (for checkpoints and tests). */
void virtio_blk_drain(struct virtio_blk *b);

/* Checkpoint: once pause returns, the I/O threads have finished the requests
 * they were serving, the interrupt for what they completed is raised (closing
 * a coalescing window early), and they take no new one (requests the guest queued meanwhile
 * stay in the ring, which is saved with guest memory) until resume.  Then
 * neither guest memory nor the disk changes under a checkpoint. */
void virtio_blk_pause(struct virtio_blk *b);
void virtio_blk_resume(struct virtio_blk *b);
/* The device's saved state is its transport's: capacity and serial come
 * from the disk and the command line again. */
void virtio_blk_save(struct virtio_blk *b, struct virtio_mmio_state *out);
/* Loads it and serves whatever the restored ring holds. */
int virtio_blk_restore(struct virtio_blk *b, const struct virtio_mmio_state *in);

/* The disk at --disk (struct vm_config's disk_path), in the device table. */
extern const struct device_ops virtio_blk_device;

#endif
