/* CPUID seen by the guest: what the accelerator supports, with topology for
 * N vCPUs and the hypervisor bit set, so the guest finds KVM's paravirtual
 * features (kvmclock, PV EOI, steal time) and counts its CPUs right. */
#ifndef KOSA8_CPUID_H
#define KOSA8_CPUID_H

#include <stddef.h>

#include "vmm/accel.h"

#define CPUID_1_ECX_TSC_DEADLINE (1u << 24)
#define CPUID_1_ECX_HYPERVISOR (1u << 31)
#define CPUID_1_EDX_HTT (1u << 28)

/* Rewrites the leaves in place for vCPU vcpu_id of ncpus (one core per vCPU,
 * one thread per core, one package).  Returns 0 or -EINVAL. */
int cpuid_filter(struct cpuid_leaf *leaves, size_t n, int vcpu_id, int ncpus);

#endif
