/* CPUID seen by the guest: what the accelerator supports, with topology for
 * N vCPUs and the hypervisor bit set, so the guest finds KVM's paravirtual
 * features (kvmclock, PV EOI, steal time) and counts its CPUs right. */
#ifndef KOSA8_CPUID_H
#define KOSA8_CPUID_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/accel.h"

#define CPUID_1_ECX_TSC_DEADLINE (1u << 24)
#define CPUID_1_ECX_XSAVE (1u << 26)
#define CPUID_1_ECX_HYPERVISOR (1u << 31)
#define CPUID_1_EDX_HTT (1u << 28)

/* Rewrites the leaves in place for vCPU vcpu_id of ncpus (one core per vCPU,
 * one thread per core, one package).  Returns 0 or -EINVAL. */
int cpuid_filter(struct cpuid_leaf *leaves, size_t n, int vcpu_id, int ncpus);

/* XCR0 the probe in accel_supported_cpuid() asks a throwaway guest to set
 * with XSETBV: x87 and SSE, valid wherever XSAVE is offered. */
#define CPUID_PROBE_XCR0 0x3ull

/* xcr0_seen is the XCR0 the hypervisor reported after that probe.  If it is
 * not CPUID_PROBE_XCR0, the hypervisor never saw the guest's XSETBV (nested
 * KVM under QEMU's TCG, whose SVM emulation has no XSETBV intercept): KVM
 * then keeps its XCR0 at x87 only, loads that into the CPU on every entry
 * and derives CPUID 0xD.0 EBX from it, so a guest using XSAVE would lose its
 * SSE/AVX state and Linux warns "XSAVE consistency problem" (size of the
 * offered components != EBX) and falls back to FXSAVE.  Then XSAVE, the
 * features whose state only XSAVE manages, and leaf 0xD are taken out, so
 * the guest uses FXSAVE from the start.  Otherwise the leaves are left as
 * they are.  Returns 1 if it took them out, else 0. */
int cpuid_fix_xsave(struct cpuid_leaf *leaves, size_t n, uint64_t xcr0_seen);

#endif
