#include "vmm/x86/cpuid.h"

#include <errno.h>

/* Topology level types for leaves 0xB and 0x1F (SDM vol. 2, CPUID). */
#define TOPO_LEVEL_SMT 1u
#define TOPO_LEVEL_CORE 2u

static unsigned bits_for(unsigned n)
{
	unsigned b = 0;

	while ((1u << b) < n)
		b++;
	return b;
}

static void leaf_basic(struct cpuid_leaf *l, int id, int ncpus)
{
	unsigned logical = ncpus > 255 ? 255 : (unsigned)ncpus;

	/* EBX[31:24] initial APIC id, [23:16] logical processors per package. */
	l->ebx = (l->ebx & 0xffffu) | (logical << 16) | ((unsigned)id << 24);
	l->ecx |= CPUID_1_ECX_HYPERVISOR;
	if (ncpus > 1)
		l->edx |= CPUID_1_EDX_HTT;
	else
		l->edx &= ~CPUID_1_EDX_HTT;
}

static void leaf_cache(struct cpuid_leaf *l, int ncpus)
{
	unsigned cores = (unsigned)(ncpus > 64 ? 64 : ncpus) - 1;
	unsigned level = (l->eax >> 5) & 7;
	unsigned sharing = level >= 3 ? (unsigned)ncpus - 1 : 0;

	if ((l->eax & 0x1f) == 0) /* no more caches */
		return;
	if (sharing > 0xfff)
		sharing = 0xfff;
	l->eax = (l->eax & 0x3fffu) | (sharing << 14) | (cores << 26);
}

static void leaf_topology(struct cpuid_leaf *l, int id, int ncpus)
{
	l->edx = (unsigned)id; /* x2APIC id */
	switch (l->index) {
	case 0:
		l->eax = 0; /* one thread per core: no bits to shift */
		l->ebx = 1;
		l->ecx = (TOPO_LEVEL_SMT << 8) | 0;
		break;
	case 1:
		l->eax = bits_for((unsigned)ncpus);
		l->ebx = (unsigned)ncpus;
		l->ecx = (TOPO_LEVEL_CORE << 8) | 1;
		break;
	default:
		l->eax = l->ebx = 0;
		l->ecx = l->index & 0xff; /* level type 0: invalid, end of list */
		break;
	}
}

int cpuid_filter(struct cpuid_leaf *leaves, size_t n, int vcpu_id, int ncpus)
{
	if (ncpus < 1 || vcpu_id < 0 || vcpu_id >= ncpus || ncpus > 255)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		struct cpuid_leaf *l = &leaves[i];
		switch (l->function) {
		case 0x1:
			leaf_basic(l, vcpu_id, ncpus);
			break;
		case 0x4:
			leaf_cache(l, ncpus);
			break;
		case 0xb:
		case 0x1f:
			leaf_topology(l, vcpu_id, ncpus);
			break;
		case 0x80000008:
			/* AMD: ECX[7:0] is the number of cores minus one. */
			l->ecx = (l->ecx & ~0xffu) | (unsigned)(ncpus - 1);
			break;
		case 0x8000001e:
			/* AMD extended APIC id; one core per compute unit. */
			l->eax = (unsigned)vcpu_id;
			l->ebx = (unsigned)vcpu_id & 0xff;
			l->ecx = 0;
			break;
		default:
			break;
		}
	}
	return 0;
}

/* Features whose registers live only in XSAVE-managed state (AVX and later,
 * protection keys): without XSAVE a guest cannot keep them across context
 * switches, and Linux's own fallback clears them too. */
#define LEAF1_ECX_XSAVE_DEPS ((1u << 12) /* FMA */ | CPUID_1_ECX_XSAVE | \
			      (1u << 27) /* OSXSAVE */ | (1u << 28) /* AVX */ | \
			      (1u << 29) /* F16C */)
#define LEAF7_EBX_XSAVE_DEPS ((1u << 5) /* AVX2 */ | (1u << 16) | (1u << 17) | \
			      (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | \
			      (1u << 30) | (1u << 31) /* AVX-512 */)
#define LEAF7_ECX_XSAVE_DEPS ((1u << 1) /* AVX512_VBMI */ | (1u << 3) /* PKU */ | \
			      (1u << 4) /* OSPKE */ | (1u << 6) /* AVX512_VBMI2 */ | \
			      (1u << 9) /* VAES */ | (1u << 10) /* VPCLMULQDQ */ | \
			      (1u << 11) | (1u << 12) | (1u << 14) /* AVX-512 */)
#define LEAF7_EDX_XSAVE_DEPS ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23) /* AVX-512 */ | \
			      (1u << 22) | (1u << 24) | (1u << 25) /* AMX */)
#define LEAF7_1_EAX_XSAVE_DEPS ((1u << 4) /* AVX_VNNI */ | (1u << 5) /* AVX512_BF16 */)

int cpuid_fix_xsave(struct cpuid_leaf *leaves, size_t n, uint64_t xcr0_seen)
{
	if (xcr0_seen == CPUID_PROBE_XCR0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct cpuid_leaf *l = &leaves[i];

		if (l->function == 0x1) {
			l->ecx &= ~LEAF1_ECX_XSAVE_DEPS;
		} else if (l->function == 0x7 && l->index == 0) {
			l->ebx &= ~LEAF7_EBX_XSAVE_DEPS;
			l->ecx &= ~LEAF7_ECX_XSAVE_DEPS;
			l->edx &= ~LEAF7_EDX_XSAVE_DEPS;
		} else if (l->function == 0x7 && l->index == 1) {
			l->eax &= ~LEAF7_1_EAX_XSAVE_DEPS;
		} else if (l->function == 0xd) {
			l->eax = l->ebx = l->ecx = l->edx = 0;
		}
	}
	return 1;
}
