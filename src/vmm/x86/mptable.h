/* An Intel MultiProcessor Specification 1.4 table: the same CPUs, IOAPIC and
 * one-to-one ISA interrupt routing as the MADT (acpi.h).  Linux prefers the
 * MADT when there is one, but it looks for an MP floating pointer early in
 * setup_arch whatever it finds later: in the last KiB of base memory first,
 * then through all 64 KiB of the BIOS area, remapping at every 16 bytes.
 * Found in the first place, that scan ends at once (bench/results/boot.md:
 * what the full scan cost); and a guest booted with acpi=off still sees every
 * CPU and the IOAPIC. */
#ifndef KOSA8_MPTABLE_H
#define KOSA8_MPTABLE_H

#include <stdint.h>

#define MPTABLE_MPF_LEN 16

/* Writes the floating pointer at mpf_gpa and the configuration table at
 * mpc_gpa, both inside low, the guest's memory from address 0.  Returns the
 * configuration table's length, -ENOSPC if it would pass mpc_end or overlap
 * the pointer, -EINVAL for a CPU count the MADT would refuse too. */
int mptable_build(uint8_t *low, uint64_t mpf_gpa, uint64_t mpc_gpa, uint64_t mpc_end,
		  int ncpus);

#endif
