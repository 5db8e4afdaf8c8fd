#include "devices/virtio_rng.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

/* Per kick, at most this much entropy: a guest cannot make one exit cost
 * more than a bounded amount of host work. */
#define RNG_MAX_PER_CHAIN (64 * 1024)

static void rng_fill(struct virtio_rng *r, struct virtq_chain *c, uint32_t *written)
{
	*written = 0;
	for (uint16_t i = c->nout; i < c->nout + c->nin; i++) {
		struct virtq_iov *v = &c->iov[i];
		uint32_t want = v->len, done = 0;
		if (*written + want > RNG_MAX_PER_CHAIN)
			want = RNG_MAX_PER_CHAIN - *written;
		while (done < want) {
			ssize_t n = getrandom(v->base + done, want - done, 0);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return;
			}
			done += (uint32_t)n;
		}
		*written += done;
		if (*written >= RNG_MAX_PER_CHAIN)
			break;
	}
	r->bytes_given += *written;
}

static void rng_notify(struct virtio_mmio *t, uint16_t qi)
{
	struct virtio_rng *r = t->dev;
	struct virtq *q = &t->s.queues[qi];
	struct virtq_chain *c = malloc(sizeof(*c));
	uint32_t written;
	int got;

	if (!c)
		return;
	while ((got = virtq_pop(q, c)) > 0) {
		/* The request is device-writable buffers only (5.4.6). */
		if (c->nout) {
			virtio_mmio_fail(t, "entropy request with device-readable buffers");
			break;
		}
		rng_fill(r, c, &written);
		virtq_push(q, c, written);
	}
	if (got < 0)
		virtio_mmio_fail(t, "malformed descriptor chain");
	virtio_mmio_notify_used(t, qi);
	free(c);
}

static const struct virtio_dev_ops rng_ops = {
	.name = "virtio-rng",
	.device_id = VIRTIO_ID_RNG_DEVICE,
	.features = 1ULL << VIRTIO_F_INDIRECT_BIT,
	.nqueues = 1,
	.notify = rng_notify,
};

void virtio_rng_init(struct virtio_rng *r, const struct guest_mem *mem, uint64_t base,
		     uint32_t gsi, void (*set_irq)(void *ctx, uint32_t gsi, int level),
		     void *irq_ctx)
{
	r->bytes_given = 0;
	virtio_mmio_init(&r->mmio, &rng_ops, r, mem, base, gsi, set_irq, irq_ctx);
}
