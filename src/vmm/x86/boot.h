/* Direct Linux boot on x86-64, no firmware: the VMM does what a boot loader
 * and the kernel's 16/32-bit set-up code would, and enters the kernel at its
 * 64-bit entry point (Documentation/x86/boot.rst, "64-bit Boot Protocol").
 *
 * Why this and not PVH: it boots the bzImage every distribution ships and
 * that our own kernel build produces by default, it has been stable since
 * protocol 2.10, and it needs no ELF note parsing; PVH would save only the
 * decompression, which LZ4 already makes cheap. */
#ifndef KOSA8_BOOT_X86_H
#define KOSA8_BOOT_X86_H

#include <asm/bootparam.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/guest_mem.h"
#include "vmm/accel.h"

/* Fixed low-memory layout (guest-physical). */
#define BOOT_GDT_ADDR       0x500ULL
#define BOOT_IDT_ADDR       0x520ULL
#define BOOT_ZERO_PAGE_ADDR 0x7000ULL
#define BOOT_STACK_TOP      0x8ff0ULL
#define BOOT_PML4_ADDR      0x9000ULL
#define BOOT_PDPT_ADDR      0xa000ULL
#define BOOT_PD_ADDR        0xb000ULL  /* four pages: identity map of 4 GiB */
#define BOOT_CMDLINE_ADDR   0x20000ULL
#define BOOT_CMDLINE_MAX    0x10000ULL
#define BOOT_EBDA_START     0x9fc00ULL /* legacy area from here to 1 MiB is reserved */
#define BOOT_BIOS_START     0xe0000ULL /* where the kernel scans for the ACPI RSDP */
#define BOOT_KERNEL_ADDR    0x100000ULL
#define BOOT_MIN_RAM        (32ULL << 20)

#define E820_TYPE_RAM 1
#define E820_TYPE_RESERVED 2

#define BOOT_GDT_CODE64_SEL 0x10 /* __BOOT_CS */
#define BOOT_GDT_DATA_SEL   0x18 /* __BOOT_DS */

/* What boot needs to know about a bzImage, after validation. */
struct bzimage {
	const struct setup_header *hdr; /* points into the image */
	size_t setup_size;              /* real-mode part, bytes */
	const uint8_t *kernel;          /* protected-mode part */
	size_t kernel_size;
	uint16_t version;
	uint32_t init_size;             /* memory the kernel needs from its load address */
	uint32_t initrd_addr_max;
	uint32_t cmdline_size;
};

/* Validates a bzImage; on failure why says what is wrong, for the user. */
int bzimage_parse(const uint8_t *img, size_t len, struct bzimage *bz, const char **why);

/* Fills an e820 table for the RAM layout; returns the number of entries. */
int x86_e820_build(const struct guest_region *regions, int nregions,
		   struct boot_e820_entry *tab, int max);

/* Identity page tables for the first 4 GiB (2 MiB pages) and a flat GDT,
 * written into guest memory at the fixed addresses above. */
void x86_page_tables_write(uint8_t *low_mem);
void x86_gdt_write(uint8_t *low_mem);

/* vCPU state at the 64-bit entry: long mode, paging on, rsi -> zero page. */
void x86_boot_cpu_state(struct x86_boot_cpu *st, uint64_t entry);

/* Where the initrd goes: as high as allowed, page-aligned, above the kernel. */
int x86_initrd_addr(const struct bzimage *bz, uint64_t low_ram_end,
		    uint64_t initrd_size, uint64_t *addr);

struct linux_boot {
	const uint8_t *kernel; size_t kernel_len;
	const uint8_t *initrd; size_t initrd_len; /* initrd may be NULL */
	const char *cmdline;
	uint64_t rsdp_addr;                        /* 0 when there is no ACPI */
};

/* Loads everything into guest memory and fills the boot CPU state. */
int x86_load_linux(struct guest_mem *m, const struct linux_boot *lb,
		   struct x86_boot_cpu *bsp, const char **why);

#endif
