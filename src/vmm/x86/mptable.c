#include "vmm/x86/mptable.h"

#include <errno.h>
#include <string.h>

#include "vmm/x86/acpi.h"

/* Sizes and entry types: MP specification 1.4, chapter 4. */
#define MPC_HDR_LEN 44
#define MPC_CPU_LEN 20
#define MPC_ENTRY_LEN 8
#define MPC_CPU 0
#define MPC_BUS 1
#define MPC_IOAPIC 2
#define MPC_IOINT 3
#define MPC_LINT 4
#define MP_SPEC_REV 4 /* 1.4 */

#define MP_INT_INT 0
#define MP_INT_NMI 1
#define MP_INT_EXTINT 3
#define MP_CPU_ENABLED 0x1
#define MP_CPU_BSP 0x2
#define MP_ALL_LAPICS 0xff
#define ISA_BUS_ID 0
#define ISA_IRQS 16
/* What KVM's in-kernel LAPIC and IOAPIC report in their version registers. */
#define LAPIC_VERSION 0x14
#define IOAPIC_VERSION 0x11

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static uint32_t mpc_len(int ncpus)
{
	/* CPUs, the ISA bus, the IOAPIC, 16 ISA interrupts, LINT0 and LINT1. */
	return MPC_HDR_LEN + MPC_CPU_LEN * (uint32_t)ncpus +
	       MPC_ENTRY_LEN * (2 + ISA_IRQS + 2);
}

/* One 8-byte interrupt entry: I/O (to an IOAPIC pin) or local (to a LINT). */
static uint8_t *irq_entry(uint8_t *e, uint8_t type, uint8_t kind, uint8_t bus_irq,
			  uint8_t dest, uint8_t pin)
{
	e[0] = type;
	e[1] = kind;
	put16(e + 2, 0); /* polarity and trigger as the bus has them: ISA, edge, high */
	e[4] = ISA_BUS_ID;
	e[5] = bus_irq;
	e[6] = dest;
	e[7] = pin;
	return e + MPC_ENTRY_LEN;
}

static void build_mpc(uint8_t *t, int ncpus)
{
	uint32_t len = mpc_len(ncpus);
	uint8_t ioapic_id = (uint8_t)ncpus; /* as in the MADT */
	uint8_t *e = t + MPC_HDR_LEN;

	memset(t, 0, len);
	memcpy(t, "PCMP", 4);
	put16(t + 4, (uint16_t)len);
	t[6] = MP_SPEC_REV;
	memcpy(t + 8, "KOSA8   ", 8);
	memcpy(t + 16, "KOSA8VM     ", 12);
	put16(t + 34, (uint16_t)(ncpus + 2 + ISA_IRQS + 2));
	put32(t + 36, LAPIC_ADDR);
	for (int i = 0; i < ncpus; i++, e += MPC_CPU_LEN) {
		e[0] = MPC_CPU;
		e[1] = (uint8_t)i; /* LAPIC id: the vCPU index, as CPUID says */
		e[2] = LAPIC_VERSION;
		e[3] = MP_CPU_ENABLED | (i == 0 ? MP_CPU_BSP : 0);
	}
	e[0] = MPC_BUS;
	e[1] = ISA_BUS_ID;
	memcpy(e + 2, "ISA   ", 6);
	e += MPC_ENTRY_LEN;
	e[0] = MPC_IOAPIC;
	e[1] = ioapic_id;
	e[2] = IOAPIC_VERSION;
	e[3] = 1; /* enabled */
	put32(e + 4, IOAPIC_ADDR);
	e += MPC_ENTRY_LEN;
	for (uint8_t irq = 0; irq < ISA_IRQS; irq++)
		e = irq_entry(e, MPC_IOINT, MP_INT_INT, irq, ioapic_id, irq);
	e = irq_entry(e, MPC_LINT, MP_INT_EXTINT, 0, MP_ALL_LAPICS, 0);
	irq_entry(e, MPC_LINT, MP_INT_NMI, 0, MP_ALL_LAPICS, 1);
	t[7] = (uint8_t)-acpi_checksum(t, len);
}

static void build_mpf(uint8_t *f, uint64_t mpc_gpa)
{
	memset(f, 0, MPTABLE_MPF_LEN);
	memcpy(f, "_MP_", 4);
	put32(f + 4, (uint32_t)mpc_gpa);
	f[8] = 1; /* length in 16-byte units */
	f[9] = MP_SPEC_REV;
	/* feature byte 1 = 0: the configuration table is there; byte 2 = 0:
	 * virtual wire mode, no IMCR to switch from PIC mode. */
	f[10] = (uint8_t)-acpi_checksum(f, MPTABLE_MPF_LEN);
}

int mptable_build(uint8_t *low, uint64_t mpf_gpa, uint64_t mpc_gpa, uint64_t mpc_end,
		  int ncpus)
{
	uint32_t len;

	if (ncpus < 1 || ncpus > 254)
		return -EINVAL;
	len = mpc_len(ncpus);
	if (mpc_gpa > mpc_end || mpc_end - mpc_gpa < len || mpc_end > UINT32_MAX ||
	    (mpc_gpa < mpf_gpa + MPTABLE_MPF_LEN && mpf_gpa < mpc_gpa + len))
		return -ENOSPC;
	build_mpc(low + mpc_gpa, ncpus);
	build_mpf(low + mpf_gpa, mpc_gpa);
	return (int)len;
}
