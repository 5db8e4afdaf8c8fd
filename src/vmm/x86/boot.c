#include "vmm/x86/boot.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"

#define HDR_OFFSET 0x1f1
#define HDRS_MAGIC 0x53726448u /* "HdrS" */
#define BOOT_FLAG_MAGIC 0xaa55

#define PTE_PRESENT 0x1ULL
#define PTE_WRITE   0x2ULL
#define PTE_HUGE    0x80ULL

#define CR0_PE 0x1ULL
#define CR0_ET 0x10ULL
#define CR0_NE 0x20ULL
#define CR0_PG 0x80000000ULL
#define CR4_PAE 0x20ULL
#define EFER_LME 0x100ULL
#define EFER_LMA 0x400ULL

int bzimage_parse(const uint8_t *img, size_t len, struct bzimage *bz, const char **why)
{
	const struct setup_header *h;
	size_t setup_sects;

	memset(bz, 0, sizeof(*bz));
	if (len < HDR_OFFSET + sizeof(*h)) {
		*why = "file is too small to be a Linux kernel (bzImage)";
		return -EINVAL;
	}
	h = (const struct setup_header *)(img + HDR_OFFSET);
	if (h->boot_flag != BOOT_FLAG_MAGIC || h->header != HDRS_MAGIC) {
		*why = "not a Linux bzImage (no boot sector signature or 'HdrS' header); pass the bzImage, not vmlinux or an initrd";
		return -EINVAL;
	}
	if (h->version < 0x020c) {
		*why = "kernel boot protocol is older than 2.12 (no 64-bit entry); use a Linux 3.8 or newer bzImage";
		return -EINVAL;
	}
	if (!(h->xloadflags & XLF_KERNEL_64) || !(h->loadflags & LOADED_HIGH)) {
		*why = "kernel cannot be entered in 64-bit mode (not an x86-64 bzImage)";
		return -EINVAL;
	}
	setup_sects = h->setup_sects ? h->setup_sects : 4;
	bz->setup_size = (setup_sects + 1) * 512;
	if (bz->setup_size >= len) {
		*why = "bzImage is truncated: the set-up code runs past the end of the file";
		return -EINVAL;
	}
	/* syssize counts 16-byte paragraphs of the protected-mode part. */
	if ((uint64_t)h->syssize * 16 > len - bz->setup_size) {
		*why = "bzImage is truncated: the kernel runs past the end of the file";
		return -EINVAL;
	}
	bz->hdr = h;
	bz->kernel = img + bz->setup_size;
	bz->kernel_size = len - bz->setup_size;
	bz->version = h->version;
	bz->init_size = h->init_size;
	bz->initrd_addr_max = h->initrd_addr_max ? h->initrd_addr_max : 0x37ffffff;
	bz->cmdline_size = h->cmdline_size ? h->cmdline_size : 255;
	if (bz->init_size < bz->kernel_size) {
		*why = "bzImage header is corrupt (init_size smaller than the kernel)";
		return -EINVAL;
	}
	return 0;
}

static int e820_add(struct boot_e820_entry *tab, int n, int max,
		    uint64_t addr, uint64_t size, uint32_t type)
{
	if (n >= max || size == 0)
		return n;
	tab[n] = (struct boot_e820_entry){.addr = addr, .size = size, .type = type};
	return n + 1;
}

int x86_e820_build(const struct guest_region *regions, int nregions,
		   struct boot_e820_entry *tab, int max)
{
	uint64_t low = regions[0].size;
	int n = 0;

	/* Conventional memory, then the legacy EBDA/BIOS area (where our ACPI
	 * tables live) reserved, then RAM from 1 MiB to the hole. */
	n = e820_add(tab, n, max, 0, BOOT_EBDA_START, E820_TYPE_RAM);
	n = e820_add(tab, n, max, BOOT_EBDA_START, BOOT_KERNEL_ADDR - BOOT_EBDA_START,
		     E820_TYPE_RESERVED);
	if (low > BOOT_KERNEL_ADDR)
		n = e820_add(tab, n, max, BOOT_KERNEL_ADDR, low - BOOT_KERNEL_ADDR, E820_TYPE_RAM);
	if (nregions > 1)
		n = e820_add(tab, n, max, regions[1].gpa, regions[1].size, E820_TYPE_RAM);
	return n;
}

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, sizeof(v)); }

void x86_page_tables_write(uint8_t *low)
{
	memset(low + BOOT_PML4_ADDR, 0, 4096);
	memset(low + BOOT_PDPT_ADDR, 0, 4096);
	put_u64(low + BOOT_PML4_ADDR, BOOT_PDPT_ADDR | PTE_PRESENT | PTE_WRITE);
	for (uint64_t g = 0; g < 4; g++) {
		uint64_t pd = BOOT_PD_ADDR + g * 4096;
		put_u64(low + BOOT_PDPT_ADDR + g * 8, pd | PTE_PRESENT | PTE_WRITE);
		for (uint64_t i = 0; i < 512; i++) {
			uint64_t phys = (g << 30) | (i << 21);
			put_u64(low + pd + i * 8, phys | PTE_PRESENT | PTE_WRITE | PTE_HUGE);
		}
	}
}

/* A GDT descriptor from its parts (SDM vol. 3, 3.4.5). */
static uint64_t gdt_entry(uint16_t flags, uint32_t base, uint32_t limit)
{
	return ((uint64_t)(base & 0xff000000u) << 32) | ((uint64_t)(base & 0x00ffffffu) << 16) |
	       ((uint64_t)(limit & 0x000f0000u) << 32) | (uint64_t)(limit & 0x0000ffffu) |
	       ((uint64_t)(flags & 0xf0ffu) << 40);
}

void x86_gdt_write(uint8_t *low)
{
	/* null, null, 64-bit code at 0x10, data at 0x18: the selectors the
	 * kernel's 64-bit entry expects (__BOOT_CS, __BOOT_DS). */
	const uint64_t gdt[4] = {
		0, 0,
		gdt_entry(0xa09b, 0, 0xfffff), /* G, L, P, code exec/read, accessed */
		gdt_entry(0xc093, 0, 0xfffff), /* G, D/B, P, data read/write, accessed */
	};

	memcpy(low + BOOT_GDT_ADDR, gdt, sizeof(gdt));
	memset(low + BOOT_IDT_ADDR, 0, 8);
}

static struct x86_segment seg_flat(uint16_t sel, uint8_t type, uint8_t l, uint8_t db)
{
	return (struct x86_segment){
		.base = 0, .limit = 0xfffff, .selector = sel, .type = type,
		.present = 1, .dpl = 0, .db = db, .s = 1, .l = l, .g = 1,
	};
}

void x86_boot_cpu_state(struct x86_boot_cpu *st, uint64_t entry)
{
	memset(st, 0, sizeof(*st));
	st->rip = entry;
	st->rsp = BOOT_STACK_TOP;
	st->rsi = BOOT_ZERO_PAGE_ADDR;
	st->rflags = 0x2; /* bit 1 is reserved as one; interrupts off */
	st->cr0 = CR0_PE | CR0_ET | CR0_NE | CR0_PG;
	st->cr3 = BOOT_PML4_ADDR;
	st->cr4 = CR4_PAE;
	st->efer = EFER_LME | EFER_LMA;
	st->gdt_base = BOOT_GDT_ADDR;
	st->gdt_limit = 4 * 8 - 1;
	st->idt_base = BOOT_IDT_ADDR;
	st->idt_limit = 0;
	st->cs = seg_flat(BOOT_GDT_CODE64_SEL, 0xb, 1, 0);
	st->ds = st->es = st->fs = st->gs = st->ss = seg_flat(BOOT_GDT_DATA_SEL, 0x3, 0, 1);
	/* A busy 64-bit TSS with no real backing: VMX entry checks want TR usable. */
	st->tr = (struct x86_segment){.limit = 0xffff, .type = 0xb, .present = 1};
	st->ldt = (struct x86_segment){.limit = 0xffff, .type = 0x2, .present = 1};
}

int x86_initrd_addr(const struct bzimage *bz, uint64_t low_ram_end,
		    uint64_t initrd_size, uint64_t *addr)
{
	uint64_t top = low_ram_end;
	uint64_t kernel_end = BOOT_KERNEL_ADDR + bz->init_size;

	if ((uint64_t)bz->initrd_addr_max + 1 < top)
		top = (uint64_t)bz->initrd_addr_max + 1;
	if (initrd_size > top)
		return -ENOMEM;
	*addr = (top - initrd_size) & ~4095ULL;
	if (*addr < ALIGN_UP(kernel_end, 4096ULL))
		return -ENOMEM;
	return 0;
}

static int load_cmdline(struct guest_mem *m, const struct bzimage *bz,
			const char *cmdline, const char **why)
{
	size_t n = strlen(cmdline);

	if (n >= bz->cmdline_size || n >= BOOT_CMDLINE_MAX) {
		*why = "kernel command line is longer than this kernel accepts";
		return -E2BIG;
	}
	memcpy(m->base + BOOT_CMDLINE_ADDR, cmdline, n + 1);
	return 0;
}

static void fill_zero_page(struct guest_mem *m, const struct bzimage *bz,
			   const struct linux_boot *lb, uint64_t initrd_addr)
{
	struct boot_params *bp = (struct boot_params *)(m->base + BOOT_ZERO_PAGE_ADDR);
	/* The header ends where the jump at 0x200 lands: 0x202 + its byte offset.
	 * Copy exactly that much (bytes after it are code, not header). */
	const uint8_t *raw = (const uint8_t *)bz->hdr;
	size_t hdr_len = 0x202 + raw[0x201 - HDR_OFFSET] - HDR_OFFSET;

	if (hdr_len > sizeof(bp->hdr))
		hdr_len = sizeof(bp->hdr);
	memset(bp, 0, sizeof(*bp));
	memcpy(&bp->hdr, bz->hdr, hdr_len);
	bp->hdr.type_of_loader = 0xff; /* "undefined" boot loader */
	bp->hdr.loadflags |= LOADED_HIGH | KEEP_SEGMENTS;
	bp->hdr.loadflags &= (uint8_t)~QUIET_FLAG;
	bp->hdr.cmd_line_ptr = (uint32_t)BOOT_CMDLINE_ADDR;
	bp->hdr.vid_mode = 0xffff; /* "normal" */
	if (lb->initrd) {
		bp->hdr.ramdisk_image = (uint32_t)initrd_addr;
		bp->hdr.ramdisk_size = (uint32_t)lb->initrd_len;
	}
	bp->acpi_rsdp_addr = lb->rsdp_addr;
	bp->e820_entries = (uint8_t)x86_e820_build(m->regions, m->nregions, bp->e820_table,
						   E820_MAX_ENTRIES_ZEROPAGE);
}

int x86_load_linux(struct guest_mem *m, const struct linux_boot *lb,
		   struct x86_boot_cpu *bsp, const char **why)
{
	struct bzimage bz;
	uint64_t initrd_addr = 0;
	int err;

	err = bzimage_parse(lb->kernel, lb->kernel_len, &bz, why);
	if (err)
		return err;
	if (m->size < BOOT_MIN_RAM || BOOT_KERNEL_ADDR + bz.init_size > guest_mem_low_end(m)) {
		*why = "guest memory is too small for this kernel; give it more with --mem";
		return -ENOMEM;
	}
	memcpy(m->base + BOOT_KERNEL_ADDR, bz.kernel, bz.kernel_size);
	if (lb->initrd) {
		err = x86_initrd_addr(&bz, guest_mem_low_end(m), lb->initrd_len, &initrd_addr);
		if (err || lb->initrd_len > UINT32_MAX) {
			*why = "initrd does not fit in guest memory below the kernel's limit; give the guest more --mem";
			return -ENOMEM;
		}
		memcpy(m->base + initrd_addr, lb->initrd, lb->initrd_len);
	}
	err = load_cmdline(m, &bz, lb->cmdline, why);
	if (err)
		return err;
	fill_zero_page(m, &bz, lb, initrd_addr);
	x86_page_tables_write(m->base);
	x86_gdt_write(m->base);
	/* The 64-bit entry point sits 0x200 bytes into the protected-mode code. */
	x86_boot_cpu_state(bsp, BOOT_KERNEL_ADDR + 0x200);
	return 0;
}
