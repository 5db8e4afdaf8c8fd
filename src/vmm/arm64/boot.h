/* Direct Linux boot on arm64, no firmware: the arm64 Image protocol
 * (Documentation/arch/arm64/booting.rst).  The VMM places the Image, the
 * initrd and a device tree in RAM and enters the kernel at EL1 with x0 the
 * device tree's address. */
#ifndef KOSA8_VMM_ARM64_BOOT_H
#define KOSA8_VMM_ARM64_BOOT_H

#include <stddef.h>
#include <stdint.h>

#define ARM64_IMAGE_MAGIC 0x644d5241u /* "ARM\x64" at offset 56 */
#define ARM64_MIN_RAM (64ULL << 20)
#define ARM64_FDT_MAX (64 * 1024)

/* What boot needs to know about an Image, after validation. */
struct arm64_image {
	uint64_t text_offset; /* from a 2 MiB-aligned base */
	uint64_t image_size;  /* memory the kernel needs from its load address */
};

/* Validates an arm64 Image; on failure why says what is wrong, for the
 * user (a gzip'd Image, as distributions ship it, is named as such). */
int arm64_image_parse(const uint8_t *img, size_t len, struct arm64_image *im,
		      const char **why);

/* Where each part goes in RAM [0, ram_end) (ram_end: the end of the RAM
 * below the MMIO hole): the kernel near the bottom, the device tree in the
 * top 2 MiB-aligned block, the initrd just below it. */
struct arm64_layout {
	uint64_t kernel, initrd, fdt;
};
int arm64_layout(const struct arm64_image *im, size_t ilen, uint64_t ram_end,
		 struct arm64_layout *out, const char **why);

#endif
