/* Linux KVM backend of the accelerator interface (accel.h), arm64 part:
 * vCPU init with PSCI, registers through the one-reg interface, the
 * in-kernel GICv3 (KVM_CREATE_DEVICE), interrupt lines as GIC SPIs.
 * The architected timer needs nothing: KVM gives each vCPU its own. */
#include "vmm/accel_kvm.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
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

/* Checkpoints of an arm64 VM (one-reg state, GIC and timer) are not built
 * yet: refuse them plainly rather than write a checkpoint that cannot be
 * restored. */
int accel_vcpu_save(struct accel_vcpu *v, struct accel_state *out) { return -EOPNOTSUPP; }

int accel_vcpu_restore(struct accel_vcpu *v, const struct accel_state *in, const char **why)
{
	*why = "checkpoints of arm64 VMs are not supported yet";
	return -EOPNOTSUPP;
}

int accel_vm_save(struct accel_vm *vm, struct accel_state *out) { return -EOPNOTSUPP; }

int accel_vm_restore(struct accel_vm *vm, const struct accel_state *in, const char **why)
{
	*why = "checkpoints of arm64 VMs are not supported yet";
	return -EOPNOTSUPP;
}
