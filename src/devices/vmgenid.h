/* VM Generation ID: 16 random bytes in guest memory that change whenever
 * the VM is started from a checkpoint (a template start, a fork, a rewind),
 * with an interrupt that says so.  The guest kernel's vmgenid driver finds
 * the bytes through ACPI (vmm/x86/acpi.c describes them) and, on the interrupt,
 * mixes the new ID into its RNG and reseeds its CRNG at once: copies of one
 * checkpoint stop drawing the same random numbers before any of their
 * processes asks for one.  kosa8's guest kernel also draws a new boot_id
 * then (guest/kernel/patches). */
#ifndef KOSA8_VMGENID_H
#define KOSA8_VMGENID_H

#include "hw/device.h"

#define VMGENID_LEN 16
/* In the legacy area the e820 map reserves (BIOS, 0xe0000-0xfffff), after
 * the ACPI and MP tables: 8-byte aligned and in one page, as the driver
 * wants, and never RAM the guest allocates.  A checkpoint of an older
 * VMM, whose guest knows no such ID, has nothing there either. */
#define VMGENID_ADDR 0xff000ULL
/* The Generic Event Device's interrupt, edge-triggered: an ISA line no
 * other device uses (vmm/vm.h lists the virtio ones). */
#define VMGENID_GSI 10

extern const struct device_ops vmgenid_device;

#endif
