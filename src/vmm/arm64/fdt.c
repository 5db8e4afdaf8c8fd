#include "vmm/arm64/fdt.h"

#include <errno.h>
#include <libfdt.h>
#include <stdio.h>

#include "vmm/accel.h"

#define PHANDLE_GIC 1
#define PHANDLE_CLK 2

/* Interrupt specifiers of the GICv3 binding: type, number, flags. */
#define GIC_SPI 0
#define GIC_PPI 1
#define IRQ_EDGE_RISING 1
#define IRQ_LEVEL_HIGH 4

/* The architected timer's PPIs (secure, non-secure, virtual, hypervisor). */
static const uint32_t timer_ppis[] = {13, 14, 11, 10};

uint64_t arm64_vcpu_mpidr(int id)
{
	/* KVM's reset value: 16 CPUs per cluster in Aff0, clusters in Aff1. */
	return ((uint64_t)(id >> 4) & 0xff) << 8 | ((uint64_t)id & 0xf);
}

/* The calls below stop at the first error: each returns early through
 * this (libfdt's own codes are negative; -FDT_ERR_NOSPACE is a full buffer). */
#define TRY(x)                                  \
	do {                                    \
		int r_ = (x);                   \
		if (r_ < 0)                     \
			return r_;              \
	} while (0)

static int prop_u64s(void *fdt, const char *name, const uint64_t *v, int n)
{
	fdt64_t cells[8];

	for (int i = 0; i < n; i++)
		cells[i] = cpu_to_fdt64(v[i]);
	return fdt_property(fdt, name, cells, (int)(n * sizeof(cells[0])));
}

static int prop_u32s(void *fdt, const char *name, const uint32_t *v, int n)
{
	fdt32_t cells[16];

	for (int i = 0; i < n; i++)
		cells[i] = cpu_to_fdt32(v[i]);
	return fdt_property(fdt, name, cells, (int)(n * sizeof(cells[0])));
}

static int node_reg(void *fdt, const char *kind, uint64_t base, uint64_t size)
{
	char name[64];

	snprintf(name, sizeof(name), "%s@%llx", kind, (unsigned long long)base);
	TRY(fdt_begin_node(fdt, name));
	return prop_u64s(fdt, "reg", (uint64_t[]){base, size}, 2);
}

static int add_chosen(void *fdt, const struct arm64_fdt_params *p)
{
	char path[64];

	TRY(fdt_begin_node(fdt, "chosen"));
	TRY(fdt_property_string(fdt, "bootargs", p->cmdline));
	snprintf(path, sizeof(path), "/pl011@%llx", (unsigned long long)p->uart_base);
	TRY(fdt_property_string(fdt, "stdout-path", path));
	if (p->initrd_end) {
		TRY(fdt_property_u64(fdt, "linux,initrd-start", p->initrd_start));
		TRY(fdt_property_u64(fdt, "linux,initrd-end", p->initrd_end));
	}
	return fdt_end_node(fdt);
}

static int add_memory(void *fdt, const struct arm64_fdt_params *p)
{
	uint64_t reg[4];

	for (int i = 0; i < p->nram; i++) {
		reg[2 * i] = p->ram[i].gpa;
		reg[2 * i + 1] = p->ram[i].size;
	}
	TRY(fdt_begin_node(fdt, "memory@0"));
	TRY(fdt_property_string(fdt, "device_type", "memory"));
	TRY(prop_u64s(fdt, "reg", reg, 2 * p->nram));
	return fdt_end_node(fdt);
}

static int add_cpus(void *fdt, const struct arm64_fdt_params *p)
{
	char name[32];

	TRY(fdt_begin_node(fdt, "cpus"));
	TRY(fdt_property_u32(fdt, "#address-cells", 1));
	TRY(fdt_property_u32(fdt, "#size-cells", 0));
	for (int i = 0; i < p->ncpus; i++) {
		uint64_t mpidr = arm64_vcpu_mpidr(i);
		snprintf(name, sizeof(name), "cpu@%llx", (unsigned long long)mpidr);
		TRY(fdt_begin_node(fdt, name));
		TRY(fdt_property_string(fdt, "device_type", "cpu"));
		TRY(fdt_property_string(fdt, "compatible", "arm,arm-v8"));
		TRY(fdt_property_string(fdt, "enable-method", "psci"));
		TRY(fdt_property_u32(fdt, "reg", (uint32_t)mpidr));
		TRY(fdt_end_node(fdt));
	}
	TRY(fdt_end_node(fdt));
	/* KVM's in-kernel PSCI, reached by HVC (accel_vcpu_arm64_init). */
	TRY(fdt_begin_node(fdt, "psci"));
	TRY(fdt_property_string(fdt, "compatible", "arm,psci-0.2"));
	TRY(fdt_property_string(fdt, "method", "hvc"));
	return fdt_end_node(fdt);
}

static int add_gic_timer(void *fdt, const struct arm64_fdt_params *p)
{
	uint32_t irqs[3 * 4];

	TRY(fdt_begin_node(fdt, "intc"));
	TRY(fdt_property_string(fdt, "compatible", "arm,gic-v3"));
	TRY(fdt_property_u32(fdt, "#interrupt-cells", 3));
	TRY(fdt_property(fdt, "interrupt-controller", NULL, 0));
	TRY(prop_u64s(fdt, "reg",
		      (uint64_t[]){p->gic_dist, ARM64_GIC_DIST_SIZE, p->gic_redist,
				   (uint64_t)p->ncpus * ARM64_GIC_REDIST_STRIDE}, 4));
	TRY(fdt_property_u32(fdt, "phandle", PHANDLE_GIC));
	TRY(fdt_end_node(fdt));
	for (int i = 0; i < 4; i++) {
		irqs[3 * i] = GIC_PPI;
		irqs[3 * i + 1] = timer_ppis[i];
		irqs[3 * i + 2] = IRQ_LEVEL_HIGH;
	}
	TRY(fdt_begin_node(fdt, "timer"));
	TRY(fdt_property_string(fdt, "compatible", "arm,armv8-timer"));
	TRY(prop_u32s(fdt, "interrupts", irqs, 12));
	TRY(fdt_property(fdt, "always-on", NULL, 0));
	return fdt_end_node(fdt);
}

static int add_uart(void *fdt, const struct arm64_fdt_params *p)
{
	static const char compat[] = "arm,pl011\0arm,primecell";
	static const char clk_names[] = "uartclk\0apb_pclk";

	/* The AMBA bus wants a clock; a fixed one is what boards give it. */
	TRY(fdt_begin_node(fdt, "apb-pclk"));
	TRY(fdt_property_string(fdt, "compatible", "fixed-clock"));
	TRY(fdt_property_u32(fdt, "#clock-cells", 0));
	TRY(fdt_property_u32(fdt, "clock-frequency", 24000000));
	TRY(fdt_property_u32(fdt, "phandle", PHANDLE_CLK));
	TRY(fdt_end_node(fdt));
	TRY(node_reg(fdt, "pl011", p->uart_base, p->uart_size));
	TRY(fdt_property(fdt, "compatible", compat, sizeof(compat)));
	TRY(prop_u32s(fdt, "interrupts", (uint32_t[]){GIC_SPI, p->uart_spi, IRQ_LEVEL_HIGH}, 3));
	TRY(prop_u32s(fdt, "clocks", (uint32_t[]){PHANDLE_CLK, PHANDLE_CLK}, 2));
	TRY(fdt_property(fdt, "clock-names", clk_names, sizeof(clk_names)));
	return fdt_end_node(fdt);
}

static int add_virtio(void *fdt, const struct arm64_fdt_params *p)
{
	for (int i = 0; i < p->nvirtio; i++) {
		TRY(node_reg(fdt, "virtio_mmio", p->virtio[i].base, 0x200));
		TRY(fdt_property_string(fdt, "compatible", "virtio,mmio"));
		TRY(prop_u32s(fdt, "interrupts",
			      (uint32_t[]){GIC_SPI, p->virtio[i].spi, IRQ_LEVEL_HIGH}, 3));
		TRY(fdt_property(fdt, "dma-coherent", NULL, 0));
		TRY(fdt_end_node(fdt));
	}
	return 0;
}

static int build(void *fdt, size_t len, const struct arm64_fdt_params *p)
{
	TRY(fdt_create(fdt, (int)len));
	TRY(fdt_finish_reservemap(fdt));
	TRY(fdt_begin_node(fdt, ""));
	TRY(fdt_property_string(fdt, "compatible", "linux,dummy-virt"));
	TRY(fdt_property_u32(fdt, "#address-cells", 2));
	TRY(fdt_property_u32(fdt, "#size-cells", 2));
	TRY(fdt_property_u32(fdt, "interrupt-parent", PHANDLE_GIC));
	TRY(add_chosen(fdt, p));
	TRY(add_memory(fdt, p));
	TRY(add_cpus(fdt, p));
	TRY(add_gic_timer(fdt, p));
	TRY(add_uart(fdt, p));
	TRY(add_virtio(fdt, p));
	TRY(fdt_end_node(fdt));
	TRY(fdt_finish(fdt));
	return (int)fdt_totalsize(fdt);
}

int arm64_fdt_build(void *buf, size_t len, const struct arm64_fdt_params *p)
{
	int n;

	if (p->ncpus < 1 || p->nram < 1 || p->nram > 2 || p->nvirtio < 0 ||
	    p->nvirtio > ARM64_FDT_MAX_VIRTIO || len > (size_t)INT32_MAX)
		return -EINVAL;
	n = build(buf, len, p);
	if (n == -FDT_ERR_NOSPACE)
		return -ENOSPC;
	return n < 0 ? -EINVAL : n;
}
