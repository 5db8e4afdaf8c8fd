/* Linux KVM backend of the accelerator interface (accel.h), arm64 part:
 * vCPU init with PSCI, registers through the one-reg interface, the
 * in-kernel GICv3 (KVM_CREATE_DEVICE), interrupt lines as GIC SPIs.
 * The architected timer needs nothing: KVM gives each vCPU its own. */
#include "vmm/accel_kvm.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/log.h"

int kvm_arch_check_caps(struct accel_vm *vm, const char **err_msg)
{
	static const struct { int cap; const char *name; } needed[] = {
		{KVM_CAP_ARM_PSCI_0_2, "PSCI 0.2"},
		{KVM_CAP_DEVICE_CTRL, "device control (the in-kernel GIC)"},
		{KVM_CAP_ONE_REG, "one-reg access"},
	};

	for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
		if (!kvm_has(vm, needed[i].cap)) {
			log_err("KVM lacks %s", needed[i].name);
			*err_msg = "this kernel's KVM lacks a capability kosa8 needs (see the line above); use a newer host kernel";
			return -ENOTSUP;
		}
	}
	return 0;
}

int kvm_arch_vm_init(struct accel_vm *vm, const char **err_msg)
{
	vm->arch.gic_fd = -1;
	if (ioctl(vm->vm_fd, KVM_ARM_PREFERRED_TARGET, &vm->arch.vcpu_init) < 0) {
		*err_msg = "KVM names no preferred vCPU target for this host";
		return -errno;
	}
	return 0;
}

void kvm_arch_vm_free(struct accel_vm *vm)
{
	/* 0 is a never-initialized VM (calloc), not a GIC. */
	if (vm->arch.gic_fd > 0)
		close(vm->arch.gic_fd);
}

/* Every KVM-capable arm64 CPU has its virtualization extensions: a
 * /dev/kvm here is never a software one. */
bool accel_hw_virt(void) { return true; }

bool kvm_arch_decode_exit(struct kvm_run *r, struct vcpu_exit *e)
{
	/* An MMIO access KVM could not decode (no syndrome: a load/store
	 * pair or writeback on device memory) is not for us to emulate. */
	if (r->exit_reason == KVM_EXIT_ARM_NISV) {
		e->kind = VCPU_EXIT_FAIL;
		e->code = r->arm_nisv.fault_ipa;
		snprintf(e->detail, sizeof(e->detail),
			 "guest MMIO at %#llx without a decodable instruction",
			 (unsigned long long)r->arm_nisv.fault_ipa);
		return true;
	}
	return false;
}

void kvm_arch_complete_exit(struct kvm_run *r, const struct vcpu_exit *prev) {}

static int gic_attr(int fd, uint32_t group, uint64_t attr, void *addr)
{
	struct kvm_device_attr a = {.group = group, .attr = attr,
				    .addr = (uint64_t)(uintptr_t)addr};

	return ioctl(fd, KVM_SET_DEVICE_ATTR, &a) < 0 ? -errno : 0;
}

int accel_arm64_create_gic(struct accel_vm *vm, uint64_t dist, uint64_t redist)
{
	struct kvm_create_device d = {.type = KVM_DEV_TYPE_ARM_VGIC_V3};
	int err;

	if (ioctl(vm->vm_fd, KVM_CREATE_DEVICE, &d) < 0)
		return -errno;
	vm->arch.gic_fd = (int)d.fd;
	if ((err = gic_attr(vm->arch.gic_fd, KVM_DEV_ARM_VGIC_GRP_ADDR,
			    KVM_VGIC_V3_ADDR_TYPE_DIST, &dist)) ||
	    (err = gic_attr(vm->arch.gic_fd, KVM_DEV_ARM_VGIC_GRP_ADDR,
			    KVM_VGIC_V3_ADDR_TYPE_REDIST, &redist)))
		return err;
	return 0;
}

int accel_arm64_start_gic(struct accel_vm *vm)
{
	if (vm->arch.gic_fd < 0)
		return -ENODEV;
	return gic_attr(vm->arch.gic_fd, KVM_DEV_ARM_VGIC_GRP_CTRL,
			KVM_DEV_ARM_VGIC_CTRL_INIT, NULL);
}

int accel_irq_line(struct accel_vm *vm, uint32_t spi, int level)
{
	/* KVM_IRQ_LINE on arm64: type in bits 24-27, INTID in 0-15; SPIs
	 * start at INTID 32. */
	struct kvm_irq_level irq = {
		.irq = (KVM_ARM_IRQ_TYPE_SPI << KVM_ARM_IRQ_TYPE_SHIFT) | (spi + 32),
		.level = (uint32_t)level,
	};

	return ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq) < 0 ? -errno : 0;
}

int accel_vcpu_arm64_init(struct accel_vcpu *v, bool powered_off)
{
	struct kvm_vcpu_init init = v->vm->arch.vcpu_init;

	memset(init.features, 0, sizeof(init.features));
	init.features[0] |= 1u << KVM_ARM_VCPU_PSCI_0_2;
	if (powered_off)
		init.features[0] |= 1u << KVM_ARM_VCPU_POWER_OFF;
	return ioctl(v->fd, KVM_ARM_VCPU_INIT, &init) < 0 ? -errno : 0;
}

#define CORE_REG(field) \
	(KVM_REG_ARM64 | KVM_REG_SIZE_U64 | KVM_REG_ARM_CORE | \
	 (offsetof(struct kvm_regs, field) / sizeof(uint32_t)))

static int set_core(struct accel_vcpu *v, uint64_t id, uint64_t value)
{
	struct kvm_one_reg r = {.id = id, .addr = (uint64_t)(uintptr_t)&value};

	return ioctl(v->fd, KVM_SET_ONE_REG, &r) < 0 ? -errno : 0;
}

static int get_core(struct accel_vcpu *v, uint64_t id, uint64_t *value)
{
	struct kvm_one_reg r = {.id = id, .addr = (uint64_t)(uintptr_t)value};

	return ioctl(v->fd, KVM_GET_ONE_REG, &r) < 0 ? -errno : 0;
}

int accel_vcpu_arm64_boot(struct accel_vcpu *v, uint64_t pc, uint64_t x0)
{
	/* KVM_ARM_VCPU_INIT left the vCPU at EL1h with D, A, I and F masked
	 * and every general register zero, as the Image protocol asks. */
	int err = set_core(v, CORE_REG(regs.regs[0]), x0);

	return err ? err : set_core(v, CORE_REG(regs.pc), pc);
}

int accel_vcpu_describe(struct accel_vcpu *v, char *buf, size_t len)
{
	uint64_t pc = 0, sp = 0, pstate = 0;
	int err;

	if ((err = get_core(v, CORE_REG(regs.pc), &pc)) ||
	    (err = get_core(v, CORE_REG(sp_el1), &sp)) ||
	    (err = get_core(v, CORE_REG(regs.pstate), &pstate)))
		return err;
	snprintf(buf, len, "pc=%#llx sp_el1=%#llx pstate=%#llx", (unsigned long long)pc,
		 (unsigned long long)sp, (unsigned long long)pstate);
	return 0;
}

/* ---- Checkpoints: one-reg registers, GIC state, MP state ----
 *
 * Registers: every one KVM_GET_REG_LIST names (core, FP/SIMD, system
 * registers, the architected timer's CTL/CNT/CVAL, firmware pseudo
 * registers), as one-reg id and value pairs.  The GIC: the distributor's
 * SPI registers (VM), each vCPU's redistributor SGI/PPI registers and GIC
 * CPU interface system registers, through the vGIC device's attributes;
 * their pair ids are ACCEL_PAIR U64 | group << 32 | register (the MPIDR
 * part of the attribute is the restoring vCPU's own). */

#define PAIR_U64 (3ull << ACCEL_PAIR_SIZE_SHIFT)
#define GIC_ID(group, reg) (PAIR_U64 | (uint64_t)(group) << 32 | (uint32_t)(reg))
#define GIC_ID_GROUP(id) ((uint32_t)((id) >> 32) & 0xffffu)
#define GIC_ID_REG(id) ((uint32_t)(id))

/* GICv3 register offsets (Arm IHI 0069). */
enum {
	GICD_CTLR = 0x0000, GICD_IGROUPR = 0x0080, GICD_ISENABLER = 0x0100,
	GICD_ISPENDR = 0x0200, GICD_ISACTIVER = 0x0300, GICD_IPRIORITYR = 0x0400,
	GICD_ICFGR = 0x0c00, GICD_IROUTER = 0x6000,
	GICR_SGI = 0x10000, /* the SGI and PPI frame of a redistributor */
};
/* ISENABLER, ISPENDR and ISACTIVER only set bits: their clear twins sit
 * 0x80 above them. */
#define CLEAR_TWIN 0x80

#define ICC(op1, crn, crm, op2) (3u << 14 | (op1) << 11 | (crn) << 7 | (crm) << 3 | (op2))
/* The CPU interface registers, ICC_CTLR_EL1 first: it says how many
 * priority bits and active-priority registers the rest have. */
static const uint32_t icc_regs[] = {
	ICC(0, 12, 12, 4), /* ICC_CTLR_EL1 */
	ICC(0, 4, 6, 0),   /* ICC_PMR_EL1 */
	ICC(0, 12, 8, 3),  /* ICC_BPR0_EL1 */
	ICC(0, 12, 12, 3), /* ICC_BPR1_EL1 */
	ICC(0, 12, 12, 6), /* ICC_IGRPEN0_EL1 */
	ICC(0, 12, 12, 7), /* ICC_IGRPEN1_EL1 */
};
/* ICC_AP0Rn_EL1 and ICC_AP1Rn_EL1, n < 4; how many exist depends on the
 * priority bits, the others KVM refuses (and they are not saved). */
#define ICC_AP0R(n) ICC(0, 12, 8, 4 + (n))
#define ICC_AP1R(n) ICC(0, 12, 9, (n))

static int gic_get(int fd, uint32_t group, uint64_t attr, void *val)
{
	struct kvm_device_attr a = {.group = group, .attr = attr, .addr = (uint64_t)(uintptr_t)val};

	return ioctl(fd, KVM_GET_DEVICE_ATTR, &a) < 0 ? -errno : 0;
}

/* Distributor and redistributor registers travel as 32 bits, the CPU
 * interface's as 64. */
static int gic_get_pair(int fd, uint32_t group, uint64_t mpidr, uint32_t reg,
			struct accel_pairs *p)
{
	uint64_t v = 0;
	uint32_t v32 = 0;
	int err;

	if (group == KVM_DEV_ARM_VGIC_GRP_CPU_SYSREGS) {
		err = gic_get(fd, group, mpidr | reg, &v);
	} else {
		err = gic_get(fd, group, mpidr | reg, &v32);
		v = v32;
	}
	if (!err)
		accel_pairs_add(p, GIC_ID(group, reg), &v);
	return err;
}

static int gic_set_pair(int fd, uint64_t mpidr, uint64_t id, const uint8_t *val)
{
	uint32_t group = GIC_ID_GROUP(id), reg = GIC_ID_REG(id);
	uint64_t v;
	uint32_t v32;

	memcpy(&v, val, sizeof(v));
	if (group == KVM_DEV_ARM_VGIC_GRP_CPU_SYSREGS)
		return gic_attr(fd, group, mpidr | reg, &v);
	if (group != KVM_DEV_ARM_VGIC_GRP_DIST_REGS && group != KVM_DEV_ARM_VGIC_GRP_REDIST_REGS)
		return -EINVAL;
	/* A set-only register: clear what the checkpoint has clear first. */
	if ((reg & ~GICR_SGI) >= GICD_ISENABLER && (reg & ~GICR_SGI) < GICD_IPRIORITYR &&
	    !((reg & ~GICR_SGI) & CLEAR_TWIN)) {
		int err;
		v32 = ~(uint32_t)v;
		if ((err = gic_attr(fd, group, mpidr | (reg + CLEAR_TWIN), &v32)))
			return err;
	}
	v32 = (uint32_t)v;
	return gic_attr(fd, group, mpidr | reg, &v32);
}

/* The vCPU's affinity as the vGIC's attributes name it (Aff3 in bits
 * 24-31 of the upper word, Aff2-Aff0 below it). */
static int vcpu_gic_mpidr(struct accel_vcpu *v, uint64_t *out)
{
	uint64_t mpidr;
	int err = get_core(v, ARM64_SYS_REG(3, 0, 0, 0, 5), &mpidr);

	if (err)
		return err;
	*out = (((mpidr >> 32 & 0xff) << 24) | (mpidr & 0xffffff)) << KVM_DEV_ARM_VGIC_V3_MPIDR_SHIFT;
	return 0;
}

static int save_one_regs(struct accel_vcpu *v, struct accel_pairs *p)
{
	struct kvm_reg_list probe = {.n = 0}, *list;
	uint8_t val[ACCEL_PAIR_MAX];
	int err = 0;

	if (ioctl(v->fd, KVM_GET_REG_LIST, &probe) == 0 || errno != E2BIG)
		return -EIO;
	if (!(list = calloc(1, sizeof(*list) + probe.n * sizeof(list->reg[0]))))
		return -ENOMEM;
	list->n = probe.n;
	if (ioctl(v->fd, KVM_GET_REG_LIST, list) < 0)
		err = -errno;
	for (uint64_t i = 0; !err && i < list->n; i++) {
		struct kvm_one_reg r = {.id = list->reg[i], .addr = (uint64_t)(uintptr_t)val};
		if (!accel_pair_size(r.id)) {
			err = -E2BIG;
			break;
		}
		if (ioctl(v->fd, KVM_GET_ONE_REG, &r) < 0)
			err = -errno;
		else
			accel_pairs_add(p, r.id, val);
	}
	free(list);
	return err ? err : p->err;
}

static int save_gic_cpu(struct accel_vcpu *v, struct accel_pairs *p)
{
	static const uint32_t redist[] = {
		GICR_SGI + GICD_IGROUPR, GICR_SGI + GICD_ISENABLER, GICR_SGI + GICD_ISPENDR,
		GICR_SGI + GICD_ISACTIVER, GICR_SGI + GICD_ICFGR, GICR_SGI + GICD_ICFGR + 4,
	};
	int fd = v->vm->arch.gic_fd, err;
	uint64_t mpidr;

	if ((err = vcpu_gic_mpidr(v, &mpidr)))
		return err;
	for (size_t i = 0; i < sizeof(redist) / sizeof(redist[0]); i++)
		if ((err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_REDIST_REGS, mpidr, redist[i], p)))
			return err;
	for (uint32_t r = 0; r < 32; r += 4) /* 32 SGIs and PPIs, 4 priorities a word */
		if ((err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_REDIST_REGS, mpidr,
					GICR_SGI + GICD_IPRIORITYR + r, p)))
			return err;
	for (size_t i = 0; i < sizeof(icc_regs) / sizeof(icc_regs[0]); i++)
		if ((err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_CPU_SYSREGS, mpidr, icc_regs[i], p)))
			return err;
	for (uint32_t n = 0; n < 4; n++) {
		if (gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_CPU_SYSREGS, mpidr, ICC_AP0R(n), p) ||
		    gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_CPU_SYSREGS, mpidr, ICC_AP1R(n), p))
			break;
	}
	return p->err;
}

static int add_pairs(struct accel_state *out, uint32_t tag, struct accel_pairs *p, int err)
{
	if (!err)
		err = accel_state_add(out, tag, p->buf, p->len);
	free(p->buf);
	*p = (struct accel_pairs){0};
	return err;
}

int accel_vcpu_save(struct accel_vcpu *v, struct accel_state *out)
{
	struct kvm_mp_state mp;
	struct accel_pairs p = {0};
	int err;

	memset(out, 0, sizeof(*out));
	if (ioctl(v->fd, KVM_GET_MP_STATE, &mp) < 0)
		return -errno;
	if ((err = accel_state_add(out, ACCEL_REC_MP_STATE, &mp, sizeof(mp))) ||
	    (err = add_pairs(out, ACCEL_REC_ARM64_REGS, &p, save_one_regs(v, &p))))
		return err;
	return add_pairs(out, ACCEL_REC_ARM64_GIC_CPU, &p, save_gic_cpu(v, &p));
}

static int restore_pairs(const struct accel_rec *rec, int (*set)(void *ctx, uint64_t id, const uint8_t *val),
			 void *ctx)
{
	const uint8_t *val;
	size_t off = 0;
	uint64_t id;
	int rc, err;

	while ((rc = accel_pairs_next(rec->data, rec->len, &off, &id, &val)) == 1)
		if ((err = set(ctx, id, val)))
			return err;
	return rc;
}

static int set_one_reg(void *ctx, uint64_t id, const uint8_t *val)
{
	struct accel_vcpu *v = ctx;
	struct kvm_one_reg r = {.id = id, .addr = (uint64_t)(uintptr_t)val};

	return ioctl(v->fd, KVM_SET_ONE_REG, &r) < 0 ? -errno : 0;
}

struct gic_ctx {
	int fd;
	uint64_t mpidr;
};

static int set_gic(void *ctx, uint64_t id, const uint8_t *val)
{
	struct gic_ctx *g = ctx;

	return gic_set_pair(g->fd, g->mpidr, id, val);
}

int accel_vcpu_restore(struct accel_vcpu *v, const struct accel_state *in, const char **why)
{
	const struct accel_rec *mp = accel_state_find(in, ACCEL_REC_MP_STATE);
	const struct accel_rec *regs = accel_state_find(in, ACCEL_REC_ARM64_REGS);
	const struct accel_rec *gic = accel_state_find(in, ACCEL_REC_ARM64_GIC_CPU);
	struct gic_ctx g = {.fd = v->vm->arch.gic_fd};
	int err;

	*why = "registers";
	if (!mp || !regs || !gic || mp->len != sizeof(struct kvm_mp_state))
		return -EINVAL;
	if ((err = restore_pairs(regs, set_one_reg, v)))
		return err;
	*why = "MP state";
	if (ioctl(v->fd, KVM_SET_MP_STATE, mp->data) < 0)
		return -errno;
	*why = "GIC CPU interface";
	if ((err = vcpu_gic_mpidr(v, &g.mpidr)))
		return err;
	return restore_pairs(gic, set_gic, &g);
}

int accel_vm_save(struct accel_vm *vm, struct accel_state *out)
{
	int fd = vm->arch.gic_fd, err = 0;
	struct accel_pairs p = {0};
	uint32_t nirqs = 0;

	memset(out, 0, sizeof(*out));
	if ((err = gic_get(fd, KVM_DEV_ARM_VGIC_GRP_NR_IRQS, 0, &nirqs)))
		return err;
	/* The interrupt count first: a restore into a GIC of another size
	 * is refused before any register is written. */
	accel_pairs_add(&p, GIC_ID(KVM_DEV_ARM_VGIC_GRP_NR_IRQS, 0), &(uint64_t){nirqs});
	err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, GICD_CTLR, &p);
	/* SPIs only (INTID 32 up): the distributor's words for SGIs and PPIs
	 * are the redistributors'. */
	for (uint32_t irq = 32; !err && irq < nirqs; irq += 32)
		for (uint32_t b = GICD_IGROUPR; !err && b <= GICD_ISACTIVER; b += 0x80)
			if (b == GICD_IGROUPR || !(b & CLEAR_TWIN))
				err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, b + irq / 8, &p);
	for (uint32_t irq = 32; !err && irq < nirqs; irq += 4)
		err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, GICD_IPRIORITYR + irq, &p);
	for (uint32_t irq = 32; !err && irq < nirqs; irq += 16)
		err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, GICD_ICFGR + irq / 4, &p);
	for (uint32_t irq = 32; !err && irq < nirqs; irq++)
		if (!(err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, GICD_IROUTER + irq * 8, &p)))
			err = gic_get_pair(fd, KVM_DEV_ARM_VGIC_GRP_DIST_REGS, 0, GICD_IROUTER + irq * 8 + 4, &p);
	return add_pairs(out, ACCEL_REC_ARM64_GIC_DIST, &p, err ? err : p.err);
}

int accel_vm_restore(struct accel_vm *vm, const struct accel_state *in, const char **why)
{
	const struct accel_rec *dist = accel_state_find(in, ACCEL_REC_ARM64_GIC_DIST);
	struct gic_ctx g = {.fd = vm->arch.gic_fd};
	const uint8_t *val;
	uint32_t nirqs = 0;
	size_t off = 0;
	uint64_t id, saved;
	int err;

	*why = "GIC distributor";
	if (!dist || accel_pairs_next(dist->data, dist->len, &off, &id, &val) != 1 ||
	    id != GIC_ID(KVM_DEV_ARM_VGIC_GRP_NR_IRQS, 0))
		return -EINVAL;
	memcpy(&saved, val, sizeof(saved));
	if ((err = gic_get(g.fd, KVM_DEV_ARM_VGIC_GRP_NR_IRQS, 0, &nirqs)))
		return err;
	if (saved != nirqs) {
		*why = "GIC distributor (another number of interrupts)";
		return -EINVAL;
	}
	return restore_pairs(&(struct accel_rec){.data = dist->data + off, .len = dist->len - (uint32_t)off},
			     set_gic, &g);
}
