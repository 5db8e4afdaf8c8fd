/* Split virtqueues (virtio 1.x, 2.7), device side.
 *
 * Everything here reads memory the guest writes concurrently, so every value
 * is loaded once into a local and checked there: descriptor addresses and
 * lengths must lie in guest RAM, chains must not loop or exceed the queue
 * size, indirect tables must be well formed and not nested, and device-
 * writable buffers must follow device-readable ones.  A violation returns
 * -EINVAL; the transport then marks the device DEVICE_NEEDS_RESET.  Nothing
 * here ever touches memory outside guest RAM. */
#ifndef KOSA8_VIRTIO_QUEUE_H
#define KOSA8_VIRTIO_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "hw/guest_mem.h"

#define VIRTQ_MAX_SIZE 256 /* QueueNumMax we offer; also the longest chain */

struct virtq_iov {
	uint8_t *base; /* host pointer into guest RAM, bounds-checked */
	uint32_t len;
};

/* One popped descriptor chain: nout device-readable buffers, then nin
 * device-writable ones, in iov[0 .. nout+nin). */
struct virtq_chain {
	uint16_t head;
	uint16_t nout, nin;
	uint64_t out_bytes, in_bytes;
	struct virtq_iov iov[VIRTQ_MAX_SIZE];
};

/* The queue as the driver configured it, and our progress through it.  This
 * struct is the queue's saved state (checkpoint) as well. */
struct virtq {
	uint16_t size;        /* QueueNum, a power of two <= VIRTQ_MAX_SIZE */
	uint8_t ready;
	uint8_t indirect_ok;  /* VIRTIO_RING_F_INDIRECT_DESC negotiated */
	uint8_t event_idx;    /* VIRTIO_RING_F_EVENT_IDX negotiated */
	uint64_t desc_gpa, avail_gpa, used_gpa;
	uint16_t last_avail;  /* next avail ring entry to take */
	uint16_t used_idx;    /* our copy of used->idx */
	uint16_t signalled_used; /* used_idx at the last interrupt (event idx) */
	/* Host pointers, derived from the gpas by virtq_activate(); not state. */
	const struct guest_mem *mem;
	uint8_t *desc, *avail, *used;
};

/* Checks the ring addresses and size the driver wrote and maps them.
 * Returns 0 or -EINVAL. */
int virtq_activate(struct virtq *q, const struct guest_mem *mem);
void virtq_reset(struct virtq *q);

/* Takes the next available chain.  Returns 1 and fills c, 0 when the ring is
 * empty, -EINVAL when the driver broke the rules.  With event indexes, finding
 * the ring empty asks the driver for a kick at its next chain (avail_event),
 * so a device sleeps only after a 0 from here. */
int virtq_pop(struct virtq *q, struct virtq_chain *c);
/* Hands a chain back with the number of bytes written into its buffers. */
int virtq_push(struct virtq *q, const struct virtq_chain *c, uint32_t written);
/* After pushes: should the driver be interrupted (VRING_AVAIL_F_NO_INTERRUPT
 * or the used_event index, when negotiated)? */
bool virtq_should_notify(struct virtq *q);
/* Asks the driver to stop kicking, or to kick again (VRING_USED_F_NO_NOTIFY,
 * 2.7.7), for a device that will look at the ring by itself soon.  After
 * asking again the device must look once more: a chain added while kicks
 * were off came with none.  Nothing with event indexes (avail_event decides
 * there). */
void virtq_suppress_kicks(struct virtq *q, bool on);
/* Whether the driver has made more chains available. */
bool virtq_has_work(const struct virtq *q);

/* Copies between a chain's buffers and a flat host buffer.  Offsets count
 * bytes over the readable (out) or writable (in) part only. */
size_t virtq_read_out(const struct virtq_chain *c, size_t off, void *dst, size_t len);
size_t virtq_write_in(const struct virtq_chain *c, size_t off, const void *src, size_t len);

#endif
