/* What each architecture's folder (vmm/x86/, vmm/arm64/) gives the common
 * VMM: the machine's device table, how a kernel is checked and loaded, the
 * interrupt controller and the vCPUs' first state, and the console UART.
 * Exactly one folder is built (the Makefile's ARCH); the common code never
 * names an architecture's device or register. */
#ifndef KOSA8_VMM_ARCH_H
#define KOSA8_VMM_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/device.h"

struct vm;

/* One line of the machine's device table: where the device sits (its
 * virtio-mmio page, 0 for devices that claim their own ports), its
 * interrupt line and its checkpoint section (enum snap_tag; 0: none).  The
 * table's order is the order devices are created, paused, saved and
 * restored in; they are resumed and destroyed in reverse. */
struct device_slot {
	const struct device_ops *ops;
	uint64_t mmio_base;
	uint32_t gsi;
	uint32_t snap_tag;
};

extern const struct device_slot arch_devices[];
extern const int arch_ndevices;

/* Whether the devices are declared on the command line (x86) rather than
 * in a device tree the machine builds itself (arm64). */
extern const bool arch_devices_on_cmdline;
/* The least RAM this machine boots with. */
extern const uint64_t arch_min_ram;

/* Whether the file is a kernel this machine boots; why says what is not. */
int arch_check_kernel(const uint8_t *k, size_t len, const char **why);
/* Right after RAM is mapped, before the devices: the interrupt controller. */
int arch_vm_init(struct vm *vm, const char **why);
/* Writes the firmware tables, kernel, initrd and command line into RAM and
 * keeps the boot processor's entry state in vm->arch.  A fresh boot only. */
int arch_load(struct vm *vm, const uint8_t *kernel, size_t klen, const uint8_t *initrd,
	      size_t ilen, const char *cmdline, const char **why);
/* Creates the vCPUs, in their boot state unless restoring (a checkpoint
 * then gives them theirs); sets vm->cpu_fp. */
int arch_vcpus_create(struct vm *vm, bool restoring, const char **why);

/* The UART console input goes to, or NULL when the machine has none that
 * takes input; and its receive side for vm.c's input thread. */
void *arch_console(struct vm *vm);
/* Bytes the UART can take now, waiting up to ms for room. */
size_t arch_console_wait_space(void *uart, int ms);
bool arch_console_rx_enabled(void *uart);
/* How many of the bytes the UART took. */
size_t arch_console_receive(void *uart, const uint8_t *buf, size_t len);

#endif
