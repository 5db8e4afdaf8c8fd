/* The interface between the VMM and its devices.  Each device file defines
 * one struct device_ops; the VMM lists them in one table (vmm/vm_devices.c),
 * whose line for a device also says where it sits in the machine (its MMIO
 * page, interrupt line and checkpoint section).  The VMM creates, pauses,
 * saves, restores and destroys devices by walking that table, in its order
 * (destroy and resume in reverse), and never names a device otherwise.
 *
 * A device gets a struct device_env when it is created: what the VMM lends
 * it (guest memory, the buses, an interrupt line, reset and power-off, the
 * hypervisor's doorbells) with no knowledge of the VMM's own types. */
#ifndef KOSA8_HW_DEVICE_H
#define KOSA8_HW_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/bus.h"
#include "hw/config.h"
#include "hw/guest_mem.h"

struct disk;

struct device_env {
	const struct vm_config *cfg;
	const struct guest_mem *mem;
	struct bus *pio, *mmio;
	uint64_t mmio_base;        /* the device's page (its table line), 0 for none */
	uint32_t gsi;              /* its interrupt line (its table line) */
	void *ctx;                 /* the VMM's, passed back to every callback */
	void (*set_irq)(void *ctx, uint32_t gsi, int level);
	void (*reset)(void *ctx);    /* the guest reset the machine */
	void (*poweroff)(void *ctx); /* the guest powered it off */
	/* Asks the hypervisor to signal fd, with no exit, when the guest
	 * writes datamatch (len bytes) at addr; -errno when it cannot. */
	int (*doorbell)(void *ctx, uint64_t addr, uint32_t len, uint64_t datamatch, int fd);
	/* For a why that needs words of its own (create's *why may point here). */
	char *err;
	size_t err_len;
};

struct device_ops {
	const char *name;          /* short, as the user's options say it: "vsock" */
	const char *what;          /* in messages: "virtio-vsock", "serial port" */
	/* Whether cfg asks for the device; NULL: every VM has it. */
	bool (*wanted)(const struct vm_config *cfg);
	/* The option that adds it, for a restore whose options do not match
	 * the checkpoint ("--vsock PATH"); NULL when another check covers it. */
	const char *option;
	/* Allocates the device, claims its bus ranges and starts it; on
	 * failure it has cleaned up and *why says what went wrong. */
	int (*create)(const struct device_env *env, void **dev, const char **why);
	void (*destroy)(void *dev);
	/* Checkpoints, each NULL when the device has nothing of the kind.
	 * pause: the device changes neither guest memory nor its own state
	 * until resume.  save writes state_len bytes; restore refuses a state
	 * it cannot load (-EINVAL). */
	void (*pause)(void *dev);
	void (*resume)(void *dev);
	size_t state_len;
	void (*save)(void *dev, void *state);
	int (*restore)(void *dev, const void *state);
	/* Gives the interrupt controller the line's level again after the
	 * controller's own state was restored. */
	void (*resync_irq)(void *dev);
	/* What the kernel command line needs to find the device. */
	int (*cmdline)(void *dev, char *buf, size_t len);
	/* The disk the device serves, which a checkpoint freezes. */
	struct disk *(*disk)(void *dev);
};

#endif
