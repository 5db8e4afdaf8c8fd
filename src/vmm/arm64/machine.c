/* The arm64 machine: a board without firmware, the shape of QEMU's virt
 * and of Apple silicon's Hypervisor.framework guests.  Its device table,
 * the Image boot with a device tree, the in-kernel GICv3 and PSCI, and the
 * PL011 as console (vmm/arch.h). */
#include "vmm/arch.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_rng.h"
#include "devices/virtio_vsock.h"
#include "vmm/arm64/boot.h"
#include "vmm/arm64/fdt.h"
#include "vmm/arm64/pl011.h"
#include "vmm/vm.h"

#define VIRTIO_MMIO(n) (VM_VIRTIO_MMIO_BASE + (n) * VM_VIRTIO_MMIO_STRIDE)

const struct device_slot arch_devices[] = {
	{&pl011_device, ARM64_PL011_BASE, ARM64_PL011_SPI, SNAP_SEC_PL011},
	{&virtio_rng_device, VIRTIO_MMIO(0), VM_VIRTIO_RNG_SPI, SNAP_SEC_RNG},
	{&virtio_blk_device, VIRTIO_MMIO(1), VM_VIRTIO_BLK_SPI, SNAP_SEC_BLK},
	{&virtio_vsock_device, VIRTIO_MMIO(2), VM_VIRTIO_VSOCK_SPI, SNAP_SEC_VSOCK},
};
const int arch_ndevices = ARRAY_SIZE(arch_devices);
_Static_assert(ARRAY_SIZE(arch_devices) <= VM_MAX_DEVICES, "raise VM_MAX_DEVICES");
_Static_assert(ARM64_GIC_REDIST_BASE + VM_MAX_VCPUS * ARM64_GIC_REDIST_STRIDE <= ARM64_PL011_BASE,
	       "the redistributors of VM_MAX_VCPUS vCPUs overlap the PL011");

const bool arch_devices_on_cmdline = false;
const uint64_t arch_min_ram = ARM64_MIN_RAM;

int arch_check_kernel(const uint8_t *k, size_t len, const char **why)
{
	struct arm64_image im;

	return arm64_image_parse(k, len, &im, why);
}

int arch_vm_init(struct vm *vm, const char **why)
{
	int err = accel_arm64_create_gic(vm->accel, ARM64_GIC_DIST_BASE, ARM64_GIC_REDIST_BASE);

	if (err)
		*why = "KVM could not create the GICv3 (a host without a GICv3 cannot run kosa8's arm64 machine)";
	return err;
}

/* The device tree's picture of the machine: the devices this VM has. */
static void fdt_params(struct vm *vm, const char *cmdline, const struct arm64_layout *lay,
		       size_t ilen, struct arm64_fdt_params *p)
{
	*p = (struct arm64_fdt_params){
		.ncpus = vm->cfg.ncpus, .ram = vm->mem.regions, .nram = vm->mem.nregions,
		.cmdline = cmdline, .initrd_start = lay->initrd,
		.initrd_end = ilen ? lay->initrd + ilen : 0,
		.gic_dist = ARM64_GIC_DIST_BASE, .gic_redist = ARM64_GIC_REDIST_BASE,
		.uart_base = ARM64_PL011_BASE, .uart_size = ARM64_PL011_SIZE,
		.uart_spi = ARM64_PL011_SPI,
	};
	for (int i = 0; i < arch_ndevices && p->nvirtio < ARM64_FDT_MAX_VIRTIO; i++) {
		if (!vm->devs[i] || arch_devices[i].ops == &pl011_device)
			continue;
		p->virtio[p->nvirtio].base = arch_devices[i].mmio_base;
		p->virtio[p->nvirtio].spi = arch_devices[i].gsi;
		p->nvirtio++;
	}
}

int arch_load(struct vm *vm, const uint8_t *kernel, size_t klen, const uint8_t *initrd,
	      size_t ilen, const char *cmdline, const char **why)
{
	const struct guest_region *low = &vm->mem.regions[0];
	struct arm64_fdt_params p;
	struct arm64_layout lay;
	struct arm64_image im;
	int err, n;

	if ((err = arm64_image_parse(kernel, klen, &im, why)) ||
	    (err = arm64_layout(&im, ilen, low->gpa + low->size, &lay, why)))
		return err;
	memcpy(low->host + lay.kernel, kernel, klen);
	if (ilen)
		memcpy(low->host + lay.initrd, initrd, ilen);
	fdt_params(vm, cmdline, &lay, ilen, &p);
	n = arm64_fdt_build(low->host + lay.fdt, ARM64_FDT_MAX, &p);
	if (n < 0) {
		*why = "the device tree does not fit";
		return n;
	}
	vm->arch.entry = lay.kernel;
	vm->arch.fdt = lay.fdt;
	return 0;
}

int arch_vcpus_create(struct vm *vm, bool restoring, const char **why)
{
	int err;

	*why = "KVM could not set up a vCPU";
	for (int i = 0; i < vm->cfg.ncpus; i++) {
		struct vm_vcpu *v = &vm->vcpus[i];
		v->vm = vm;
		v->id = i;
		if ((err = accel_vcpu_create(vm->accel, i, &v->accel)) ||
		    (err = accel_vcpu_arm64_init(v->accel, i != 0)))
			return err;
	}
	/* The GIC sizes its redistributors by the vCPUs that exist now. */
	if ((err = accel_arm64_start_gic(vm->accel))) {
		*why = "KVM could not start the GICv3";
		return err;
	}
	/* A restore sets every vCPU's registers and power state next. */
	return restoring ? 0 : accel_vcpu_arm64_boot(vm->vcpus[0].accel, vm->arch.entry, vm->arch.fdt);
}

void *arch_console(struct vm *vm)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (arch_devices[i].ops == &pl011_device)
			return vm->devs[i];
	return NULL;
}

size_t arch_console_wait_space(void *uart, int ms) { return pl011_wait_space(uart, ms); }

bool arch_console_rx_enabled(void *uart) { return pl011_rx_enabled(uart); }

size_t arch_console_receive(void *uart, const uint8_t *buf, size_t len)
{
	return pl011_receive(uart, buf, len);
}
