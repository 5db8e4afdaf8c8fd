/* The arm64 machine's device tree, built with libfdt: what firmware would
 * hand Linux on a board (RAM, CPUs with PSCI, the GICv3, the architected
 * timer, the PL011, the virtio-mmio devices, the command line and initrd). */
#ifndef KOSA8_VMM_ARM64_FDT_H
#define KOSA8_VMM_ARM64_FDT_H

#include <stddef.h>
#include <stdint.h>

#include "hw/guest_mem.h"

#define ARM64_FDT_MAX_VIRTIO 8

struct arm64_fdt_params {
	int ncpus;
	const struct guest_region *ram;
	int nram;
	const char *cmdline;
	uint64_t initrd_start, initrd_end;  /* end 0: none */
	uint64_t gic_dist, gic_redist;
	uint64_t uart_base, uart_size;
	uint32_t uart_spi;
	int nvirtio;
	struct { uint64_t base; uint32_t spi; } virtio[ARM64_FDT_MAX_VIRTIO];
};

/* Writes the tree into buf; returns its size, or -ENOSPC when it does not
 * fit, -EINVAL for impossible parameters. */
int arm64_fdt_build(void *buf, size_t len, const struct arm64_fdt_params *p);

/* The MPIDR KVM gives vCPU id (its affinity fields), which the tree's cpu
 * nodes and PSCI CPU_ON name it by. */
uint64_t arm64_vcpu_mpidr(int id);

#endif
