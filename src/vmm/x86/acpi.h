/* Minimal ACPI: RSDP, XSDT, FADT, FACS, MADT and a DSDT holding \_S5 and
 * the VM generation ID with its event device.  It tells the guest how many
 * CPUs there are (MADT), how to power off (the PM1a control register, an
 * I/O port the VMM owns) and where its generation ID is.  The guest configures
 * itself from these rather than from the MP table beside them (mptable.h),
 * which cannot express poweroff.
 *
 * Not hardware-reduced ACPI, on purpose: Linux treats a hardware-reduced
 * machine as one without a legacy PIC and leaves the ISA interrupts 0-15
 * unmapped, so the UART (IRQ 4) and the command-line virtio-mmio devices could
 * not request their interrupts unless every device were also described in
 * AML.  With a PM1 block instead, ISA interrupts map one to one onto the
 * IOAPIC, as on a PC (seen: a hardware-reduced FADT left ttyS0 unable to open). */
#ifndef KOSA8_ACPI_H
#define KOSA8_ACPI_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/x86/acpi_pm.h" /* the PM1 block the FADT describes */
#include "devices/vmgenid.h" /* the ID and interrupt the DSDT describes */

#define IOAPIC_ADDR 0xfec00000u
#define LAPIC_ADDR  0xfee00000u

/* Writes the tables into buf, which the guest sees at gpa.  Returns the
 * number of bytes used, or -ENOSPC; *rsdp_gpa gets the RSDP's address. */
int acpi_build(uint8_t *buf, uint64_t gpa, size_t space, int ncpus, uint64_t *rsdp_gpa);

/* 8-bit sum of a table; a valid ACPI table sums to zero. */
uint8_t acpi_checksum(const uint8_t *p, size_t len);

#endif
