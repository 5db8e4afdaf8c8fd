/* CPUID topology and ACPI tables, checked field by field against the SDM and
 * the ACPI 6.4 specification. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <stdio.h>
#include <unistd.h>

#include "vmm/accel.h"
#include "vmm/x86/acpi.h"
#include "vmm/x86/cpuid.h"

static void test_cpuid_basic_and_topology(void **state)
{
	struct cpuid_leaf l[] = {
		{.function = 1, .ebx = 0xff00abcd, .ecx = 0, .edx = 0},
		{.function = 0xb, .index = 0},
		{.function = 0xb, .index = 1},
		{.function = 0xb, .index = 2},
		{.function = 0x4, .index = 0, .eax = (1 << 5) | 1},
		{.function = 0x4, .index = 3, .eax = (3 << 5) | 3},
		{.function = 0x80000008, .ecx = 0xff},
		{.function = 0x40000001, .eax = 0x1234},
	};

	assert_int_equal(cpuid_filter(l, 8, 2, 4), 0);
	assert_int_equal(l[0].ebx >> 24, 2);            /* initial APIC id */
	assert_int_equal((l[0].ebx >> 16) & 0xff, 4);   /* logical CPUs */
	assert_int_equal(l[0].ebx & 0xffff, 0xabcd);    /* brand/clflush kept */
	assert_true(l[0].ecx & (1u << 31));             /* hypervisor */
	assert_true(l[0].edx & (1u << 28));             /* HTT with >1 CPU */
	assert_int_equal(l[1].edx, 2);                  /* x2APIC id */
	assert_int_equal(l[1].ebx, 1);
	assert_int_equal((l[1].ecx >> 8) & 0xff, 1);    /* SMT level */
	assert_int_equal(l[2].eax, 2);                  /* 2 bits for 4 cores */
	assert_int_equal(l[2].ebx, 4);
	assert_int_equal((l[2].ecx >> 8) & 0xff, 2);    /* core level */
	assert_int_equal((l[3].ecx >> 8) & 0xff, 0);    /* end of levels */
	assert_int_equal(l[4].eax >> 26, 3);            /* cores per package - 1 */
	assert_int_equal((l[4].eax >> 14) & 0xfff, 0);  /* L1 not shared */
	assert_int_equal((l[5].eax >> 14) & 0xfff, 3);  /* L3 shared by all */
	assert_int_equal(l[6].ecx & 0xff, 3);           /* AMD NC */
	assert_int_equal(l[7].eax, 0x1234);             /* KVM features untouched */
}

static void test_cpuid_single_and_bad(void **state)
{
	struct cpuid_leaf l[] = {{.function = 1, .edx = 1u << 28}};

	assert_int_equal(cpuid_filter(l, 1, 0, 1), 0);
	assert_false(l[0].edx & (1u << 28));
	assert_int_equal(cpuid_filter(l, 1, 0, 0), -EINVAL);
	assert_int_equal(cpuid_filter(l, 1, 4, 4), -EINVAL);
	assert_int_equal(cpuid_filter(l, 1, -1, 4), -EINVAL);
}

static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

#define BASE 0xe0000ULL

static const uint8_t *table_at(const uint8_t *buf, uint64_t gpa, const char *sig)
{
	const uint8_t *t = buf + (gpa - BASE);

	assert_memory_equal(t, sig, 4);
	assert_int_equal(acpi_checksum(t, get32(t + 4)), 0);
	return t;
}

static void test_acpi_tables(void **state)
{
	uint8_t *buf = calloc(1, 0x20000);
	uint64_t rsdp;
	const uint8_t *xsdt, *fadt, *madt, *dsdt;
	int ncpus = 3, len;

	len = acpi_build(buf, BASE, 0x20000, ncpus, &rsdp);
	assert_true(len > 0);
	assert_int_equal(rsdp, BASE);
	assert_memory_equal(buf, "RSD PTR ", 8);
	assert_int_equal(acpi_checksum(buf, 20), 0);
	assert_int_equal(acpi_checksum(buf, 36), 0);
	assert_int_equal(buf[15], 2);

	xsdt = table_at(buf, get64(buf + 24), "XSDT");
	assert_int_equal(get32(xsdt + 4), 36 + 16);
	fadt = table_at(buf, get64(xsdt + 36), "FACP");
	madt = table_at(buf, get64(xsdt + 44), "APIC");
	dsdt = table_at(buf, get64(fadt + 140), "DSDT");
	assert_int_equal(get32(fadt + 40), get64(fadt + 140));
	/* Not hardware-reduced (Linux would drop the legacy IRQs); a PM1a
	 * control block of 2 bytes at our port, in both the 32- and 64-bit fields. */
	assert_false(get32(fadt + 112) & (1u << 20));
	assert_int_equal(get32(fadt + 64), ACPI_PM1_CNT_PORT);
	assert_int_equal(fadt[89], 2);
	assert_int_equal(fadt[172], 1);                 /* system I/O */
	assert_int_equal(get64(fadt + 176), ACPI_PM1_CNT_PORT);
	assert_int_equal(get32(fadt + 56), ACPI_PM1_EVT_PORT);
	assert_int_equal(fadt[88], 4);
	/* The FACS both fields point to is there. */
	const uint8_t *facs = buf + (get64(fadt + 132) - BASE);
	assert_memory_equal(facs, "FACS", 4);
	assert_int_equal(get32(fadt + 36), get64(fadt + 132));
	assert_int_equal(get64(fadt + 132) % 64, 0);
	/* The DSDT announces \_S5 with sleep type 5. */
	assert_non_null(memmem(dsdt + 36, get32(dsdt + 4) - 36, "_S5_", 4));

	/* MADT: LAPIC address, then one enabled LAPIC per CPU and an IOAPIC. */
	assert_int_equal(get32(madt + 36), LAPIC_ADDR);
	const uint8_t *e = madt + 44, *end = madt + get32(madt + 4);
	int lapics = 0, ioapics = 0;
	while (e < end) {
		if (e[0] == 0) {
			assert_int_equal(e[3], lapics);
			assert_int_equal(get32(e + 4) & 1, 1);
			lapics++;
		} else if (e[0] == 1) {
			assert_int_equal(get32(e + 4), IOAPIC_ADDR);
			ioapics++;
		}
		assert_true(e[1] > 0);
		e += e[1];
	}
	assert_ptr_equal(e, end);
	assert_int_equal(lapics, ncpus);
	assert_int_equal(ioapics, 1);
	free(buf);
}

/* An AML PkgLength at p: its value (which counts its own bytes). */
static uint32_t pkg_length(const uint8_t *p)
{
	uint32_t n = p[0] >> 6, v = n ? p[0] & 0x0f : p[0] & 0x3f;

	for (uint32_t i = 1; i <= n; i++)
		v |= (uint32_t)p[i] << (4 + 8 * (i - 1));
	return v;
}

/* The DSDT's body is whole terms whose lengths add up to the table's (a
 * wrong PkgLength makes the guest's ACPICA drop the rest of the table);
 * the generation ID's address, its event device's interrupt and the
 * _Exx method the GED driver looks up for it are the VMM's. */
static void test_acpi_vmgenid(void **state)
{
	uint8_t *buf = calloc(1, 0x20000);
	const uint8_t *fadt, *dsdt, *p, *end, *hit;
	char evt[8];
	uint64_t rsdp;
	uint32_t dev_len, addr;
	int devices = 0;

	(void)state;
	assert_true(acpi_build(buf, BASE, 0x20000, 1, &rsdp) > 0);
	fadt = table_at(buf, get64(table_at(buf, get64(buf + 24), "XSDT") + 36), "FACP");
	dsdt = table_at(buf, get64(fadt + 140), "DSDT");
	p = dsdt + 36;
	end = dsdt + get32(dsdt + 4);
	while (p < end) {
		if (p[0] == 0x08 && p[5] == 0x12) { /* Name (xxxx, Package) */
			p += 6 + pkg_length(p + 6);
		} else {
			assert_true(p[0] == 0x5b && p[1] == 0x82); /* Device */
			dev_len = pkg_length(p + 2);
			assert_true(p + 2 + dev_len <= end);
			p += 2 + dev_len;
			devices++;
		}
	}
	assert_ptr_equal(p, end);
	assert_int_equal(devices, 2);

	hit = memmem(dsdt, get32(dsdt + 4), "ADDR\x12", 5);
	assert_non_null(hit);
	assert_int_equal(hit[6], 2);    /* two elements */
	assert_int_equal(hit[7], 0x0c); /* a dword: the low half */
	memcpy(&addr, hit + 8, 4);
	assert_int_equal(addr, VMGENID_ADDR);
	assert_int_equal(hit[12], 0x00); /* high half: zero */
	assert_non_null(memmem(dsdt, get32(dsdt + 4), "VM_Gen_Counter", 14));
	assert_non_null(memmem(dsdt, get32(dsdt + 4), "ACPI0013", 8));
	/* Extended interrupt: consumer, edge, active high, one line. */
	hit = memmem(dsdt, get32(dsdt + 4), "\x89\x06\x00\x03\x01", 5);
	assert_non_null(hit);
	assert_int_equal(get32(hit + 5), VMGENID_GSI);
	snprintf(evt, sizeof(evt), "_E%02X", VMGENID_GSI);
	assert_non_null(memmem(dsdt, get32(dsdt + 4), evt, 4));
	free(buf);
}

static void test_acpi_limits(void **state)
{
	uint8_t buf[512];
	uint64_t rsdp;

	assert_int_equal(acpi_build(buf, BASE, sizeof(buf), 1, &rsdp), -ENOSPC);
	assert_int_equal(acpi_build(buf, BASE, sizeof(buf), 0, &rsdp), -ENOSPC);
}

/* Writes text to a temporary file and asks whether it shows hardware
 * virtualization. */
static bool hw_virt_of(const char *text)
{
	char path[] = "/tmp/kosa8-cpuinfo-XXXXXX";
	int fd = mkstemp(path);
	bool r;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	r = accel_cpuinfo_hw_virt(path);
	unlink(path);
	return r;
}

/* Whole flags only: svm and vmx, not a flag that merely contains them, and
 * not the word elsewhere on the line or in another field. */
static void test_hw_virt_flags(void **state)
{
	(void)state;
	assert_true(hw_virt_of("processor\t: 0\nflags\t\t: fpu vme svm cx16 lm\n"));
	assert_true(hw_virt_of("processor\t: 0\nflags\t\t: fpu vmx\nflags\t\t: fpu\n"));
	assert_false(hw_virt_of("processor\t: 0\nflags\t\t: fpu cx16 hypervisor svm_lock vmxsvm\n"));
	assert_false(hw_virt_of("model name\t: svm vmx\nflags\t\t: fpu sse2\n"));
	assert_false(hw_virt_of("processor\t: 0\n"));
	assert_false(hw_virt_of("flags svm\n")); /* no colon: not a field */
	/* Unreadable: cannot tell, so KVM itself decides. */
	assert_true(accel_cpuinfo_hw_virt("/nonexistent/cpuinfo"));
}

/* KVM_GET_SUPPORTED_CPUID as read inside the helper VM (nested KVM under
 * QEMU 7.2's TCG, -cpu max), 2026-12-06.  Leaf 0xD is self-consistent there
 * (PKRU at 0xa80 + 8 = EBX 0xa88), but the guest's XSETBV never reaches KVM
 * (the probe reads XCR0 = 1 back), so KVM rewrites 0xD.0 EBX to 576 and the
 * guest kernel warns "XSAVE consistency problem: size 2696 != kernel_size
 * 576".  The leaves must come out without XSAVE, its dependants and 0xD. */
static void test_cpuid_xsave_unseen(void **state)
{
	struct cpuid_leaf l[] = {
		{.function = 1, .eax = 0x00060fb1, .ebx = 0x800, .ecx = 0x76f83203, .edx = 0x0f8bfbfd},
		{.function = 7, .index = 0, .ebx = 0x019803ab, .ecx = 0x0001020c, .edx = 0x20000000},
		{.function = 0xd, .index = 0, .eax = 0x207, .ebx = 0xa88, .ecx = 0xa88},
		{.function = 0xd, .index = 1, .eax = 0x5},
		{.function = 0xd, .index = 2, .eax = 0x100, .ebx = 0x240},
		{.function = 0xd, .index = 9, .eax = 0x8, .ebx = 0xa80},
		{.function = 0x80000001, .eax = 0x00060fb1, .ecx = 0x75, .edx = 0xedd3fbfd},
	};

	(void)state;
	assert_int_equal(cpuid_fix_xsave(l, 7, 0x1), 1);
	assert_int_equal(l[0].ecx, 0x76f83203u & ~((1u << 12) | (1u << 26) | (1u << 28) | (1u << 29)));
	assert_int_equal(l[0].eax, 0x00060fb1);         /* the rest untouched */
	assert_int_equal(l[0].edx, 0x0f8bfbfd);
	assert_int_equal(l[1].ebx, 0x019803ab & ~(1u << 5));           /* no AVX2 */
	assert_int_equal(l[1].ecx, 0x0001020c & ~((1u << 3) | (1u << 9))); /* no PKU, VAES */
	assert_int_equal(l[1].edx, 0x20000000);
	for (int i = 2; i < 6; i++)
		assert_true((l[i].eax | l[i].ebx | l[i].ecx | l[i].edx) == 0);
	assert_int_equal(l[6].ecx, 0x75);
	assert_int_equal(l[6].edx, 0xedd3fbfd);
}

/* A host whose KVM sees XSETBV (every real CPU: XSETBV always exits) keeps
 * everything, AVX-512 included: leaves of an AVX-512 server part. */
static void test_cpuid_xsave_seen_untouched(void **state)
{
	struct cpuid_leaf l[] = {
		{.function = 1, .eax = 0x00050654, .ecx = 0x7ffefbff, .edx = 0xbfebfbff},
		{.function = 7, .index = 0, .ebx = 0xd39ffffb, .ecx = 0x00000818, .edx = 0xbc000400},
		{.function = 0xd, .index = 0, .eax = 0x2ff, .ebx = 0xa88, .ecx = 0xa88},
		{.function = 0xd, .index = 1, .eax = 0xf, .ebx = 0xa88},
		{.function = 0xd, .index = 2, .eax = 0x100, .ebx = 0x240},
		{.function = 0xd, .index = 5, .eax = 0x40, .ebx = 0x440},
		{.function = 0xd, .index = 6, .eax = 0x200, .ebx = 0x480},
		{.function = 0xd, .index = 7, .eax = 0x400, .ebx = 0x680},
		{.function = 0xd, .index = 9, .eax = 0x8, .ebx = 0xa80},
	};
	struct cpuid_leaf before[9];

	(void)state;
	memcpy(before, l, sizeof(l));
	assert_int_equal(cpuid_fix_xsave(l, 9, CPUID_PROBE_XCR0), 0);
	assert_memory_equal(l, before, sizeof(l));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpuid_basic_and_topology),
		cmocka_unit_test(test_hw_virt_flags),
		cmocka_unit_test(test_cpuid_single_and_bad),
		cmocka_unit_test(test_acpi_tables),
		cmocka_unit_test(test_acpi_vmgenid),
		cmocka_unit_test(test_acpi_limits),
		cmocka_unit_test(test_cpuid_xsave_unseen),
		cmocka_unit_test(test_cpuid_xsave_seen_untouched),
	};
	return cmocka_run_group_tests_name("cpuid_acpi", tests, NULL, NULL);
}
