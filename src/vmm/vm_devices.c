/* The VM's devices: one table, walked by vm.c and vm_checkpoint.c.  A
 * device's line says where it sits in this machine: its virtio-mmio page
 * (legacy PC devices claim their own fixed ports), its interrupt line and
 * its checkpoint section.  The table's order is the order devices are
 * created, paused, saved and restored in (and so the order of their
 * sections in a checkpoint); they are resumed and destroyed in reverse. */
#include "vmm/vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/acpi_pm.h"
#include "devices/i8042.h"
#include "devices/serial8250.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_rng.h"
#include "devices/virtio_vsock.h"
#include "devices/vmgenid.h"

#define VIRTIO_MMIO(n) (VM_VIRTIO_MMIO_BASE + (n) * VM_VIRTIO_MMIO_STRIDE)

struct device_slot {
	const struct device_ops *ops;
	uint64_t mmio_base;        /* 0: none */
	uint32_t gsi;              /* 0: none */
	uint32_t snap_tag;         /* enum snap_tag; 0: no state */
};

static const struct device_slot table[] = {
	{&serial8250_device, 0, SERIAL_COM1_IRQ, SNAP_SEC_SERIAL},
	{&i8042_device, 0, 0, 0},
	{&acpi_pm_device, 0, 0, 0},
	{&virtio_rng_device, VIRTIO_MMIO(0), VM_VIRTIO_RNG_GSI, SNAP_SEC_RNG},
	{&virtio_blk_device, VIRTIO_MMIO(1), VM_VIRTIO_BLK_GSI, SNAP_SEC_BLK},
	{&virtio_vsock_device, VIRTIO_MMIO(2), VM_VIRTIO_VSOCK_GSI, SNAP_SEC_VSOCK},
	{&vmgenid_device, 0, VMGENID_GSI, 0}, /* its ID page: VMGENID_ADDR */
};
_Static_assert(ARRAY_SIZE(table) <= VM_MAX_DEVICES, "raise VM_MAX_DEVICES");

#define N_DEVICES ((int)ARRAY_SIZE(table))

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
	for (int i = 0; i < N_DEVICES; i++) {
		struct device_env *env = &vm->dev_env[i];
		if (!wanted(&table[i], &vm->cfg))
			continue;
		*env = (struct device_env){
			.cfg = &vm->cfg, .mem = &vm->mem, .pio = &vm->pio, .mmio = &vm->mmio,
			.mmio_base = table[i].mmio_base, .gsi = table[i].gsi, .ctx = vm,
			.set_irq = dev_irq, .reset = dev_reset, .poweroff = dev_poweroff,
			.doorbell = dev_doorbell, .err = vm->err_buf, .err_len = sizeof(vm->err_buf),
		};
		*why = "device set-up failed";
		if ((err = table[i].ops->create(env, &vm->devs[i], why)))
			return err;
	}
	return 0;
}

void vm_devices_destroy(struct vm *vm)
{
	for (int i = N_DEVICES - 1; i >= 0; i--) {
		if (vm->devs[i])
			table[i].ops->destroy(vm->devs[i]);
		vm->devs[i] = NULL;
	}
}

void *vm_device(struct vm *vm, const struct device_ops *ops)
{
	for (int i = 0; i < N_DEVICES; i++)
		if (table[i].ops == ops)
			return vm->devs[i];
	return NULL;
}

void vm_devices_pause(struct vm *vm)
{
	for (int i = 0; i < N_DEVICES; i++)
		if (vm->devs[i] && table[i].ops->pause)
			table[i].ops->pause(vm->devs[i]);
}

void vm_devices_resume(struct vm *vm)
{
	for (int i = N_DEVICES - 1; i >= 0; i--)
		if (vm->devs[i] && table[i].ops->resume)
			table[i].ops->resume(vm->devs[i]);
}

void vm_devices_save(struct vm *vm, struct snap_writer *w)
{
	for (int i = 0; i < N_DEVICES; i++) {
		const struct device_ops *ops = table[i].ops;
		void *state;
		if (!vm->devs[i] || !ops->save)
			continue;
		if (!(state = calloc(1, ops->state_len))) {
			w->err = w->err ? w->err : -ENOMEM;
			return;
		}
		ops->save(vm->devs[i], state);
		snap_writer_add(w, table[i].snap_tag, 0, state, ops->state_len);
		free(state);
	}
}

/* One device's record, copied out to an aligned buffer of exactly its size. */
static int restore_one(struct vm *vm, int i, const struct snapshot *s)
{
	const struct snap_section *sec = snapshot_find(s, table[i].snap_tag, 0);
	size_t len = table[i].ops->state_len;
	void *state;
	int err;

	if (!sec || sec->len != len)
		return -EINVAL;
	if (!(state = malloc(len)))
		return -ENOMEM;
	memcpy(state, sec->data, len);
	err = table[i].ops->restore(vm->devs[i], state);
	free(state);
	return err;
}

int vm_devices_restore(struct vm *vm, const struct snapshot *s, const char **why)
{
	for (int i = 0; i < N_DEVICES; i++) {
		int err;
		if (!vm->devs[i] || !table[i].ops->restore)
			continue;
		if ((err = restore_one(vm, i, s))) {
			snprintf(vm->err_buf, sizeof(vm->err_buf),
				 "checkpoint's %s state is missing or invalid", table[i].ops->what);
			*why = vm->err_buf;
			return err == -ENOMEM ? err : -EINVAL;
		}
	}
	return 0;
}

int vm_devices_check_restore(struct vm *vm, const struct snapshot *s, const char **why)
{
	for (int i = 0; i < N_DEVICES; i++) {
		const struct device_ops *ops = table[i].ops;
		bool has = table[i].snap_tag && snapshot_find(s, table[i].snap_tag, 0);
		if (!ops->option || has == wanted(&table[i], &vm->cfg))
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
	for (int i = 0; i < N_DEVICES; i++)
		if (vm->devs[i] && table[i].ops->resync_irq)
			table[i].ops->resync_irq(vm->devs[i]);
}

int vm_devices_cmdline(struct vm *vm, char *buf, size_t len)
{
	size_t n = 0;
	int err;

	buf[0] = '\0';
	for (int i = 0; i < N_DEVICES; i++) {
		if (!vm->devs[i] || !table[i].ops->cmdline)
			continue;
		if (n && n + 1 < len)
			buf[n++] = ' ';
		if (n + 1 >= len)
			return -ENAMETOOLONG;
		if ((err = table[i].ops->cmdline(vm->devs[i], buf + n, len - n)))
			return err;
		n += strlen(buf + n);
	}
	return 0;
}

struct disk *vm_disk(struct vm *vm)
{
	for (int i = 0; i < N_DEVICES; i++)
		if (vm->devs[i] && table[i].ops->disk)
			return table[i].ops->disk(vm->devs[i]);
	return NULL;
}
