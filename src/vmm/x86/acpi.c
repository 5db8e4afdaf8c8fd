#include "vmm/x86/acpi.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"

#define ACPI_HDR_LEN 36
#define RSDP_LEN 36
#define FADT_LEN 276 /* ACPI 6.x FADT, revision 6 */
#define OEM_ID "KOSA8 "
#define OEM_TABLE_ID "KOSA8VM "

/* FADT field offsets (ACPI 6.4, table 5.9). */
#define FADT_FIRMWARE_CTRL 36
#define FADT_DSDT 40
#define FADT_SCI_INT 46
#define FADT_PM1A_EVT_BLK 56
#define FADT_PM1A_CNT_BLK 64
#define FADT_PM1_EVT_LEN 88
#define FADT_PM1_CNT_LEN 89
#define FADT_IAPC_BOOT_ARCH 109
#define FADT_FLAGS 112
#define FADT_MINOR_VERSION 131
#define FADT_X_FIRMWARE_CTRL 132
#define FADT_X_DSDT 140
#define FADT_X_PM1A_EVT_BLK 148
#define FADT_X_PM1A_CNT_BLK 172
#define FADT_HYPERVISOR_ID 268
#define FACS_LEN 64
#define DSDT_MAX_AML 256 /* room left for the DSDT's body */

#define FADT_F_WBINVD (1u << 0)
#define FADT_F_PWR_BUTTON (1u << 4)   /* set: no fixed power button */
#define FADT_F_SLP_BUTTON (1u << 5)   /* set: no fixed sleep button */
#define IAPC_LEGACY_DEVICES (1u << 0)
#define IAPC_VGA_NOT_PRESENT (1u << 2)
#define IAPC_MSI_NOT_SUPPORTED (1u << 3)
#define IAPC_CMOS_RTC_NOT_PRESENT (1u << 5)

#define GAS_SYSTEM_IO 1
#define GAS_ACCESS_WORD 2

#define MADT_PCAT_COMPAT 1u
#define MADT_LAPIC 0
#define MADT_IOAPIC 1

uint8_t acpi_checksum(const uint8_t *p, size_t len)
{
	uint8_t s = 0;

	while (len--)
		s = (uint8_t)(s + *p++);
	return s;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void table_header(uint8_t *t, const char sig[4], uint32_t len, uint8_t rev)
{
	memcpy(t, sig, 4);
	put32(t + 4, len);
	t[8] = rev;
	memcpy(t + 10, OEM_ID, 6);
	memcpy(t + 16, OEM_TABLE_ID, 8);
	put32(t + 24, 1);           /* OEM revision */
	memcpy(t + 28, "KOS8", 4);  /* creator */
	put32(t + 32, 1);
}

static void table_seal(uint8_t *t, uint32_t len)
{
	t[9] = 0;
	t[9] = (uint8_t)-acpi_checksum(t, len);
}

/* A Generic Address Structure for a register block in I/O port space. */
static void gas_io(uint8_t *g, uint16_t port, uint8_t bytes)
{
	g[0] = GAS_SYSTEM_IO;
	g[1] = (uint8_t)(bytes * 8); /* bit width */
	g[2] = 0;                    /* bit offset */
	g[3] = GAS_ACCESS_WORD;
	put64(g + 4, port);
}

/* The FACS: required outside hardware-reduced mode (global lock, waking
 * vector); ours is all zeros but its header. */
static uint32_t build_facs(uint8_t *t)
{
	memset(t, 0, FACS_LEN);
	memcpy(t, "FACS", 4);
	put32(t + 4, FACS_LEN);
	t[32] = 2; /* version */
	return FACS_LEN;
}

/* AML for the VM generation ID (devices/vmgenid.h), in the form Linux's
 * vmgenid driver looks for, and a Generic Event Device whose interrupt
 * tells it the ID changed:
 *
 *   Device (\_SB.VGEN) {
 *       Name (_HID, "KOSA0001")
 *       Name (_CID, "VM_Gen_Counter")
 *       Name (ADDR, Package (2) { VMGENID_ADDR, 0 })  // low, high dword
 *   }
 *   Device (\_SB.GED0) {
 *       Name (_HID, "ACPI0013")
 *       Name (_CRS, ResourceTemplate () {
 *           Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { VMGENID_GSI }
 *       })
 *       Method (_E0A) { Notify (\_SB.VGEN, 0x80) }  // _E<GSI in hex>: edge
 *   }
 *
 * Lengths are PkgLength encodings: one byte up to 63, else two
 * (0x40 | low nibble, then the rest), counting themselves. */
#define AML_SB_VGEN '\\', 0x2e, '_', 'S', 'B', '_', 'V', 'G', 'E', 'N'
#define AML_SB_GED0 '\\', 0x2e, '_', 'S', 'B', '_', 'G', 'E', 'D', '0'
_Static_assert(VMGENID_ADDR <= 0xffffffffu && VMGENID_GSI == 0x0a, "the AML below encodes both");

static const uint8_t aml_vmgenid[] = {
	0x5b, 0x82, 61, AML_SB_VGEN,                                /* Device, 63 bytes */
	0x08, '_', 'H', 'I', 'D', 0x0d, 'K', 'O', 'S', 'A', '0', '0', '0', '1', 0x00,
	0x08, '_', 'C', 'I', 'D', 0x0d, 'V', 'M', '_', 'G', 'e', 'n', '_', 'C', 'o', 'u', 'n',
	't', 'e', 'r', 0x00,
	0x08, 'A', 'D', 'D', 'R', 0x12, 8, 0x02,                    /* Package (2) */
	0x0c, (uint8_t)VMGENID_ADDR, (uint8_t)(VMGENID_ADDR >> 8), (uint8_t)(VMGENID_ADDR >> 16),
	(uint8_t)(VMGENID_ADDR >> 24), 0x00,
	0x5b, 0x82, 0x40 | (67 & 0x0f), 67 >> 4, AML_SB_GED0,       /* Device, 69 bytes */
	0x08, '_', 'H', 'I', 'D', 0x0d, 'A', 'C', 'P', 'I', '0', '0', '1', '3', 0x00,
	0x08, '_', 'C', 'R', 'S', 0x11, 14, 0x0a, 11,               /* Buffer (11) */
	0x89, 0x06, 0x00, 0x03, 0x01, VMGENID_GSI, 0x00, 0x00, 0x00, /* consumer, edge, high */
	0x79, 0x00,                                                 /* end tag */
	0x14, 19, '_', 'E', '0', 'A', 0x00,                         /* Method, no arguments */
	0x86, AML_SB_VGEN, 0x0a, 0x80,                              /* Notify */
};

static uint32_t build_dsdt(uint8_t *t)
{
	/* Name(_S5_, Package(4) {5, 0, 0, 0}): S5 sleep type a = 5. */
	static const uint8_t aml[] = {
		0x08, '_', 'S', '5', '_', 0x12, 0x07, 0x04,
		0x0a, ACPI_S5_SLEEP_TYPE, 0x00, 0x00, 0x00,
	};
	uint32_t len = ACPI_HDR_LEN + sizeof(aml) + sizeof(aml_vmgenid);

	table_header(t, "DSDT", len, 2);
	memcpy(t + ACPI_HDR_LEN, aml, sizeof(aml));
	memcpy(t + ACPI_HDR_LEN + sizeof(aml), aml_vmgenid, sizeof(aml_vmgenid));
	table_seal(t, len);
	return len;
}

static uint32_t build_fadt(uint8_t *t, uint64_t dsdt, uint64_t facs)
{
	memset(t, 0, FADT_LEN);
	table_header(t, "FACP", FADT_LEN, 6);
	put32(t + FADT_FIRMWARE_CTRL, (uint32_t)facs);
	put32(t + FADT_DSDT, (uint32_t)dsdt);
	put16(t + FADT_SCI_INT, ACPI_SCI_IRQ);
	/* No SMI command port: the machine is always in ACPI mode. */
	put32(t + FADT_PM1A_EVT_BLK, ACPI_PM1_EVT_PORT);
	put32(t + FADT_PM1A_CNT_BLK, ACPI_PM1_CNT_PORT);
	t[FADT_PM1_EVT_LEN] = ACPI_PM1_EVT_LEN;
	t[FADT_PM1_CNT_LEN] = ACPI_PM1_CNT_LEN;
	put16(t + FADT_IAPC_BOOT_ARCH, IAPC_LEGACY_DEVICES | IAPC_VGA_NOT_PRESENT |
					       IAPC_MSI_NOT_SUPPORTED | IAPC_CMOS_RTC_NOT_PRESENT);
	put32(t + FADT_FLAGS, FADT_F_WBINVD | FADT_F_PWR_BUTTON | FADT_F_SLP_BUTTON);
	t[FADT_MINOR_VERSION] = 4;
	put64(t + FADT_X_FIRMWARE_CTRL, facs);
	put64(t + FADT_X_DSDT, dsdt);
	gas_io(t + FADT_X_PM1A_EVT_BLK, ACPI_PM1_EVT_PORT, ACPI_PM1_EVT_LEN);
	gas_io(t + FADT_X_PM1A_CNT_BLK, ACPI_PM1_CNT_PORT, ACPI_PM1_CNT_LEN);
	memcpy(t + FADT_HYPERVISOR_ID, "KOSA8VM ", 8);
	table_seal(t, FADT_LEN);
	return FADT_LEN;
}

static uint32_t madt_len(int ncpus) { return ACPI_HDR_LEN + 8 + 8u * (uint32_t)ncpus + 12; }

static uint32_t build_madt(uint8_t *t, int ncpus)
{
	uint32_t len = madt_len(ncpus);
	uint8_t *e = t + ACPI_HDR_LEN + 8;

	memset(t, 0, len);
	table_header(t, "APIC", len, 4);
	put32(t + ACPI_HDR_LEN, LAPIC_ADDR);
	put32(t + ACPI_HDR_LEN + 4, MADT_PCAT_COMPAT);
	for (int i = 0; i < ncpus; i++, e += 8) {
		e[0] = MADT_LAPIC;
		e[1] = 8;
		e[2] = (uint8_t)i;   /* ACPI processor UID */
		e[3] = (uint8_t)i;   /* APIC id: vCPU index, as CPUID reports it */
		put32(e + 4, 1);     /* enabled */
	}
	/* The IOAPIC's id follows the CPUs' so the two never collide. */
	e[0] = MADT_IOAPIC;
	e[1] = 12;
	e[2] = (uint8_t)ncpus;
	put32(e + 4, IOAPIC_ADDR);
	put32(e + 8, 0); /* GSI base */
	table_seal(t, len);
	return len;
}

static void build_xsdt(uint8_t *t, uint64_t fadt, uint64_t madt)
{
	uint32_t len = ACPI_HDR_LEN + 16;

	table_header(t, "XSDT", len, 1);
	put64(t + ACPI_HDR_LEN, fadt);
	put64(t + ACPI_HDR_LEN + 8, madt);
	table_seal(t, len);
}

static void build_rsdp(uint8_t *r, uint64_t xsdt)
{
	memset(r, 0, RSDP_LEN);
	memcpy(r, "RSD PTR ", 8);
	memcpy(r + 9, OEM_ID, 6);
	r[15] = 2;            /* revision: ACPI 2.0+ with XSDT */
	put32(r + 20, RSDP_LEN);
	put64(r + 24, xsdt);
	r[8] = (uint8_t)-acpi_checksum(r, 20);   /* covers the ACPI 1.0 part */
	r[32] = (uint8_t)-acpi_checksum(r, RSDP_LEN);
}

int acpi_build(uint8_t *buf, uint64_t gpa, size_t space, int ncpus, uint64_t *rsdp_gpa)
{
	/* Layout: RSDP, XSDT, FACS (64-byte aligned), FADT, DSDT, MADT. */
	size_t off_xsdt = ALIGN_UP((size_t)RSDP_LEN, 16);
	size_t off_facs = ALIGN_UP(off_xsdt + ACPI_HDR_LEN + 16, 64);
	size_t off_fadt = ALIGN_UP(off_facs + FACS_LEN, 16);
	size_t off_dsdt = ALIGN_UP(off_fadt + FADT_LEN, 16);
	size_t off_madt = ALIGN_UP(off_dsdt + ACPI_HDR_LEN + DSDT_MAX_AML, 16);
	size_t end = off_madt + madt_len(ncpus);

	if (ncpus < 1 || ncpus > 254 || end > space)
		return -ENOSPC;
	memset(buf, 0, end);
	build_dsdt(buf + off_dsdt);
	build_facs(buf + off_facs);
	build_fadt(buf + off_fadt, gpa + off_dsdt, gpa + off_facs);
	build_madt(buf + off_madt, ncpus);
	build_xsdt(buf + off_xsdt, gpa + off_fadt, gpa + off_madt);
	build_rsdp(buf, gpa + off_xsdt);
	*rsdp_gpa = gpa;
	return (int)end;
}
