/* The arm64 machine's part of struct vm (vmm/vm.h) and its memory map.
 *
 * RAM starts at 0 and, like on x86, leaves 3-4 GiB to devices
 * (hw/guest_mem.h): the GICv3 at the start of that hole, the PL011 above
 * it, the virtio-mmio pages at VM_VIRTIO_MMIO_BASE as on x86. */
#ifndef KOSA8_VMM_ARM64_MACHINE_H
#define KOSA8_VMM_ARM64_MACHINE_H

#include <stdint.h>

/* The kernel command line every guest gets; devices are in the device tree. */
#define VM_DEFAULT_CMDLINE "console=ttyAMA0 panic=-1"

#define ARM64_GIC_DIST_BASE 0xc0000000ULL
#define ARM64_GIC_REDIST_BASE 0xc0010000ULL /* 128 KiB per vCPU, up to 254 */
#define ARM64_PL011_BASE 0xc8000000ULL
#define ARM64_PL011_SIZE 0x1000ULL

/* Interrupt lines as GIC SPI numbers (INTID - 32). */
#define ARM64_PL011_SPI 1
#define VM_VIRTIO_RNG_SPI 5
#define VM_VIRTIO_BLK_SPI 6
#define VM_VIRTIO_VSOCK_SPI 7

struct arch_vm {
	uint64_t entry;   /* the kernel's first instruction */
	uint64_t fdt;     /* the device tree's guest-physical address */
};

#endif
