/* The x86-64 machine: a PC without firmware.  Its device table, the ACPI
 * and MP tables, the bzImage boot, CPUID and MSRs, the in-kernel PIC,
 * IOAPIC and PIT, and the 8250 as console (vmm/arch.h). */
#include "vmm/arch.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_rng.h"
#include "devices/virtio_vsock.h"
#include "devices/vmgenid.h"
#include "vmm/vm.h"
#include "vmm/x86/acpi.h"
#include "vmm/x86/acpi_pm.h"
#include "vmm/x86/boot.h"
#include "vmm/x86/cpuid.h"
#include "vmm/x86/i8042.h"
#include "vmm/x86/mptable.h"
#include "vmm/x86/serial8250.h"

#define VIRTIO_MMIO(n) (VM_VIRTIO_MMIO_BASE + (n) * VM_VIRTIO_MMIO_STRIDE)

/* virtio-mmio devices take ISA interrupt lines no legacy device of ours uses. */
const struct device_slot arch_devices[] = {
	{&serial8250_device, 0, SERIAL_COM1_IRQ, SNAP_SEC_SERIAL},
	{&i8042_device, 0, 0, 0},
	{&acpi_pm_device, 0, 0, 0},
	{&virtio_rng_device, VIRTIO_MMIO(0), VM_VIRTIO_RNG_GSI, SNAP_SEC_RNG},
	{&virtio_blk_device, VIRTIO_MMIO(1), VM_VIRTIO_BLK_GSI, SNAP_SEC_BLK},
	{&virtio_vsock_device, VIRTIO_MMIO(2), VM_VIRTIO_VSOCK_GSI, SNAP_SEC_VSOCK},
	{&vmgenid_device, 0, VMGENID_GSI, 0}, /* its ID page: VMGENID_ADDR */
};
const int arch_ndevices = ARRAY_SIZE(arch_devices);
_Static_assert(ARRAY_SIZE(arch_devices) <= VM_MAX_DEVICES, "raise VM_MAX_DEVICES");

const bool arch_devices_on_cmdline = true;
const uint64_t arch_min_ram = BOOT_MIN_RAM;

/* MSRs a firmware would have left in a known state (SDM vol. 4). */
static const struct x86_msr boot_msrs[] = {
	{0x174, 0}, {0x175, 0}, {0x176, 0},            /* SYSENTER_CS/ESP/EIP */
	{0xc0000081, 0}, {0xc0000082, 0}, {0xc0000083, 0}, /* STAR, LSTAR, CSTAR */
	{0xc0000084, 0}, {0xc0000102, 0},              /* SYSCALL_MASK, KERNEL_GS_BASE */
	{0x10, 0},                                     /* TSC starts at zero */
	{0x1a0, 1},                                    /* MISC_ENABLE: fast strings */
	{0x2ff, (1u << 11) | 6},                       /* MTRRdefType: on, write-back */
};

int arch_check_kernel(const uint8_t *k, size_t len, const char **why)
{
	struct bzimage bz;

	return bzimage_parse(k, len, &bz, why);
}

int arch_vm_init(struct vm *vm, const char **why)
{
	int err = accel_create_irqchip(vm->accel);

	if (err)
		*why = "KVM could not create the interrupt controller and timer";
	return err;
}

int arch_load(struct vm *vm, const uint8_t *kernel, size_t klen, const uint8_t *initrd,
	      size_t ilen, const char *cmdline, const char **why)
{
	uint64_t rsdp = 0;
	int err;

	/* The tables end before the VM generation ID's page. */
	err = acpi_build(vm->mem.base + BOOT_BIOS_START, BOOT_BIOS_START,
			 VMGENID_ADDR - BOOT_BIOS_START, vm->cfg.ncpus, &rsdp);
	if (err < 0) {
		*why = "ACPI tables do not fit";
		return err;
	}
	err = mptable_build(vm->mem.base, BOOT_EBDA_START,
			    ALIGN_UP(BOOT_BIOS_START + (uint64_t)err, 16ULL), VMGENID_ADDR,
			    vm->cfg.ncpus);
	if (err < 0) {
		*why = "MP table does not fit";
		return err;
	}
	return x86_load_linux(&vm->mem,
			      &(struct linux_boot){.kernel = kernel, .kernel_len = klen,
						   .initrd = initrd, .initrd_len = ilen,
						   .cmdline = cmdline, .rsdp_addr = rsdp},
			      &vm->arch.bsp, why);
}

static int setup_vcpu(struct vm *vm, int id, const struct cpuid_leaf *supported,
		      size_t nleaves, bool restoring)
{
	struct cpuid_leaf leaves[CPUID_MAX_LEAVES];
	struct vm_vcpu *v = &vm->vcpus[id];
	int err;

	v->vm = vm;
	v->id = id;
	err = accel_vcpu_create(vm->accel, id, &v->accel);
	if (err)
		return err;
	memcpy(leaves, supported, nleaves * sizeof(*leaves));
	if ((err = cpuid_filter(leaves, nleaves, id, vm->cfg.ncpus)) ||
	    (err = accel_vcpu_set_cpuid(v->accel, leaves, nleaves)))
		return err;
	if (id == 0)
		vm_cpu_fingerprint(leaves, nleaves, vm->cpu_fp);
	/* A restored vCPU gets all of its state from the checkpoint. */
	if (restoring)
		return 0;
	if (accel_vcpu_set_msrs(v->accel, boot_msrs, ARRAY_SIZE(boot_msrs)) < 0)
		log_warn("vCPU %d: some boot MSRs were refused; continuing", id);
	if ((err = accel_vcpu_init_lapic(v->accel)))
		return err;
	/* Only the boot processor starts running; the others wait for INIT/SIPI. */
	if (id == 0)
		err = accel_vcpu_set_boot_state(v->accel, &vm->arch.bsp);
	return err;
}

int arch_vcpus_create(struct vm *vm, bool restoring, const char **why)
{
	static struct cpuid_leaf supported[CPUID_MAX_LEAVES];
	size_t nleaves = 0;
	int err;

	if ((err = accel_supported_cpuid(vm->accel, supported, CPUID_MAX_LEAVES, &nleaves))) {
		*why = "KVM would not report its CPUID";
		return err;
	}
	for (int i = 0; i < vm->cfg.ncpus; i++) {
		if ((err = setup_vcpu(vm, i, supported, nleaves, restoring))) {
			*why = "KVM could not set up a vCPU";
			return err;
		}
	}
	return 0;
}

/* Looked up in the table here, not through vm_device(): the table is this
 * file's, read by vm_devices.c, and the two would otherwise call each other. */
void *arch_console(struct vm *vm)
{
	for (int i = 0; i < arch_ndevices; i++)
		if (arch_devices[i].ops == &serial8250_device)
			return vm->devs[i];
	return NULL;
}

size_t arch_console_wait_space(void *uart, int ms) { return serial8250_wait_space(uart, ms); }

bool arch_console_rx_enabled(void *uart) { return serial8250_rx_enabled(uart); }

size_t arch_console_receive(void *uart, const uint8_t *buf, size_t len)
{
	return serial8250_receive(uart, buf, len);
}
