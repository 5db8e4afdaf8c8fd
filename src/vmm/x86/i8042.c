#include "vmm/x86/i8042.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void i8042_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	/* No data waiting, input buffer empty: whoever polls can go on. */
	memset(data, 0, size);
}

static void i8042_cmd_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct i8042 *k = opaque;

	if (size >= 1 && data[0] == I8042_CMD_RESET && k->reset)
		k->reset(k->ctx);
}

void i8042_init(struct i8042 *k, void (*reset)(void *ctx), void *ctx)
{
	memset(k, 0, sizeof(*k));
	k->reset = reset;
	k->ctx = ctx;
	k->data_bus = (struct bus_dev){.name = "i8042-data", .base = I8042_DATA_PORT,
				       .len = 1, .opaque = k, .read = i8042_read};
	k->cmd_bus = (struct bus_dev){.name = "i8042-cmd", .base = I8042_CMD_PORT, .len = 1,
				      .opaque = k, .read = i8042_read, .write = i8042_cmd_write};
}

/* ---- in the VMM's device table (hw/device.h) ---- */

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct i8042 *k = malloc(sizeof(*k));
	int err;

	if (!k)
		return -ENOMEM;
	i8042_init(k, env->reset, env->ctx);
	if ((err = bus_register(env->pio, &k->data_bus)) ||
	    (err = bus_register(env->pio, &k->cmd_bus))) {
		*why = "cannot claim the keyboard controller's I/O ports";
		free(k);
		return err;
	}
	*dev = k;
	return 0;
}

const struct device_ops i8042_device = {
	.name = "i8042",
	.what = "keyboard controller",
	.create = dev_create,
	.destroy = free,
};
