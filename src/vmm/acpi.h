/* Minimal hardware-reduced ACPI: RSDP, XSDT, FADT, MADT and a DSDT holding
 * only \_S5.  It tells the guest how many CPUs there are (MADT) and how to
 * power off (the FADT's sleep control register, an I/O port the VMM owns).
 * Chosen over an MP table because an MP table cannot express poweroff, and
 * because ACPI is also the route to describing virtio-mmio devices to a stock
 * distribution kernel later. */
#ifndef KOSA8_ACPI_H
#define KOSA8_ACPI_H

#include <stddef.h>
#include <stdint.h>

#define ACPI_SLEEP_CONTROL_PORT 0x600
#define ACPI_SLEEP_STATUS_PORT  0x601
#define ACPI_S5_SLEEP_TYPE      5    /* the value our \_S5 package announces */
#define ACPI_SLP_TYP_SHIFT      2    /* ACPI 6.x, 4.8.3.7: sleep control register */
#define ACPI_SLP_TYP_MASK       0x1c
#define ACPI_SLP_EN             0x20
#define ACPI_SCI_IRQ            9

#define IOAPIC_ADDR 0xfec00000u
#define LAPIC_ADDR  0xfee00000u

/* Writes the tables into buf, which the guest sees at gpa.  Returns the
 * number of bytes used, or -ENOSPC; *rsdp_gpa gets the RSDP's address. */
int acpi_build(uint8_t *buf, uint64_t gpa, size_t space, int ncpus, uint64_t *rsdp_gpa);

/* 8-bit sum of a table; a valid ACPI table sums to zero. */
uint8_t acpi_checksum(const uint8_t *p, size_t len);

#endif
