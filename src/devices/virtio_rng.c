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

/* ---- in the VMM's device table (hw/device.h) ---- */

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct virtio_rng *r = malloc(sizeof(*r));
	int err;

	if (!r)
		return -ENOMEM;
	virtio_rng_init(r, env->mem, env->mmio_base, env->gsi, env->set_irq, env->ctx);
	if ((err = virtio_mmio_attach(&r->mmio, env, -1))) {
		*why = "cannot register the entropy device";
		virtio_mmio_destroy(&r->mmio);
		free(r);
		return err;
	}
	*dev = r;
	return 0;
}

static void dev_destroy(void *dev)
{
	struct virtio_rng *r = dev;

	virtio_mmio_destroy(&r->mmio);
	free(r);
}

/* Its state is its transport's. */
static void dev_save(void *dev, void *state) { virtio_mmio_save(dev, state); }
static int dev_restore(void *dev, const void *state) { return virtio_mmio_restore(dev, state); }

const struct device_ops virtio_rng_device = {
	.name = "rng",
	.what = "virtio-rng",
	.create = dev_create,
	.destroy = dev_destroy,
	.state_len = sizeof(struct virtio_mmio_state),
	.save = dev_save,
	.restore = dev_restore,
	.resync_irq = virtio_device_resync_irq,
	.cmdline = virtio_device_cmdline,
};
