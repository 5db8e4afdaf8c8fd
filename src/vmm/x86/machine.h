/* The x86-64 machine's part of struct vm (vmm/vm.h). */
#ifndef KOSA8_VMM_X86_MACHINE_H
#define KOSA8_VMM_X86_MACHINE_H

#include "vmm/accel.h"

/* The kernel command line every guest gets, before the devices' words. */
#define VM_DEFAULT_CMDLINE "console=ttyS0 reboot=k panic=-1 pci=off nomodule"

/* virtio-mmio devices' ISA interrupt lines, which no legacy device of ours uses. */
#define VM_VIRTIO_RNG_GSI 5
#define VM_VIRTIO_BLK_GSI 6
#define VM_VIRTIO_VSOCK_GSI 7

struct arch_vm {
	struct x86_boot_cpu bsp;   /* the boot processor at the kernel's entry */
};

#endif
