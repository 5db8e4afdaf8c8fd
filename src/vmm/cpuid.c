#include "vmm/cpuid.h"

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
