/* virtio-mmio transport, version 2 (modern only; virtio 1.x, 4.2).
 *
 * The transport owns the register file, feature negotiation, the device
 * status state machine and the queues' configuration; a device supplies an
 * ops table and gets called when the driver kicks a queue.  A driver that
 * breaks the rules (bad status transition, bad ring, bad chain) gets the
 * device marked DEVICE_NEEDS_RESET with a configuration-change interrupt,
 * logged once; the VMM carries on. */
#ifndef KOSA8_VIRTIO_MMIO_H
#define KOSA8_VIRTIO_MMIO_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hw/bus.h"
#include "hw/device.h"
#include "hw/guest_mem.h"
#include "virtio/coalesce.h"
#include "virtio/queue.h"

#define VIRTIO_MMIO_SIZE 0x200
#define VIRTIO_MAX_QUEUES 4
#define VIRTIO_F_VERSION_1_BIT 32
#define VIRTIO_F_INDIRECT_BIT 28
#define VIRTIO_F_EVENT_IDX_BIT 29

struct virtio_mmio;

struct virtio_dev_ops {
	const char *name;
	uint32_t device_id;
	uint64_t features;       /* device features, VERSION_1 added by the transport */
	uint16_t nqueues;
	uint32_t config_len;
	/* Config space accesses, offset within config space, already bounds-checked. */
	void (*config_read)(struct virtio_mmio *t, uint32_t off, uint8_t *data, uint32_t size);
	void (*config_write)(struct virtio_mmio *t, uint32_t off, const uint8_t *data, uint32_t size);
	/* The driver made buffers available in queue q (called with t->lock held). */
	void (*notify)(struct virtio_mmio *t, uint16_t q);
	/* The driver set DRIVER_OK (lock held). */
	void (*activate)(struct virtio_mmio *t);
	/* The driver wrote 0 to status, or the device is destroyed (lock held). */
	void (*reset)(struct virtio_mmio *t);
};

/* The transport's own state: what a checkpoint stores for it. */
struct virtio_mmio_state {
	uint32_t version;
	uint32_t status, dev_feat_sel, drv_feat_sel, queue_sel, int_status, config_gen;
	uint64_t driver_features;
	struct virtq queues[VIRTIO_MAX_QUEUES]; /* host pointers are rebuilt on restore */
};
#define VIRTIO_MMIO_STATE_VERSION 1

struct virtio_mmio {
	struct bus_dev bus;
	const struct virtio_dev_ops *ops;
	void *dev;                  /* the device's own struct */
	const struct guest_mem *mem;
	uint32_t gsi;
	void (*set_irq)(void *ctx, uint32_t gsi, int level);
	void *irq_ctx;
	pthread_mutex_t lock;       /* register file, queues: vCPU and device threads */
	struct virtio_mmio_state s;
	/* QueueNotify writes that exited to the VMM (lock held): none where the
	 * hypervisor rings a doorbell for them instead.  Not saved state. */
	uint64_t notify_exits;
	/* The level last given to set_irq, -1 when unknown (at start, after a
	 * restore): raising a line already high is a system call that changes
	 * nothing, and an interrupt path costs enough under nesting.  Not saved. */
	int irq_level;
	/* Set by a device that coalesces its interrupts: the transport times
	 * each interrupt from raising the line to the driver's acknowledgement
	 * into it (lock held).  NULL: no clock reads.  Not saved. */
	struct coalesce *irq_cost;
	uint64_t irq_raised_ns;
};

void virtio_mmio_init(struct virtio_mmio *t, const struct virtio_dev_ops *ops, void *dev,
		      const struct guest_mem *mem, uint64_t base, uint32_t gsi,
		      void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx);
void virtio_mmio_destroy(struct virtio_mmio *t);

/* Kernel command-line fragment that declares the device to Linux. */
int virtio_mmio_cmdline(const struct virtio_mmio *t, char *buf, size_t len);

/* Called by the device after pushing used buffers (lock held). */
void virtio_mmio_notify_used(struct virtio_mmio *t, uint16_t q);
/* Called by the device when the driver broke the rules (lock held). */
void virtio_mmio_fail(struct virtio_mmio *t, const char *why);
bool virtio_mmio_driver_ok(const struct virtio_mmio *t);
bool virtio_mmio_has_feature(const struct virtio_mmio *t, unsigned bit);

void virtio_mmio_save(struct virtio_mmio *t, struct virtio_mmio_state *out);
/* Validates and loads a saved state; queues are re-mapped against guest RAM. */
int virtio_mmio_restore(struct virtio_mmio *t, const struct virtio_mmio_state *in);
/* Gives the interrupt controller the line's level again, whatever set_irq
 * was last told.  For after the controller's own state was restored: it
 * overwrites a level a device thread raised after its device's restore, and
 * the cache in irq_level would never raise that line again. */
void virtio_mmio_resync_irq(struct virtio_mmio *t);

/* Claims t's page on the VMM's MMIO bus and, with kick_fd >= 0, asks for
 * the hypervisor's doorbells on its queues' notify register. */
int virtio_mmio_attach(struct virtio_mmio *t, const struct device_env *env, int kick_fd);
/* device_ops for a device whose struct starts with its transport. */
int virtio_device_cmdline(void *dev, char *buf, size_t len);
void virtio_device_resync_irq(void *dev);

#endif
