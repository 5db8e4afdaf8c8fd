#include "vmm/arm64/boot.h"

#include <errno.h>

#include "common/util.h"

#define SZ_2M (2ULL << 20)

int arm64_image_parse(const uint8_t *img, size_t len, struct arm64_image *im,
		      const char **why)
{
	if (len >= 2 && img[0] == 0x1f && img[1] == 0x8b) {
		*why = "the kernel is a gzip'd arm64 Image (as Debian's vmlinuz); decompress it first (gunzip)";
		return -EINVAL;
	}
	if (len < 64) {
		*why = "kernel file is too short to be an arm64 Image";
		return -EINVAL;
	}
	if (get_le32(img + 56) != ARM64_IMAGE_MAGIC) {
		*why = "kernel file is not an arm64 Image (no ARM\\x64 magic)";
		return -EINVAL;
	}
	im->text_offset = get_le64(img + 8);
	im->image_size = get_le64(img + 16);
	/* image_size 0: a kernel before 3.17, whose text_offset was 0x80000. */
	if (im->image_size == 0) {
		im->text_offset = 0x80000;
		im->image_size = ALIGN_UP((uint64_t)len, SZ_2M);
	}
	if (im->text_offset >= SZ_2M || im->image_size < len || im->image_size > (1ULL << 32)) {
		*why = "the arm64 Image header has an impossible text offset or size";
		return -EINVAL;
	}
	return 0;
}

int arm64_layout(const struct arm64_image *im, size_t ilen, uint64_t ram_end,
		 struct arm64_layout *out, const char **why)
{
	/* The first 2 MiB stay free: a stray NULL dereference by the guest
	 * then faults on nothing of the kernel's. */
	uint64_t kernel = SZ_2M + im->text_offset;
	uint64_t kernel_end = ALIGN_UP(kernel + im->image_size, SZ_2M);

	if (ram_end < SZ_2M * 2 || kernel_end + SZ_2M > ram_end) {
		*why = "guest memory is too small for this kernel (--mem)";
		return -ENOMEM;
	}
	out->kernel = kernel;
	out->fdt = (ram_end & ~(SZ_2M - 1)) - SZ_2M;
	out->initrd = ilen ? (out->fdt - ilen) & ~4095ULL : 0;
	if (ilen && (ilen > out->fdt || out->initrd < kernel_end)) {
		*why = "guest memory is too small for this kernel and initrd (--mem)";
		return -ENOMEM;
	}
	return 0;
}
