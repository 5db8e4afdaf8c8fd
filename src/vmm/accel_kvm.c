/* Linux KVM backend of the accelerator interface (accel.h). */
#include "vmm/accel.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"

/* Where KVM on Intel wants three private pages for its real-mode TSS and
 * identity map: just below the 4 GiB boundary, clear of RAM and of the
 * LAPIC/IOAPIC windows (the same place other VMMs use). */
#define KVM_TSS_ADDR 0xfffbd000ULL
#define KVM_IDENTITY_MAP_ADDR 0xfffbc000ULL

/* The signal used to kick a vCPU thread out of KVM_RUN. */
#define KICK_SIGNAL SIGUSR1

struct accel_vm {
	int kvm_fd;
	int vm_fd;
	int run_size;
	struct accel_caps caps;
};

struct accel_vcpu {
	struct accel_vm *vm;
	int fd;
	int id;
	struct kvm_run *run;
	pthread_t thread;
	volatile int thread_set;
};

static void kick_handler(int sig) { (void)sig; }

static int install_kick_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kick_handler; /* no SA_RESTART: KVM_RUN must return EINTR */
	sigemptyset(&sa.sa_mask);
	return sigaction(KICK_SIGNAL, &sa, NULL) < 0 ? -errno : 0;
}

static int kvm_check_caps(struct accel_vm *vm, const char **err_msg)
{
	static const struct { int cap; const char *name; } needed[] = {
		{KVM_CAP_IRQCHIP, "in-kernel irqchip"},
		{KVM_CAP_PIT2, "in-kernel PIT"},
		{KVM_CAP_USER_MEMORY, "user memory"},
		{KVM_CAP_IMMEDIATE_EXIT, "immediate exit"},
		{KVM_CAP_EXT_CPUID, "extended CPUID"},
	};
	int n;

	for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
		if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, needed[i].cap) <= 0) {
			log_err("KVM lacks %s", needed[i].name);
			*err_msg = "this kernel's KVM lacks a capability kosa8 needs (see the line above); use a newer host kernel";
			return -ENOTSUP;
		}
	}
	n = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
	if (n <= 0)
		n = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
	vm->caps.max_vcpus = n > 0 ? n : 1;
	return 0;
}

/* Unknown MSRs exit to us instead of being handled silently in the kernel,
 * so that each one is logged once (a hint when a guest misbehaves). */
static void kvm_enable_msr_exits(struct accel_vm *vm)
{
	struct kvm_enable_cap cap = {.cap = KVM_CAP_X86_USER_SPACE_MSR};

	if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_X86_USER_SPACE_MSR) <= 0)
		return;
	cap.args[0] = KVM_MSR_EXIT_REASON_UNKNOWN;
	if (ioctl(vm->vm_fd, KVM_ENABLE_CAP, &cap) == 0)
		vm->caps.user_msr_exits = true;
}

int accel_open(struct accel_vm **out, const char **err_msg)
{
	struct accel_vm *vm;
	int err;

	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->vm_fd = -1;
	vm->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (vm->kvm_fd < 0) {
		err = -errno;
		if (err == -ENOENT)
			*err_msg = "/dev/kvm does not exist: enable virtualization (VT-x/AMD-V) and load kvm_intel or kvm_amd, or use --emulate (slow, software emulation)";
		else if (err == -EACCES || err == -EPERM)
			*err_msg = "no permission to open /dev/kvm: add yourself to the 'kvm' group (then log in again)";
		else
			*err_msg = "cannot open /dev/kvm: KVM is not usable on this host; use --emulate (slow, software emulation)";
		goto fail;
	}
	if (ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) {
		*err_msg = "/dev/kvm speaks an unknown KVM API version";
		err = -ENOTSUP;
		goto fail;
	}
	err = kvm_check_caps(vm, err_msg);
	if (err)
		goto fail;
	vm->run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (vm->run_size < (int)sizeof(struct kvm_run)) {
		*err_msg = "KVM reports a bad vCPU mmap size";
		err = -EINVAL;
		goto fail;
	}
	vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0) {
		err = -errno;
		*err_msg = "KVM could not create a VM (out of memory, or too many VMs)";
		goto fail;
	}
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, KVM_TSS_ADDR) < 0 ||
	    ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &(uint64_t){KVM_IDENTITY_MAP_ADDR}) < 0) {
		err = -errno;
		*err_msg = "KVM refused the TSS / identity map addresses";
		goto fail;
	}
	kvm_enable_msr_exits(vm);
	err = install_kick_handler();
	if (err)
		goto fail;
	*out = vm;
	return 0;
fail:
	accel_close(vm);
	return err;
}

void accel_close(struct accel_vm *vm)
{
	if (!vm)
		return;
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	if (vm->kvm_fd >= 0)
		close(vm->kvm_fd);
	free(vm);
}

void accel_caps(struct accel_vm *vm, struct accel_caps *caps) { *caps = vm->caps; }

int accel_map_memory(struct accel_vm *vm, uint32_t slot, uint64_t gpa,
		     uint64_t size, void *hva)
{
	struct kvm_userspace_memory_region r = {
		.slot = slot,
		.guest_phys_addr = gpa,
		.memory_size = size,
		.userspace_addr = (uint64_t)(uintptr_t)hva,
	};

	return ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0 ? -errno : 0;
}

int accel_create_irqchip(struct accel_vm *vm)
{
	struct kvm_pit_config pit = {.flags = 0};

	if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0)
		return -errno;
	if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0)
		return -errno;
	return 0;
}

int accel_irq_line(struct accel_vm *vm, uint32_t gsi, int level)
{
	struct kvm_irq_level irq = {.irq = gsi, .level = (uint32_t)level};

	return ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq) < 0 ? -errno : 0;
}

int accel_supported_cpuid(struct accel_vm *vm, struct cpuid_leaf *leaves,
			  size_t max, size_t *count)
{
	struct kvm_cpuid2 *c;
	int err = 0;

	c = calloc(1, sizeof(*c) + max * sizeof(struct kvm_cpuid_entry2));
	if (!c)
		return -ENOMEM;
	c->nent = (uint32_t)max;
	if (ioctl(vm->kvm_fd, KVM_GET_SUPPORTED_CPUID, c) < 0) {
		err = -errno;
		goto out;
	}
	for (uint32_t i = 0; i < c->nent; i++) {
		const struct kvm_cpuid_entry2 *e = &c->entries[i];
		leaves[i] = (struct cpuid_leaf){
			.function = e->function, .index = e->index,
			.flags = (e->flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) ?
					 CPUID_FLAG_SIGNIFICANT_INDEX : 0,
			.eax = e->eax, .ebx = e->ebx, .ecx = e->ecx, .edx = e->edx,
		};
	}
	*count = c->nent;
out:
	free(c);
	return err;
}

int accel_vcpu_create(struct accel_vm *vm, int id, struct accel_vcpu **out)
{
	struct accel_vcpu *v;
	int err;

	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->vm = vm;
	v->id = id;
	v->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, id);
	if (v->fd < 0) {
		err = -errno;
		free(v);
		return err;
	}
	v->run = mmap(NULL, (size_t)vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
	if (v->run == MAP_FAILED) {
		err = -errno;
		close(v->fd);
		free(v);
		return err;
	}
	*out = v;
	return 0;
}

void accel_vcpu_destroy(struct accel_vcpu *v)
{
	if (!v)
		return;
	munmap(v->run, (size_t)v->vm->run_size);
	close(v->fd);
	free(v);
}

int accel_vcpu_set_cpuid(struct accel_vcpu *v, const struct cpuid_leaf *leaves, size_t count)
{
	struct kvm_cpuid2 *c;
	int err = 0;

	c = calloc(1, sizeof(*c) + count * sizeof(struct kvm_cpuid_entry2));
	if (!c)
		return -ENOMEM;
	c->nent = (uint32_t)count;
	for (size_t i = 0; i < count; i++) {
		c->entries[i] = (struct kvm_cpuid_entry2){
			.function = leaves[i].function, .index = leaves[i].index,
			.flags = (leaves[i].flags & CPUID_FLAG_SIGNIFICANT_INDEX) ?
					 KVM_CPUID_FLAG_SIGNIFCANT_INDEX : 0,
			.eax = leaves[i].eax, .ebx = leaves[i].ebx,
			.ecx = leaves[i].ecx, .edx = leaves[i].edx,
		};
	}
	if (ioctl(v->fd, KVM_SET_CPUID2, c) < 0)
		err = -errno;
	free(c);
	return err;
}

int accel_vcpu_set_msrs(struct accel_vcpu *v, const struct x86_msr *msrs, size_t count)
{
	struct kvm_msrs *m;
	int n, err = 0;

	m = calloc(1, sizeof(*m) + count * sizeof(struct kvm_msr_entry));
	if (!m)
		return -ENOMEM;
	m->nmsrs = (uint32_t)count;
	for (size_t i = 0; i < count; i++) {
		m->entries[i].index = msrs[i].index;
		m->entries[i].data = msrs[i].value;
	}
	n = ioctl(v->fd, KVM_SET_MSRS, m);
	/* KVM_SET_MSRS returns how many it set; it stops at the first it refuses. */
	if (n < 0)
		err = -errno;
	else if ((size_t)n != count) {
		log_warn("KVM refused MSR 0x%x", msrs[n].index);
		err = -EINVAL;
	}
	free(m);
	return err;
}

static void seg_to_kvm(const struct x86_segment *s, struct kvm_segment *k)
{
	*k = (struct kvm_segment){
		.base = s->base, .limit = s->limit, .selector = s->selector,
		.type = s->type, .present = s->present, .dpl = s->dpl, .db = s->db,
		.s = s->s, .l = s->l, .g = s->g, .avl = s->avl,
		.unusable = !s->present,
	};
}

int accel_vcpu_set_boot_state(struct accel_vcpu *v, const struct x86_boot_cpu *st)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;

	if (ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0)
		return -errno;
	seg_to_kvm(&st->cs, &sregs.cs);
	seg_to_kvm(&st->ds, &sregs.ds);
	seg_to_kvm(&st->es, &sregs.es);
	seg_to_kvm(&st->fs, &sregs.fs);
	seg_to_kvm(&st->gs, &sregs.gs);
	seg_to_kvm(&st->ss, &sregs.ss);
	seg_to_kvm(&st->tr, &sregs.tr);
	seg_to_kvm(&st->ldt, &sregs.ldt);
	sregs.gdt.base = st->gdt_base;
	sregs.gdt.limit = st->gdt_limit;
	sregs.idt.base = st->idt_base;
	sregs.idt.limit = st->idt_limit;
	sregs.cr0 = st->cr0;
	sregs.cr3 = st->cr3;
	sregs.cr4 = st->cr4;
	sregs.efer = st->efer;
	if (ioctl(v->fd, KVM_SET_SREGS, &sregs) < 0)
		return -errno;

	memset(&regs, 0, sizeof(regs));
	regs.rip = st->rip;
	regs.rsp = st->rsp;
	regs.rsi = st->rsi;
	regs.rflags = st->rflags;
	if (ioctl(v->fd, KVM_SET_REGS, &regs) < 0)
		return -errno;
	return 0;
}

/* LAPIC register offsets and local vector table delivery modes (SDM vol. 3, 10.5.1). */
#define APIC_LVT_LINT0 0x350
#define APIC_LVT_LINT1 0x360
#define APIC_MODE_NMI 0x4
#define APIC_MODE_EXTINT 0x7

static void lapic_set_lvt_mode(struct kvm_lapic_state *l, int reg, uint32_t mode)
{
	uint32_t v;

	memcpy(&v, &l->regs[reg], sizeof(v));
	v = (v & ~0x700u) | (mode << 8);
	memcpy(&l->regs[reg], &v, sizeof(v));
}

int accel_vcpu_init_lapic(struct accel_vcpu *v)
{
	struct kvm_lapic_state l;

	if (ioctl(v->fd, KVM_GET_LAPIC, &l) < 0)
		return -errno;
	lapic_set_lvt_mode(&l, APIC_LVT_LINT0, APIC_MODE_EXTINT);
	lapic_set_lvt_mode(&l, APIC_LVT_LINT1, APIC_MODE_NMI);
	return ioctl(v->fd, KVM_SET_LAPIC, &l) < 0 ? -errno : 0;
}

static void decode_exit(struct accel_vcpu *v, struct vcpu_exit *e)
{
	struct kvm_run *r = v->run;

	memset(e, 0, sizeof(*e));
	switch (r->exit_reason) {
	case KVM_EXIT_IO:
		e->kind = VCPU_EXIT_IO;
		e->io.port = r->io.port;
		e->io.size = r->io.size;
		e->io.write = r->io.direction == KVM_EXIT_IO_OUT;
		e->io.count = r->io.count;
		e->io.data = (uint8_t *)r + r->io.data_offset;
		break;
	case KVM_EXIT_MMIO:
		e->kind = VCPU_EXIT_MMIO;
		e->mmio.addr = r->mmio.phys_addr;
		e->mmio.len = r->mmio.len;
		e->mmio.write = r->mmio.is_write;
		e->mmio.data = r->mmio.data;
		break;
	case KVM_EXIT_X86_RDMSR:
	case KVM_EXIT_X86_WRMSR:
		e->kind = VCPU_EXIT_MSR;
		e->msr.index = r->msr.index;
		e->msr.write = r->exit_reason == KVM_EXIT_X86_WRMSR;
		e->msr.data = r->msr.data;
		break;
	case KVM_EXIT_SHUTDOWN:
		e->kind = VCPU_EXIT_SHUTDOWN;
		break;
	case KVM_EXIT_HLT:
		e->kind = VCPU_EXIT_HLT;
		break;
	case KVM_EXIT_SYSTEM_EVENT:
		e->code = r->system_event.type;
		e->kind = r->system_event.type == KVM_SYSTEM_EVENT_SHUTDOWN ?
				  VCPU_EXIT_SYSTEM_OFF : VCPU_EXIT_SYSTEM_RESET;
		break;
	case KVM_EXIT_FAIL_ENTRY:
		e->kind = VCPU_EXIT_FAIL;
		e->code = r->fail_entry.hardware_entry_failure_reason;
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		e->kind = VCPU_EXIT_FAIL;
		e->code = 0x10000u | r->internal.suberror;
		break;
	case KVM_EXIT_INTR:
		e->kind = VCPU_EXIT_INTR;
		break;
	default:
		e->kind = VCPU_EXIT_OTHER;
		e->code = r->exit_reason;
		break;
	}
}

/* Hands the results of the previous exit back to KVM before re-entering:
 * MSR reads/writes report through kvm_run; port and MMIO reads were written
 * in place through the data pointers. */
static void complete_exit(struct accel_vcpu *v, const struct vcpu_exit *prev)
{
	if (prev && prev->kind == VCPU_EXIT_MSR) {
		v->run->msr.error = prev->msr.error ? 1 : 0;
		if (!prev->msr.write)
			v->run->msr.data = prev->msr.data;
	}
}

int accel_vcpu_run(struct accel_vcpu *v, struct vcpu_exit *e)
{
	if (!v->thread_set) {
		v->thread = pthread_self();
		__atomic_store_n(&v->thread_set, 1, __ATOMIC_RELEASE);
	}
	complete_exit(v, e);
	if (ioctl(v->fd, KVM_RUN, 0) < 0) {
		if (errno == EINTR || errno == EAGAIN) {
			v->run->immediate_exit = 0;
			memset(e, 0, sizeof(*e));
			e->kind = VCPU_EXIT_INTR;
			return 0;
		}
		return -errno;
	}
	decode_exit(v, e);
	return 0;
}

void accel_vcpu_kick(struct accel_vcpu *v)
{
	/* immediate_exit covers the window before the thread enters KVM_RUN;
	 * the signal covers a thread already inside it. */
	__atomic_store_n(&v->run->immediate_exit, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&v->thread_set, __ATOMIC_ACQUIRE))
		pthread_kill(v->thread, KICK_SIGNAL);
}
