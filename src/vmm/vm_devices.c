/* The VM's devices: the machine's table (vmm/arch.h, in vmm/ARCH/machine.c),
 * walked by vm.c and vm_checkpoint.c.  The table's order is the order
 * devices are created, paused, saved and restored in (and so the order of
 * their sections in a checkpoint); they are resumed and destroyed in
 * reverse. */
#include "vmm/vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "vmm/arch.h"

static bool wanted(const struct device_slot *s, const struct vm_config *cfg)
{
	return !s->ops->wanted || s->ops->wanted(cfg);
}

static void dev_irq(void *ctx, uint32_t gsi, int level)
{
	struct vm *vm = ctx;
	int err = accel_irq_line(vm->accel, gsi, level);

	if (err)
		log_once(0x495251, gsi, "cannot raise IRQ %u: %s", gsi, strerror(-err));
}

static void dev_reset(void *ctx) { vm_request_stop(ctx, VM_STOP_RESET); }
static void dev_poweroff(void *ctx) { vm_request_stop(ctx, VM_STOP_POWEROFF); }

static int dev_doorbell(void *ctx, uint64_t addr, uint32_t len, uint64_t datamatch, int fd)
{
	struct vm *vm = ctx;

	return accel_mmio_doorbell(vm->accel, addr, len, datamatch, fd);
}

int vm_devices_create(struct vm *vm, const char **why)
{
	int err;

	vm->pio.name = "pio";
	vm->mmio.name = "mmio";
	for (int i = 0; i < arch_ndevices; i++) {
		struct device_env *env = &vm->dev_env[i];
		if (!wanted(&arch_devices[i], &vm->cfg))
			continue;
		*env = (struct device_env){
			.cfg = &vm->cfg, .mem = &vm->mem, .pio = &vm->pio, .mmio = &vm->mmio,
			.mmio_base = arch_devices[i].mmio_base, .gsi = arch_devices[i].gsi, .ctx = vm,
			.set_irq = dev_irq, .reset = dev_reset, .poweroff = dev_poweroff,
			.doorbell = dev_doorbell, .err = vm->err_buf, .err_len = sizeof(vm->err_buf),
		};
		*why = "device set-up failed";
		if ((err = arch_devices[i].ops->create(env, &vm->devs[i], why)))
			return err;
	}
	return 0;
}

void vm_devices_destroy(struct vm *vm)
{
	for (int i = arch_ndevices - 1; i >= 0; i--) {
		if (vm->devs[i])
			arch_devices[i].ops->destroy(vm->devs[i]);
		vm->devs[i] = NULL;
	}
}

void *vm_device(struct vm *vm, const struct device_ops *ops)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (arch_devices[i].ops == ops)
			return vm->devs[i];
	return NULL;
}

void vm_devices_pause(struct vm *vm)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (vm->devs[i] && arch_devices[i].ops->pause)
			arch_devices[i].ops->pause(vm->devs[i]);
}

void vm_devices_resume(struct vm *vm)
{
	for (int i = arch_ndevices - 1; i >= 0; i--)
		if (vm->devs[i] && arch_devices[i].ops->resume)
			arch_devices[i].ops->resume(vm->devs[i]);
}

void vm_devices_save(struct vm *vm, struct snap_writer *w)
{
	for (int i = 0; i < arch_ndevices; i++) {
		const struct device_ops *ops = arch_devices[i].ops;
		void *state;
		if (!vm->devs[i] || !ops->save)
			continue;
		if (!(state = calloc(1, ops->state_len))) {
			w->err = w->err ? w->err : -ENOMEM;
			return;
		}
		ops->save(vm->devs[i], state);
		snap_writer_add(w, arch_devices[i].snap_tag, 0, state, ops->state_len);
		free(state);
	}
}

/* One device's record, copied out to an aligned buffer of exactly its size. */
static int restore_one(struct vm *vm, int i, const struct snapshot *s)
{
	const struct snap_section *sec = snapshot_find(s, arch_devices[i].snap_tag, 0);
	size_t len = arch_devices[i].ops->state_len;
	void *state;
	int err;

	if (!sec || sec->len != len)
		return -EINVAL;
	if (!(state = malloc(len)))
		return -ENOMEM;
	memcpy(state, sec->data, len);
	err = arch_devices[i].ops->restore(vm->devs[i], state);
	free(state);
	return err;
}

int vm_devices_restore(struct vm *vm, const struct snapshot *s, const char **why)
{
	for (int i = 0; i < arch_ndevices; i++) {
		int err;
		if (!vm->devs[i] || !arch_devices[i].ops->restore)
			continue;
		if ((err = restore_one(vm, i, s))) {
			snprintf(vm->err_buf, sizeof(vm->err_buf),
				 "checkpoint's %s state is missing or invalid", arch_devices[i].ops->what);
			*why = vm->err_buf;
			return err == -ENOMEM ? err : -EINVAL;
		}
	}
	return 0;
}

int vm_devices_check_restore(struct vm *vm, const struct snapshot *s, const char **why)
{
	for (int i = 0; i < arch_ndevices; i++) {
		const struct device_ops *ops = arch_devices[i].ops;
		bool has = arch_devices[i].snap_tag && snapshot_find(s, arch_devices[i].snap_tag, 0);
		if (!ops->option || has == wanted(&arch_devices[i], &vm->cfg))
			continue;
		if (has)
			snprintf(vm->err_buf, sizeof(vm->err_buf),
				 "this checkpoint has a %s device: give %s", ops->name, ops->option);
		else
			snprintf(vm->err_buf, sizeof(vm->err_buf),
				 "this checkpoint has no %s device; leave out %.*s", ops->name,
				 (int)strcspn(ops->option, " "), ops->option);
		*why = vm->err_buf;
		return -EINVAL;
	}
	return 0;
}

void vm_devices_resync_irqs(struct vm *vm)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (vm->devs[i] && arch_devices[i].ops->resync_irq)
			arch_devices[i].ops->resync_irq(vm->devs[i]);
}

int vm_devices_cmdline(struct vm *vm, char *buf, size_t len)
{
	size_t n = 0;
	int err;

	buf[0] = '\0';
	for (int i = 0; i < arch_ndevices; i++) {
		if (!vm->devs[i] || !arch_devices[i].ops->cmdline)
			continue;
		if (n && n + 1 < len)
			buf[n++] = ' ';
		if (n + 1 >= len)
			return -ENAMETOOLONG;
		if ((err = arch_devices[i].ops->cmdline(vm->devs[i], buf + n, len - n)))
			return err;
		n += strlen(buf + n);
	}
	return 0;
}

struct disk *vm_disk(struct vm *vm)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (vm->devs[i] && arch_devices[i].ops->disk)
			return arch_devices[i].ops->disk(vm->devs[i]);
	return NULL;
}
