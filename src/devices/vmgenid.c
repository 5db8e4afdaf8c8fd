#include "devices/vmgenid.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

struct vmgenid {
	const struct device_env *env;
};

/* A fresh ID from the host's RNG; -errno if it has none to give. */
static int new_id(uint8_t id[VMGENID_LEN])
{
	size_t done = 0;

	while (done < VMGENID_LEN) {
		ssize_t n = getrandom(id + done, VMGENID_LEN - done, 0);
		if (n < 0 && errno != EINTR)
			return -errno;
		done += n > 0 ? (size_t)n : 0;
	}
	return 0;
}

/* Runs for every VM, booted or restored, before any vCPU does: a restored
 * guest finds the new ID in place when its interrupt arrives. */
static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	uint8_t *p = guest_mem_ptr(env->mem, VMGENID_ADDR, VMGENID_LEN);
	struct vmgenid *g;
	int err;

	if (!p) {
		*why = "guest memory has no room for the VM generation ID";
		return -ENOSPC;
	}
	if ((err = new_id(p))) {
		*why = "cannot draw a VM generation ID from the host's RNG";
		return err;
	}
	/* A later checkpoint's memory layer must hold the page. */
	guest_mem_mark(env->mem, p, VMGENID_LEN);
	if (!(g = malloc(sizeof(*g))))
		return -ENOMEM;
	g->env = env;
	*dev = g;
	return 0;
}

/* Called once the restored interrupt controller is in place (only on a
 * restore): an edge on the line makes the guest read the new ID. */
static void dev_announce(void *dev)
{
	const struct device_env *env = ((struct vmgenid *)dev)->env;

	env->set_irq(env->ctx, env->gsi, 1);
	env->set_irq(env->ctx, env->gsi, 0);
}

const struct device_ops vmgenid_device = {
	.name = "vmgenid",
	.what = "VM generation ID",
	.create = dev_create,
	.destroy = free,
	.resync_irq = dev_announce,
};
