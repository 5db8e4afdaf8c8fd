/* What the KVM backend's common part (vmm/accel_kvm.c) and its
 * architecture part (vmm/x86/accel_kvm.c, vmm/arm64/accel_kvm.c) share.
 * Nothing outside the backend includes it: the rest of the VMM sees only
 * accel.h. */
#ifndef KOSA8_ACCEL_KVM_H
#define KOSA8_ACCEL_KVM_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ioctl.h>

#include "vmm/accel.h"

#if defined(__x86_64__)
struct kvm_arch_vm {
	/* Checkpoints: which MSRs this host's KVM can save, found once. */
	pthread_mutex_t msr_lock;
	uint32_t *save_msrs;
	uint32_t nsave_msrs;
	bool save_msrs_probed;
};
#elif defined(__aarch64__)
struct kvm_arch_vm {
	int gic_fd;            /* the in-kernel GICv3 (KVM_CREATE_DEVICE), or -1 */
	int gic_ready;         /* KVM_DEV_ARM_VGIC_CTRL_INIT done */
	struct kvm_vcpu_init vcpu_init; /* the target KVM prefers, from the first vCPU */
	bool have_init;
};
#else
#error "kosa8's KVM backend knows x86-64 and arm64 only"
#endif

struct accel_vm {
	int kvm_fd;
	int vm_fd;
	int run_size;
	struct accel_caps caps;
	struct kvm_arch_vm arch;
};

struct accel_vcpu {
	struct accel_vm *vm;
	int fd;
	int id;
	struct kvm_run *run;
	pthread_t thread;
	volatile int thread_set;
};

static inline bool kvm_has(struct accel_vm *vm, int cap)
{
	return ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, cap) > 0;
}

/* The architecture's part, called by accel_kvm.c. */
/* The capabilities the architecture needs beyond the common ones. */
int kvm_arch_check_caps(struct accel_vm *vm, const char **err_msg);
/* Right after KVM_CREATE_VM (and before any vCPU). */
int kvm_arch_vm_init(struct accel_vm *vm, const char **err_msg);
void kvm_arch_vm_free(struct accel_vm *vm);
/* Exits only this architecture has (x86: port I/O, MSRs); false: not one. */
bool kvm_arch_decode_exit(struct kvm_run *r, struct vcpu_exit *e);
/* Hands such an exit's results back to KVM before the next entry. */
void kvm_arch_complete_exit(struct kvm_run *r, const struct vcpu_exit *prev);

#endif
