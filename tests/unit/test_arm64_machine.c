/* The arm64 machine's portable parts, built into the x86 unit tests too:
 * the Image header check and RAM layout, the device tree (read back with
 * libfdt as the kernel would), and the PL011 as Linux's amba-pl011 driver
 * drives it.  Their sources are included: the arm64 folder is built only
 * in the cross build (make arm64), the rest of its files need arm64 KVM. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <libfdt.h>

#include "vmm/arm64/boot.c"
#include "vmm/arm64/fdt.c"
#include "vmm/arm64/pl011.c"

static void image_header(uint8_t *img, uint64_t text_offset, uint64_t size)
{
	memset(img, 0, 64);
	put_le64(img + 8, text_offset);
	put_le64(img + 16, size);
	put_le32(img + 56, ARM64_IMAGE_MAGIC);
}

static void test_image_parse(void **state)
{
	static uint8_t img[4096];
	struct arm64_image im;
	const char *why = NULL;

	image_header(img, 0, 8 << 20);
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), 0);
	assert_int_equal(im.text_offset, 0);
	assert_int_equal(im.image_size, 8 << 20);
	/* Distributions' vmlinuz may be gzip'd: named as such. */
	img[0] = 0x1f, img[1] = 0x8b;
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), -EINVAL);
	assert_non_null(strstr(why, "gzip"));
	image_header(img, 0, 8 << 20);
	img[57] ^= 1;
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), -EINVAL);
	assert_non_null(strstr(why, "not an arm64 Image"));
	/* Impossible fields: text offset past the 2 MiB block, size below the file's. */
	image_header(img, 2 << 20, 8 << 20);
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), -EINVAL);
	image_header(img, 0, 100);
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), -EINVAL);
	assert_int_equal(arm64_image_parse(img, 63, &im, &why), -EINVAL);
	/* image_size 0: an old kernel, loaded at 0x80000. */
	image_header(img, 0, 0);
	assert_int_equal(arm64_image_parse(img, sizeof(img), &im, &why), 0);
	assert_int_equal(im.text_offset, 0x80000);
}

static void test_layout(void **state)
{
	struct arm64_image im = {.text_offset = 0, .image_size = 40 << 20};
	struct arm64_layout lay;
	const char *why = NULL;

	assert_int_equal(arm64_layout(&im, 10 << 20, 256 << 20, &lay, &why), 0);
	assert_int_equal(lay.kernel, 2 << 20);
	assert_int_equal(lay.fdt, 254 << 20);
	assert_int_equal(lay.fdt % (2 << 20), 0);
	assert_true(lay.initrd >= lay.kernel + im.image_size);
	assert_true(lay.initrd + (10 << 20) <= lay.fdt);
	assert_int_equal(lay.initrd % 4096, 0);
	/* Too little RAM for the kernel, or for kernel and initrd: refused. */
	assert_int_equal(arm64_layout(&im, 0, 40 << 20, &lay, &why), -ENOMEM);
	assert_int_equal(arm64_layout(&im, 220 << 20, 256 << 20, &lay, &why), -ENOMEM);
	assert_non_null(strstr(why, "--mem"));
}

static const struct guest_region two_regions[] = {
	{.gpa = 0, .size = 3ULL << 30}, {.gpa = 4ULL << 30, .size = 1ULL << 30},
};

static struct arm64_fdt_params params(int ncpus, int nvirtio)
{
	struct arm64_fdt_params p = {
		.ncpus = ncpus, .ram = two_regions, .nram = 2, .cmdline = "console=ttyAMA0",
		.initrd_start = 0x1000000, .initrd_end = 0x1800000,
		.gic_dist = 0xc0000000, .gic_redist = 0xc0010000,
		.uart_base = 0xc8000000, .uart_size = 0x1000, .uart_spi = 1, .nvirtio = nvirtio,
	};
	for (int i = 0; i < nvirtio; i++) {
		p.virtio[i].base = 0xd0000000 + 0x1000 * (uint64_t)i;
		p.virtio[i].spi = 5 + (uint32_t)i;
	}
	return p;
}

static uint64_t prop64(const void *fdt, int node, const char *name, int index)
{
	int len;
	const uint8_t *v = fdt_getprop(fdt, node, name, &len);
	fdt64_t cell;

	assert_non_null(v);
	assert_true(len >= (index + 1) * 8);
	/* Properties are 4-byte aligned only. */
	memcpy(&cell, v + 8 * index, sizeof(cell));
	return fdt64_to_cpu(cell);
}

static void test_fdt(void **state)
{
	static uint8_t buf[ARM64_FDT_MAX];
	struct arm64_fdt_params p = params(18, 3);
	int n, node, count = 0;
	const fdt32_t *irq;
	const char *s;

	n = arm64_fdt_build(buf, sizeof(buf), &p);
	assert_true(n > 0);
	assert_int_equal(fdt_check_header(buf), 0);
	assert_int_equal(fdt_totalsize(buf), n);
	/* The command line, the console and the initrd, as the kernel reads them. */
	node = fdt_path_offset(buf, "/chosen");
	assert_true(node >= 0);
	assert_string_equal(fdt_getprop(buf, node, "bootargs", NULL), "console=ttyAMA0");
	s = fdt_getprop(buf, node, "stdout-path", NULL);
	assert_string_equal(s, "/pl011@c8000000");
	assert_true(fdt_path_offset(buf, s) >= 0);
	assert_int_equal(prop64(buf, node, "linux,initrd-end", 0), 0x1800000);
	/* Both RAM regions. */
	node = fdt_path_offset(buf, "/memory@0");
	assert_int_equal(prop64(buf, node, "reg", 3), 1ULL << 30);
	/* One cpu node per vCPU, named by the MPIDR KVM gives it (the 17th
	 * is in the second cluster), started through PSCI. */
	fdt_for_each_subnode(node, buf, fdt_path_offset(buf, "/cpus")) {
		assert_string_equal(fdt_getprop(buf, node, "enable-method", NULL), "psci");
		count++;
	}
	assert_int_equal(count, 18);
	node = fdt_path_offset(buf, "/cpus/cpu@101");
	assert_true(node >= 0);
	assert_int_equal(fdt32_ld(fdt_getprop(buf, node, "reg", NULL)), 0x101);
	assert_string_equal(fdt_getprop(buf, fdt_path_offset(buf, "/psci"), "method", NULL), "hvc");
	/* The redistributors cover every vCPU. */
	node = fdt_node_offset_by_compatible(buf, -1, "arm,gic-v3");
	assert_int_equal(prop64(buf, node, "reg", 3), 18 * ARM64_GIC_REDIST_STRIDE);
	/* The virtio devices, each on its SPI. */
	count = 0;
	for (node = fdt_node_offset_by_compatible(buf, -1, "virtio,mmio"); node >= 0;
	     node = fdt_node_offset_by_compatible(buf, node, "virtio,mmio")) {
		irq = fdt_getprop(buf, node, "interrupts", NULL);
		assert_int_equal(fdt32_ld(&irq[1]), 5 + count);
		count++;
	}
	assert_int_equal(count, 3);
}

static void test_fdt_bounds(void **state)
{
	static uint8_t buf[ARM64_FDT_MAX];
	struct arm64_fdt_params p = params(2, 0);

	assert_int_equal(arm64_fdt_build(buf, 256, &p), -ENOSPC);
	p.ncpus = 0;
	assert_int_equal(arm64_fdt_build(buf, sizeof(buf), &p), -EINVAL);
	p = params(2, 0);
	p.nvirtio = ARM64_FDT_MAX_VIRTIO + 1;
	assert_int_equal(arm64_fdt_build(buf, sizeof(buf), &p), -EINVAL);
	p = params(2, 0);
	p.nram = 3;
	assert_int_equal(arm64_fdt_build(buf, sizeof(buf), &p), -EINVAL);
	assert_int_equal(arm64_vcpu_mpidr(0), 0);
	assert_int_equal(arm64_vcpu_mpidr(15), 15);
	assert_int_equal(arm64_vcpu_mpidr(16), 0x100);
}

static int irq_level = -1;
static void record_irq(void *ctx, int level) { irq_level = level; }

static uint32_t rd(struct pl011 *u, uint64_t off)
{
	uint8_t v[4];

	u->bus.read(u, off, v, 4);
	return get_le32(v);
}

static void wr(struct pl011 *u, uint64_t off, uint32_t val)
{
	uint8_t v[4];

	put_le32(v, val);
	u->bus.write(u, off, v, 4);
}

static void test_pl011(void **state)
{
	static const uint8_t in[40] = "typed";
	struct pl011 u;
	int fds[2];
	char out[8] = {0};

	assert_int_equal(pipe(fds), 0);
	pl011_init(&u, 0xc8000000, fds[1], record_irq, NULL);
	/* The PrimeCell IDs the AMBA bus matches the driver by. */
	assert_int_equal(rd(&u, 0xfe0), 0x11);
	assert_int_equal(rd(&u, 0xfe4), 0x10);
	assert_int_equal(rd(&u, 0xff0), 0x0d);
	assert_int_equal(rd(&u, 0xffc), 0xb1);
	/* Transmit: the byte is out at once, the FIFO empty, TX raised when unmasked. */
	assert_int_equal(rd(&u, 0x18) & 0x80, 0x80);
	wr(&u, 0x00, 'k');
	assert_int_equal(read(fds[0], out, sizeof(out)), 1);
	assert_int_equal(out[0], 'k');
	assert_true(irq_level <= 0);
	wr(&u, 0x38, 1u << 5);
	assert_int_equal(irq_level, 1);
	wr(&u, 0x44, 1u << 5);
	assert_int_equal(irq_level, 0);
	/* Receive: held back until the driver unmasks RX, bounded by the FIFO. */
	assert_false(pl011_rx_enabled(&u));
	wr(&u, 0x38, (1u << 4) | (1u << 6));
	assert_true(pl011_rx_enabled(&u));
	assert_int_equal(pl011_receive(&u, in, sizeof(in)), PL011_FIFO_LEN);
	assert_int_equal(pl011_wait_space(&u, 0), 0);
	assert_int_equal(irq_level, 1);
	assert_int_equal(rd(&u, 0x18) & (1u << 4), 0);
	assert_int_equal(rd(&u, 0x00), 't');
	/* Clearing the interrupt with data still waiting keeps the line up. */
	wr(&u, 0x44, 0x7ff);
	assert_int_equal(irq_level, 1);
	for (int i = 1; i < PL011_FIFO_LEN; i++)
		rd(&u, 0x00);
	assert_int_equal(irq_level, 0);
	assert_int_equal(rd(&u, 0x18) & (1u << 4), 1u << 4);
	assert_int_equal(pl011_wait_space(&u, 0), PL011_FIFO_LEN);
	/* A write to the upper half of a register changes nothing. */
	u.bus.write(&u, 0x3a, (const uint8_t[]){0xff, 0xff}, 2);
	assert_int_equal(rd(&u, 0x38), (1u << 4) | (1u << 6));
	pl011_destroy(&u);
	close(fds[0]);
	close(fds[1]);
}

/* A checkpoint's PL011: what the guest set up and the bytes still in the
 * FIFO come back, the line's level with them; a state no UART can be in
 * is refused. */
static void test_pl011_state(void **state)
{
	struct pl011 u, v;
	struct pl011_state st, bad;

	pl011_init(&u, 0xc8000000, -1, record_irq, NULL);
	wr(&u, 0x24, 13);
	wr(&u, 0x2c, 0x70);
	wr(&u, 0x38, (1u << 4) | (1u << 6));
	rd(&u, 0x00);
	assert_int_equal(pl011_receive(&u, (const uint8_t *)"abc", 3), 3);
	assert_int_equal(rd(&u, 0x00), 'a'); /* the FIFO's head has moved */
	pl011_save(&u, &st);
	pl011_destroy(&u);

	irq_level = -1;
	pl011_init(&v, 0xc8000000, -1, record_irq, NULL);
	assert_int_equal(pl011_restore(&v, &st), 0);
	pl011_resync_irq(&v);
	assert_int_equal(irq_level, 1);
	assert_int_equal(rd(&v, 0x24), 13);
	assert_int_equal(rd(&v, 0x2c), 0x70);
	assert_int_equal(rd(&v, 0x38), (1u << 4) | (1u << 6));
	assert_int_equal(rd(&v, 0x00), 'b');
	assert_int_equal(rd(&v, 0x00), 'c');
	assert_int_equal(irq_level, 0);
	assert_int_equal(pl011_wait_space(&v, 0), PL011_FIFO_LEN);

	bad = st, bad.version = 2;
	assert_int_equal(pl011_restore(&v, &bad), -EINVAL);
	bad = st, bad.rx_head = PL011_FIFO_LEN;
	assert_int_equal(pl011_restore(&v, &bad), -EINVAL);
	bad = st, bad.rx_count = PL011_FIFO_LEN + 1;
	assert_int_equal(pl011_restore(&v, &bad), -EINVAL);
	bad = st, bad.imsc = 1u << 11;
	assert_int_equal(pl011_restore(&v, &bad), -EINVAL);
	pl011_destroy(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image_parse),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_fdt),
		cmocka_unit_test(test_fdt_bounds),
		cmocka_unit_test(test_pl011),
		cmocka_unit_test(test_pl011_state),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
