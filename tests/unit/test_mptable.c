#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vmm/x86/acpi.h"
#include "vmm/x86/mptable.h"

#define LOW_SIZE 0x100000
#define MPF 0x9fc00ULL
#define MPC 0xe0400ULL

static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* The floating pointer where Linux looks first (the last KiB of base
 * memory), pointing at a configuration table with every CPU, the IOAPIC of
 * the MADT and ISA IRQ n on IOAPIC pin n, as the MADT says. */
static void test_mptable_layout(void **state)
{
	uint8_t *low = calloc(1, LOW_SIZE);
	const uint8_t *f = low + MPF, *t = low + MPC, *e;
	int ncpus = 3, len, ints = 0, lints = 0;

	len = mptable_build(low, MPF, MPC, LOW_SIZE, ncpus);
	assert_int_equal(len, 44 + 20 * ncpus + 8 * 20);
	assert_memory_equal(f, "_MP_", 4);
	assert_int_equal(get32(f + 4), MPC);
	assert_int_equal(f[8], 1);
	assert_int_equal(f[9], 4);
	assert_int_equal(acpi_checksum(f, 16), 0);
	assert_int_equal(f[11], 0); /* a table follows: no default configuration */

	assert_memory_equal(t, "PCMP", 4);
	assert_int_equal(get16(t + 4), len);
	assert_int_equal(acpi_checksum(t, (size_t)len), 0);
	assert_int_equal(get32(t + 36), LAPIC_ADDR);
	assert_int_equal(get16(t + 34), ncpus + 2 + 16 + 2);
	e = t + 44;
	for (int i = 0; i < ncpus; i++, e += 20) {
		assert_int_equal(e[0], 0);
		assert_int_equal(e[1], i);
		assert_int_equal(e[3], i == 0 ? 3 : 1); /* enabled; the BSP first */
	}
	assert_int_equal(e[0], 1);
	assert_memory_equal(e + 2, "ISA   ", 6);
	e += 8;
	assert_int_equal(e[0], 2);
	assert_int_equal(e[1], ncpus);
	assert_int_equal(get32(e + 4), IOAPIC_ADDR);
	for (e += 8; e < t + len; e += 8) {
		if (e[0] == 3) {
			assert_int_equal(e[5], ints); /* ISA IRQ ... */
			assert_int_equal(e[6], ncpus);
			assert_int_equal(e[7], ints); /* ... on the same IOAPIC pin */
			ints++;
		} else {
			assert_int_equal(e[0], 4);
			assert_int_equal(e[7], lints++);
		}
	}
	assert_int_equal(ints, 16);
	assert_int_equal(lints, 2);
	free(low);
}

static void test_mptable_limits(void **state)
{
	uint8_t *low = calloc(1, LOW_SIZE);
	int len = 44 + 20 * 254 + 8 * 20;

	assert_int_equal(mptable_build(low, MPF, MPC, LOW_SIZE, 0), -EINVAL);
	assert_int_equal(mptable_build(low, MPF, MPC, LOW_SIZE, 255), -EINVAL);
	assert_int_equal(mptable_build(low, MPF, MPC, MPC + (uint64_t)len - 1, 254), -ENOSPC);
	assert_int_equal(mptable_build(low, MPF, MPC, MPC + (uint64_t)len, 254), len);
	/* The table may not run over its own pointer, nor start past its end. */
	assert_int_equal(mptable_build(low, MPF, MPF - 16, LOW_SIZE, 1), -ENOSPC);
	assert_int_equal(mptable_build(low, MPF, MPF + 8, LOW_SIZE, 1), -ENOSPC);
	assert_int_equal(mptable_build(low, MPF, MPC, MPC - 1, 1), -ENOSPC);
	free(low);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mptable_layout),
		cmocka_unit_test(test_mptable_limits),
	};
	return cmocka_run_group_tests_name("mptable", tests, NULL, NULL);
}
