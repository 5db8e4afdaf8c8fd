/* Boot protocol pieces checked against the documents, not against the code:
 * offsets from Documentation/x86/boot.rst, bits from the SDM. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hw/guest_mem.h"
#include "vmm/x86/boot.h"

#define IMG_LEN (64 * 1024)

/* A minimal image with the header fields a real bzImage has. */
static uint8_t *fake_bzimage(void)
{
	uint8_t *img = calloc(1, IMG_LEN);
	uint32_t syssize = (IMG_LEN - 5 * 512) / 16, init_size = 0x200000;
	uint16_t v;

	img[0x1f1] = 4;                 /* setup_sects */
	memcpy(img + 0x1f4, &syssize, 4);
	v = 0xaa55; memcpy(img + 0x1fe, &v, 2);
	img[0x200] = 0xeb; img[0x201] = 0x6a; /* jmp to end of header (0x26c) */
	memcpy(img + 0x202, "HdrS", 4);
	v = 0x020f; memcpy(img + 0x206, &v, 2);
	img[0x211] = 0x01;              /* loadflags: LOADED_HIGH */
	memcpy(img + 0x260, &init_size, 4);
	v = 0x3; memcpy(img + 0x236, &v, 2); /* xloadflags: KERNEL_64 | CAN_BE_LOADED_ABOVE_4G */
	uint32_t cmdline_size = 2047; memcpy(img + 0x238, &cmdline_size, 4);
	uint32_t initrd_max = 0x7fffffff; memcpy(img + 0x22c, &initrd_max, 4);
	return img;
}

static void test_parse_valid(void **state)
{
	uint8_t *img = fake_bzimage();
	struct bzimage bz;
	const char *why = NULL;

	assert_int_equal(bzimage_parse(img, IMG_LEN, &bz, &why), 0);
	assert_int_equal(bz.setup_size, 5 * 512);
	assert_int_equal(bz.kernel_size, IMG_LEN - 5 * 512);
	assert_int_equal(bz.version, 0x020f);
	assert_int_equal(bz.cmdline_size, 2047);
	assert_int_equal(bz.initrd_addr_max, 0x7fffffff);
	free(img);
}

static void expect_reject(uint8_t *img, size_t len, const char *needle)
{
	struct bzimage bz;
	const char *why = NULL;

	assert_int_equal(bzimage_parse(img, len, &bz, &why), -EINVAL);
	assert_non_null(why);
	assert_non_null(strstr(why, needle));
}

static void test_parse_rejects(void **state)
{
	uint8_t *img = fake_bzimage();

	expect_reject(img, 100, "too small");
	img[0x202] = 'X';
	expect_reject(img, IMG_LEN, "not a Linux bzImage");
	img[0x202] = 'H';
	img[0x206] = 0x08; /* version 2.08 */
	expect_reject(img, IMG_LEN, "older than 2.12");
	img[0x206] = 0x0f;
	img[0x236] = 0; /* not 64-bit */
	expect_reject(img, IMG_LEN, "64-bit");
	img[0x236] = 3;
	expect_reject(img, IMG_LEN - 4096, "truncated");
	img[0x1f1] = 200; /* setup past the end of a short file */
	expect_reject(img, 0x1f1 + 0x80 + 4096, "truncated");
	free(img);
}

static void test_e820_small(void **state)
{
	struct guest_region r[2];
	struct boot_e820_entry t[8];
	int nr, n;

	guest_mem_layout(512ULL << 20, r, &nr);
	assert_int_equal(nr, 1);
	n = x86_e820_build(r, nr, t, 8);
	assert_int_equal(n, 3);
	assert_int_equal(t[0].addr, 0);
	assert_int_equal(t[0].size, 0x9fc00);
	assert_int_equal(t[0].type, E820_TYPE_RAM);
	assert_int_equal(t[1].addr, 0x9fc00);
	assert_int_equal(t[1].addr + t[1].size, 0x100000);
	assert_int_equal(t[1].type, E820_TYPE_RESERVED);
	assert_int_equal(t[2].addr, 0x100000);
	assert_int_equal(t[2].addr + t[2].size, 512ULL << 20);
}

static void test_e820_above_4g(void **state)
{
	struct guest_region r[2];
	struct boot_e820_entry t[8];
	int nr, n;
	uint64_t ram = 0;

	guest_mem_layout(6ULL << 30, r, &nr);
	assert_int_equal(nr, 2);
	assert_int_equal(r[0].size, 3ULL << 30);
	assert_int_equal(r[1].gpa, 4ULL << 30);
	n = x86_e820_build(r, nr, t, 8);
	assert_int_equal(n, 4);
	assert_int_equal(t[3].addr, 4ULL << 30);
	for (int i = 0; i < n; i++)
		if (t[i].type == E820_TYPE_RAM)
			ram += t[i].size;
	/* All RAM but the reserved legacy hole is usable. */
	assert_int_equal(ram, (6ULL << 30) - (0x100000 - 0x9fc00));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Walks the tables the way the MMU does for one virtual address. */
static uint64_t translate(const uint8_t *mem, uint64_t cr3, uint64_t va)
{
	uint64_t pml4e = get64(mem + cr3 + ((va >> 39) & 511) * 8);
	uint64_t pdpte, pde;

	if (!(pml4e & 1)) return ~0ULL;
	pdpte = get64(mem + (pml4e & ~0xfffULL) + ((va >> 30) & 511) * 8);
	if (!(pdpte & 1)) return ~0ULL;
	pde = get64(mem + (pdpte & ~0xfffULL) + ((va >> 21) & 511) * 8);
	if (!(pde & 1) || !(pde & 0x80)) return ~0ULL;
	return (pde & ~0x1fffffULL) | (va & 0x1fffff);
}

static void test_page_tables_identity(void **state)
{
	uint8_t *mem = calloc(1, 0x10000);
	const uint64_t probes[] = {0, 0x7000, 0x100200, 0x1234567, 0x3fffffff,
				   0x40000000, 0xbfffffff, 0xfee00000, 0xffffffff};

	x86_page_tables_write(mem);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
		assert_int_equal(translate(mem, BOOT_PML4_ADDR, probes[i]), probes[i]);
	/* Nothing above 4 GiB is mapped. */
	assert_int_equal(translate(mem, BOOT_PML4_ADDR, 0x100000000ULL), ~0ULL);
	free(mem);
}

static void test_gdt_and_cpu_state(void **state)
{
	uint8_t *mem = calloc(1, 0x1000);
	struct x86_boot_cpu st;
	uint64_t code, data;

	x86_gdt_write(mem);
	code = get64(mem + BOOT_GDT_ADDR + BOOT_GDT_CODE64_SEL);
	data = get64(mem + BOOT_GDT_ADDR + BOOT_GDT_DATA_SEL);
	/* Code: present, S, type 0xb, L=1, D=0, G=1.  Data: type 3, D/B=1. */
	assert_true(code & (1ULL << 47));
	assert_int_equal((code >> 40) & 0xf, 0xb);
	assert_true(code & (1ULL << 53));
	assert_false(code & (1ULL << 54));
	assert_int_equal((data >> 40) & 0xf, 0x3);
	assert_true(data & (1ULL << 54));

	x86_boot_cpu_state(&st, 0x100200);
	assert_int_equal(st.rip, 0x100200);
	assert_int_equal(st.rsi, BOOT_ZERO_PAGE_ADDR);
	assert_true(st.cr0 & 0x80000001ULL);      /* PG and PE */
	assert_true(st.cr4 & 0x20);               /* PAE */
	assert_int_equal(st.efer & 0x500, 0x500); /* LME and LMA */
	assert_int_equal(st.cs.selector, 0x10);
	assert_int_equal(st.cs.l, 1);
	assert_int_equal(st.ds.selector, 0x18);
	assert_false(st.rflags & 0x200);          /* interrupts off */
	free(mem);
}

static void test_initrd_placement(void **state)
{
	struct bzimage bz = {.init_size = 0x1000000, .initrd_addr_max = 0x7fffffff};
	uint64_t a;

	assert_int_equal(x86_initrd_addr(&bz, 512ULL << 20, 1000000, &a), 0);
	assert_int_equal(a & 4095, 0);
	assert_true(a + 1000000 <= 512ULL << 20);
	assert_true(a >= 0x100000 + 0x1000000);
	/* The kernel's limit wins over the end of RAM. */
	bz.initrd_addr_max = 0x0fffffff;
	assert_int_equal(x86_initrd_addr(&bz, 1ULL << 30, 4096, &a), 0);
	assert_true(a + 4096 <= 0x10000000);
	/* Too big to fit above the kernel. */
	assert_int_equal(x86_initrd_addr(&bz, 64ULL << 20, 60ULL << 20, &a), -ENOMEM);
}

static void test_load_linux(void **state)
{
	uint8_t *img = fake_bzimage();
	struct guest_mem m;
	struct x86_boot_cpu bsp;
	const char *why = NULL;
	uint8_t initrd[5000];
	struct boot_params *bp;

	memset(initrd, 0xab, sizeof(initrd));
	assert_int_equal(guest_mem_create(&m, 64ULL << 20), 0);
	struct linux_boot lb = {.kernel = img, .kernel_len = IMG_LEN, .initrd = initrd,
				.initrd_len = sizeof(initrd), .cmdline = "console=ttyS0 k8.test=x",
				.rsdp_addr = 0xe0000};
	assert_int_equal(x86_load_linux(&m, &lb, &bsp, &why), 0);
	bp = (struct boot_params *)(m.base + BOOT_ZERO_PAGE_ADDR);
	assert_int_equal(bp->hdr.header, 0x53726448);
	assert_int_equal(bp->hdr.type_of_loader, 0xff);
	assert_int_equal(bp->hdr.cmd_line_ptr, BOOT_CMDLINE_ADDR);
	assert_string_equal((char *)m.base + BOOT_CMDLINE_ADDR, "console=ttyS0 k8.test=x");
	assert_int_equal(bp->hdr.ramdisk_size, sizeof(initrd));
	assert_memory_equal(m.base + bp->hdr.ramdisk_image, initrd, sizeof(initrd));
	assert_int_equal(bp->acpi_rsdp_addr, 0xe0000);
	assert_int_equal(bp->e820_entries, 3);
	assert_memory_equal(m.base + BOOT_KERNEL_ADDR, img + 5 * 512, 4096);
	assert_int_equal(bsp.rip, BOOT_KERNEL_ADDR + 0x200);

	/* A command line longer than the kernel's cmdline_size is refused. */
	char *longcmd = malloc(4000);
	memset(longcmd, 'a', 3999);
	longcmd[3999] = 0;
	lb.cmdline = longcmd;
	assert_int_equal(x86_load_linux(&m, &lb, &bsp, &why), -E2BIG);
	free(longcmd);
	guest_mem_destroy(&m);
	free(img);
}

static void test_guest_mem_ptr_bounds(void **state)
{
	struct guest_mem m;

	assert_int_equal(guest_mem_create(&m, 64ULL << 20), 0);
	assert_non_null(guest_mem_ptr(&m, 0, 64ULL << 20));
	assert_non_null(guest_mem_ptr(&m, (64ULL << 20) - 1, 1));
	assert_null(guest_mem_ptr(&m, (64ULL << 20) - 1, 2));
	assert_null(guest_mem_ptr(&m, 64ULL << 20, 0 + 1));
	assert_null(guest_mem_ptr(&m, ~0ULL, 2));
	assert_null(guest_mem_ptr(&m, 16, ~0ULL));
	guest_mem_destroy(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_valid),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_e820_small),
		cmocka_unit_test(test_e820_above_4g),
		cmocka_unit_test(test_page_tables_identity),
		cmocka_unit_test(test_gdt_and_cpu_state),
		cmocka_unit_test(test_initrd_placement),
		cmocka_unit_test(test_load_linux),
		cmocka_unit_test(test_guest_mem_ptr_bounds),
	};
	return cmocka_run_group_tests_name("boot_x86", tests, NULL, NULL);
}
