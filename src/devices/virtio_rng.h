/* virtio entropy device (virtio 1.x, 5.4): fills the guest's buffers from
 * the host's getrandom().  It has no state of its own beyond the transport's,
 * so its save/restore is the transport's. */
#ifndef KOSA8_VIRTIO_RNG_H
#define KOSA8_VIRTIO_RNG_H

#include "virtio/mmio.h"

#define VIRTIO_ID_RNG_DEVICE 4

struct virtio_rng {
	struct virtio_mmio mmio;
	uint64_t bytes_given; /* for tests and `kosa8 logs` statistics */
};

void virtio_rng_init(struct virtio_rng *r, const struct guest_mem *mem, uint64_t base,
		     uint32_t gsi, void (*set_irq)(void *ctx, uint32_t gsi, int level),
		     void *irq_ctx);

extern const struct device_ops virtio_rng_device;

#endif
