/* Linux KVM backend of the accelerator interface (accel.h), x86-64 part:
 * CPUID, MSRs, the boot state, the LAPIC, the in-kernel PIC/IOAPIC/PIT and
 * the records of a checkpoint. */
#include "vmm/accel_kvm.h"

#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "vmm/x86/cpuid.h"

/* Where KVM on Intel wants three private pages for its real-mode TSS and
 * identity map: just below the 4 GiB boundary, clear of RAM and of the
 * LAPIC/IOAPIC windows (the same place other VMMs use). */
#define KVM_TSS_ADDR 0xfffbd000ULL
#define KVM_IDENTITY_MAP_ADDR 0xfffbc000ULL


int kvm_arch_check_caps(struct accel_vm *vm, const char **err_msg)
{
	static const struct { int cap; const char *name; } needed[] = {
		{KVM_CAP_IRQCHIP, "in-kernel irqchip"},
		{KVM_CAP_PIT2, "in-kernel PIT"},
		{KVM_CAP_EXT_CPUID, "extended CPUID"},
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

int kvm_arch_vm_init(struct accel_vm *vm, const char **err_msg)
{
	pthread_mutex_init(&vm->arch.msr_lock, NULL);
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, KVM_TSS_ADDR) < 0 ||
	    ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &(uint64_t){KVM_IDENTITY_MAP_ADDR}) < 0) {
		*err_msg = "KVM refused the TSS / identity map addresses";
		return -errno;
	}
	kvm_enable_msr_exits(vm);
	return 0;
}

void kvm_arch_vm_free(struct accel_vm *vm)
{
	free(vm->arch.save_msrs);
	pthread_mutex_destroy(&vm->arch.msr_lock);
}

bool accel_hw_virt(void) { return accel_cpuinfo_hw_virt("/proc/cpuinfo"); }

bool accel_cpuinfo_hw_virt(const char *path)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	bool found = false;

	if (!f)
		return true; /* cannot tell: let KVM itself decide */
	while (!found && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "flags", 5) || !colon)
			continue;
		for (char *save = NULL, *t = strtok_r(colon + 1, " \t\n", &save); t;
		     t = strtok_r(NULL, " \t\n", &save))
			if (!strcmp(t, "vmx") || !strcmp(t, "svm"))
				found = true;
		break; /* every CPU lists the same flags */
	}
	fclose(f);
	return found;
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

/* XCR0 as KVM sees it after a throwaway one-vCPU guest, given the CPUID in
 * c, ran XSETBV(CPUID_PROBE_XCR0) in real mode; CPUID_PROBE_XCR0 (no
 * change) when the probe cannot run or the CPUID has no XSAVE.  Costs one
 * small VM, about a millisecond on hardware. */
static uint64_t kvm_probe_xsetbv(struct accel_vm *vm, const struct kvm_cpuid2 *c)
{
	static const uint8_t code[] = {0x0f, 0x01, 0xd1, /* xsetbv */ 0xf4 /* hlt */};
	struct kvm_userspace_memory_region r = {.memory_size = 4096};
	struct kvm_regs regs = {.rip = 0, .rax = CPUID_PROBE_XCR0, .rflags = 2};
	struct kvm_sregs sregs;
	struct kvm_xcrs xcrs = {0};
	uint64_t seen = CPUID_PROBE_XCR0;
	struct kvm_run *run = MAP_FAILED;
	int vmfd, cpufd = -1;
	void *mem;

	mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return seen;
	memcpy(mem, code, sizeof(code));
	r.userspace_addr = (uintptr_t)mem;
	vmfd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vmfd < 0 || ioctl(vmfd, KVM_SET_USER_MEMORY_REGION, &r) < 0 ||
	    (cpufd = ioctl(vmfd, KVM_CREATE_VCPU, 0)) < 0 ||
	    ioctl(cpufd, KVM_SET_CPUID2, c) < 0 || ioctl(cpufd, KVM_GET_SREGS, &sregs) < 0)
		goto out;
	run = mmap(NULL, (size_t)vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, cpufd, 0);
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	sregs.cr4 |= 1u << 18; /* OSXSAVE: refused when the CPUID lacks XSAVE */
	if (run == MAP_FAILED || ioctl(cpufd, KVM_SET_SREGS, &sregs) < 0 ||
	    ioctl(cpufd, KVM_SET_REGS, &regs) < 0 || ioctl(cpufd, KVM_RUN, 0) < 0 ||
	    run->exit_reason != KVM_EXIT_HLT || ioctl(cpufd, KVM_GET_XCRS, &xcrs) < 0)
		goto out;
	for (uint32_t i = 0; i < xcrs.nr_xcrs && i < KVM_MAX_XCRS; i++)
		if (xcrs.xcrs[i].xcr == 0)
			seen = xcrs.xcrs[i].value;
out:
	if (run != MAP_FAILED)
		munmap(run, (size_t)vm->run_size);
	if (cpufd >= 0)
		close(cpufd);
	if (vmfd >= 0)
		close(vmfd);
	munmap(mem, 4096);
	return seen;
}

/* Whether the guest's XSETBV can go unseen, so that kvm_probe_xsetbv() is
 * worth its throwaway VM: only when the offered CPUID has XSAVE and this
 * host is itself a guest.  On bare metal XSETBV always exits to KVM (VMX
 * exits on it unconditionally; KVM's SVM code sets its intercept). */
static bool kvm_xsetbv_may_be_unseen(const struct kvm_cpuid2 *c)
{
	unsigned int eax, ebx, ecx, edx;

	if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & CPUID_1_ECX_HYPERVISOR))
		return false;
	for (uint32_t i = 0; i < c->nent; i++)
		if (c->entries[i].function == 1)
			return c->entries[i].ecx & CPUID_1_ECX_XSAVE;
	return false;
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
		/* KVM's LAPIC (in-kernel irqchip, which kosa8 always creates)
		 * emulates the TSC-deadline timer on any host, but leaves the bit
		 * out of KVM_GET_SUPPORTED_CPUID (api.rst: check the capability).
		 * Without it the guest calibrates the LAPIC timer against a
		 * periodic tick at boot. */
		if (e->function == 1 && kvm_has(vm, KVM_CAP_TSC_DEADLINE_TIMER))
			leaves[i].ecx |= CPUID_1_ECX_TSC_DEADLINE;
	}
	*count = c->nent;
	if (kvm_xsetbv_may_be_unseen(c) && cpuid_fix_xsave(leaves, c->nent, kvm_probe_xsetbv(vm, c)))
		log_info("KVM does not see the guest's XSETBV (nested under an emulator?): "
			 "offering the guest no XSAVE");
out:
	free(c);
	return err;
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

int accel_vcpu_describe(struct accel_vcpu *v, char *buf, size_t len)
{
	struct kvm_regs r;
	struct kvm_sregs sr;

	if (ioctl(v->fd, KVM_GET_REGS, &r) < 0 || ioctl(v->fd, KVM_GET_SREGS, &sr) < 0)
		return -errno;
	snprintf(buf, len,
		 "rip=%#llx rsp=%#llx rflags=%#llx cr0=%#llx cr2=%#llx cr3=%#llx cr4=%#llx "
		 "efer=%#llx cs=%#x idt=%#llx/%#x",
		 (unsigned long long)r.rip, (unsigned long long)r.rsp, (unsigned long long)r.rflags,
		 (unsigned long long)sr.cr0, (unsigned long long)sr.cr2, (unsigned long long)sr.cr3,
		 (unsigned long long)sr.cr4, (unsigned long long)sr.efer, sr.cs.selector,
		 (unsigned long long)sr.idt.base, sr.idt.limit);
	/* KVM on AMD resets the vCPU when it sees the shutdown (the VMCB is
	 * undefined after one): the fault's own registers are gone. */
	if (r.rip == 0xfff0 && sr.cs.selector == 0xf000)
		snprintf(buf + strlen(buf), len - strlen(buf), " (already reset by KVM)");
	return 0;
}

bool kvm_arch_decode_exit(struct kvm_run *r, struct vcpu_exit *e)
{
	switch (r->exit_reason) {
	case KVM_EXIT_IO:
		e->kind = VCPU_EXIT_IO;
		e->io.port = r->io.port;
		e->io.size = r->io.size;
		e->io.write = r->io.direction == KVM_EXIT_IO_OUT;
		e->io.count = r->io.count;
		e->io.data = (uint8_t *)r + r->io.data_offset;
		return true;
	case KVM_EXIT_X86_RDMSR:
	case KVM_EXIT_X86_WRMSR:
		e->kind = VCPU_EXIT_MSR;
		e->msr.index = r->msr.index;
		e->msr.write = r->exit_reason == KVM_EXIT_X86_WRMSR;
		e->msr.data = r->msr.data;
		return true;
	case KVM_EXIT_SHUTDOWN:
		e->kind = VCPU_EXIT_SHUTDOWN;
		return true;
	}
	return false;
}

/* MSR reads/writes report through kvm_run; port reads were written in
 * place through the data pointer. */
void kvm_arch_complete_exit(struct kvm_run *r, const struct vcpu_exit *prev)
{
	if (prev && prev->kind == VCPU_EXIT_MSR) {
		r->msr.error = prev->msr.error ? 1 : 0;
		if (!prev->msr.write)
			r->msr.data = prev->msr.data;
	}
}

/* ---- Saved state ----
 *
 * Records are KVM's own structs, stored whole.  The order of the ioctls
 * matters on both sides; each rule is stated where it applies. */

/* XSAVE area size: KVM_CAP_XSAVE2 reports it when the host has features
 * (AMX) beyond the legacy 4 KiB struct kvm_xsave; 0 means the old size. */
static size_t kvm_xsave_size(struct accel_vm *vm)
{
	int n = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);

	return n > (int)sizeof(struct kvm_xsave) ? (size_t)n : sizeof(struct kvm_xsave);
}

/* KVM_GET_MSR_INDEX_LIST names the MSRs KVM saves and restores, but some of
 * them exist only with CPU features this host or guest lacks and make
 * KVM_GET_MSRS stop short.  Each is tried once on a vCPU; those that read
 * are the set a checkpoint saves. */
static int kvm_probe_msrs(struct accel_vcpu *v)
{
	struct accel_vm *vm = v->vm;
	struct kvm_msr_list probe = {.nmsrs = 0}, *list = NULL;
	struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry e;
	} one;
	int err = 0;

	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
		return -errno;
	list = calloc(1, sizeof(*list) + probe.nmsrs * sizeof(uint32_t));
	vm->arch.save_msrs = calloc(probe.nmsrs ? probe.nmsrs : 1, sizeof(uint32_t));
	if (!list || !vm->arch.save_msrs) {
		err = -ENOMEM;
		goto out;
	}
	list->nmsrs = probe.nmsrs;
	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, list) < 0) {
		err = -errno;
		goto out;
	}
	for (uint32_t i = 0; i < list->nmsrs; i++) {
		memset(&one, 0, sizeof(one));
		one.hdr.nmsrs = 1;
		one.e.index = list->indices[i];
		if (ioctl(v->fd, KVM_GET_MSRS, &one) == 1)
			vm->arch.save_msrs[vm->arch.nsave_msrs++] = list->indices[i];
	}
	vm->arch.save_msrs_probed = true;
out:
	if (err) {
		free(vm->arch.save_msrs);
		vm->arch.save_msrs = NULL;
		vm->arch.nsave_msrs = 0;
	}
	free(list);
	return err;
}

static int kvm_save_msrs(struct accel_vcpu *v, struct accel_state *out)
{
	struct accel_vm *vm = v->vm;
	struct kvm_msrs *m = NULL;
	size_t size;
	int n, err = 0;

	pthread_mutex_lock(&vm->arch.msr_lock);
	if (!vm->arch.save_msrs_probed)
		err = kvm_probe_msrs(v);
	pthread_mutex_unlock(&vm->arch.msr_lock);
	if (err)
		return err;
	size = sizeof(*m) + vm->arch.nsave_msrs * sizeof(struct kvm_msr_entry);
	m = calloc(1, size);
	if (!m)
		return -ENOMEM;
	m->nmsrs = vm->arch.nsave_msrs;
	for (uint32_t i = 0; i < vm->arch.nsave_msrs; i++)
		m->entries[i].index = vm->arch.save_msrs[i];
	n = ioctl(v->fd, KVM_GET_MSRS, m);
	if (n < 0)
		err = -errno;
	else if ((uint32_t)n != m->nmsrs)
		err = -EIO; /* one read in the probe and not now: never seen */
	else
		err = accel_state_add(out, ACCEL_REC_MSRS, m, size);
	free(m);
	return err;
}

/* One KVM_GET_* ioctl into a fixed-size struct, added as a record. */
static int kvm_get_rec(int fd, unsigned long req, uint32_t tag, void *buf, size_t len,
		       struct accel_state *out)
{
	memset(buf, 0, len);
	if (ioctl(fd, req, buf) < 0)
		return -errno;
	return accel_state_add(out, tag, buf, len);
}

int accel_vcpu_save(struct accel_vcpu *v, struct accel_state *out)
{
	union {
		struct kvm_mp_state mp;
		struct kvm_regs regs;
		struct kvm_sregs sregs;
		struct kvm_xcrs xcrs;
		struct kvm_debugregs dbg;
		struct kvm_lapic_state lapic;
		struct kvm_vcpu_events ev;
	} u;
	struct accel_vm *vm = v->vm;
	size_t xsize = kvm_xsave_size(vm);
	void *xsave = NULL;
	uint32_t khz;
	int n, err;

	memset(out, 0, sizeof(*out));
	/* MP state first: reading it makes KVM act on a pending INIT or SIPI,
	 * which changes the registers read after it. */
	if ((err = kvm_get_rec(v->fd, KVM_GET_MP_STATE, ACCEL_REC_MP_STATE, &u.mp, sizeof(u.mp), out)) ||
	    (err = kvm_get_rec(v->fd, KVM_GET_REGS, ACCEL_REC_REGS, &u.regs, sizeof(u.regs), out)) ||
	    (err = kvm_get_rec(v->fd, KVM_GET_SREGS, ACCEL_REC_SREGS, &u.sregs, sizeof(u.sregs), out)))
		goto fail;
	xsave = calloc(1, xsize);
	if (!xsave) {
		err = -ENOMEM;
		goto fail;
	}
	if ((err = kvm_get_rec(v->fd, xsize > sizeof(struct kvm_xsave) ? KVM_GET_XSAVE2 : KVM_GET_XSAVE,
			       ACCEL_REC_XSAVE, xsave, xsize, out)))
		goto fail;
	if (kvm_has(vm, KVM_CAP_XCRS) &&
	    (err = kvm_get_rec(v->fd, KVM_GET_XCRS, ACCEL_REC_XCRS, &u.xcrs, sizeof(u.xcrs), out)))
		goto fail;
	if (kvm_has(vm, KVM_CAP_DEBUGREGS) &&
	    (err = kvm_get_rec(v->fd, KVM_GET_DEBUGREGS, ACCEL_REC_DEBUGREGS, &u.dbg, sizeof(u.dbg), out)))
		goto fail;
	if ((err = kvm_get_rec(v->fd, KVM_GET_LAPIC, ACCEL_REC_LAPIC, &u.lapic, sizeof(u.lapic), out)))
		goto fail;
	memset(&u.ev, 0, sizeof(u.ev));
	if (ioctl(v->fd, KVM_GET_VCPU_EVENTS, &u.ev) < 0) {
		err = -errno;
		goto fail;
	}
	/* GET leaves these validity flags clear although it filled the fields;
	 * SET applies a field only when its flag says so. */
	u.ev.flags |= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR;
	if ((err = accel_state_add(out, ACCEL_REC_EVENTS, &u.ev, sizeof(u.ev))) ||
	    (err = kvm_save_msrs(v, out)))
		goto fail;
	n = ioctl(v->fd, KVM_GET_TSC_KHZ, 0);
	if (n > 0) {
		khz = (uint32_t)n;
		if ((err = accel_state_add(out, ACCEL_REC_TSC_KHZ, &khz, sizeof(khz))))
			goto fail;
	}
	free(xsave);
	return 0;
fail:
	free(xsave);
	accel_state_free(out);
	return err;
}

/* One KVM_SET_* from a record, checked for the exact struct size first. */
static int kvm_set_rec(int fd, unsigned long req, const struct accel_state *in, uint32_t tag,
		       size_t len, bool optional, const char *name, const char **why)
{
	const struct accel_rec *r = accel_state_find(in, tag);

	if (!r) {
		if (optional)
			return 0;
		*why = name;
		return -ENOENT;
	}
	if (r->len != len) {
		*why = name;
		return -EINVAL;
	}
	if (ioctl(fd, req, r->data) < 0) {
		*why = name;
		return -errno;
	}
	return 0;
}

/* Sets every saved MSR.  KVM_SET_MSRS stops at the first one it refuses; that
 * one is logged and skipped so that one MSR this kernel no longer takes
 * does not lose the rest. */
static int kvm_restore_msrs(struct accel_vcpu *v, const struct accel_state *in, const char **why)
{
	const struct accel_rec *r = accel_state_find(in, ACCEL_REC_MSRS);
	struct kvm_msrs *m;
	uint32_t done = 0, total;
	int n, err = 0;

	*why = "MSRs";
	if (!r || r->len < sizeof(*m))
		return -EINVAL;
	m = (struct kvm_msrs *)r->data;
	total = m->nmsrs;
	if ((r->len - sizeof(*m)) / sizeof(struct kvm_msr_entry) != total ||
	    (r->len - sizeof(*m)) % sizeof(struct kvm_msr_entry))
		return -EINVAL;
	m = malloc(r->len);
	if (!m)
		return -ENOMEM;
	while (done < total) {
		m->nmsrs = total - done;
		m->pad = 0;
		memcpy(m->entries, ((struct kvm_msrs *)r->data)->entries + done,
		       m->nmsrs * sizeof(struct kvm_msr_entry));
		n = ioctl(v->fd, KVM_SET_MSRS, m);
		if (n < 0) {
			err = -errno;
			break;
		}
		done += (uint32_t)n;
		if (done < total) {
			log_warn("vCPU %d: KVM refused saved MSR 0x%x; skipped", v->id,
				 ((struct kvm_msrs *)r->data)->entries[done].index);
			done++;
		}
	}
	free(m);
	return err;
}

static int kvm_restore_tsc_khz(struct accel_vcpu *v, const struct accel_state *in)
{
	const struct accel_rec *r = accel_state_find(in, ACCEL_REC_TSC_KHZ);
	uint32_t khz;
	int cur;

	if (!r || r->len != sizeof(khz))
		return 0;
	memcpy(&khz, r->data, sizeof(khz));
	cur = ioctl(v->fd, KVM_GET_TSC_KHZ, 0);
	if (cur > 0 && (uint32_t)cur == khz)
		return 0;
	if (!kvm_has(v->vm, KVM_CAP_TSC_CONTROL) || ioctl(v->fd, KVM_SET_TSC_KHZ, khz) < 0)
		log_warn("vCPU %d: the guest's TSC ran at %u kHz and this host cannot set that (it has %d kHz); guest time may drift",
			 v->id, khz, cur);
	return 0;
}

/* Restore order, and why:
 *  - TSC frequency first: the TSC value in the MSRs below is interpreted
 *    at the frequency in force when it is written.
 *  - MP state before the registers: setting it may reset a vCPU that was
 *    waiting for INIT/SIPI.
 *  - sregs before the MSRs: KVM_SET_SREGS writes EFER and APIC_BASE too,
 *    and the MSR list (which may repeat them) must have the last word.
 *  - LAPIC before the MSRs: TSC_DEADLINE is dropped unless the LAPIC timer
 *    is already in TSC-deadline mode.
 *  - Events last: KVM_SET_LAPIC can re-evaluate LINT pins and pending
 *    interrupts; the saved pending events must win. */
int accel_vcpu_restore(struct accel_vcpu *v, const struct accel_state *in, const char **why)
{
	size_t xsize = kvm_xsave_size(v->vm);
	int fd = v->fd, err;

	if ((err = kvm_restore_tsc_khz(v, in)) ||
	    (err = kvm_set_rec(fd, KVM_SET_MP_STATE, in, ACCEL_REC_MP_STATE,
			       sizeof(struct kvm_mp_state), false, "MP state", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_REGS, in, ACCEL_REC_REGS, sizeof(struct kvm_regs),
			       false, "registers", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_SREGS, in, ACCEL_REC_SREGS, sizeof(struct kvm_sregs),
			       false, "segment and control registers", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_XSAVE, in, ACCEL_REC_XSAVE, xsize, false,
			       "XSAVE area (FPU/vector state; a host with other XSAVE features?)", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_XCRS, in, ACCEL_REC_XCRS, sizeof(struct kvm_xcrs),
			       true, "XCRs", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_DEBUGREGS, in, ACCEL_REC_DEBUGREGS,
			       sizeof(struct kvm_debugregs), true, "debug registers", why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_LAPIC, in, ACCEL_REC_LAPIC,
			       sizeof(struct kvm_lapic_state), false, "local APIC", why)) ||
	    (err = kvm_restore_msrs(v, in, why)) ||
	    (err = kvm_set_rec(fd, KVM_SET_VCPU_EVENTS, in, ACCEL_REC_EVENTS,
			       sizeof(struct kvm_vcpu_events), false, "pending events", why)))
		return err;
	return 0;
}

static int kvm_save_irqchip(struct accel_vm *vm, uint32_t chip, uint32_t tag,
			    struct accel_state *out)
{
	struct kvm_irqchip c;

	memset(&c, 0, sizeof(c));
	c.chip_id = chip;
	if (ioctl(vm->vm_fd, KVM_GET_IRQCHIP, &c) < 0)
		return -errno;
	return accel_state_add(out, tag, &c, sizeof(c));
}

int accel_vm_save(struct accel_vm *vm, struct accel_state *out)
{
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
	int err;

	memset(out, 0, sizeof(*out));
	if ((err = kvm_save_irqchip(vm, KVM_IRQCHIP_PIC_MASTER, ACCEL_REC_PIC_MASTER, out)) ||
	    (err = kvm_save_irqchip(vm, KVM_IRQCHIP_PIC_SLAVE, ACCEL_REC_PIC_SLAVE, out)) ||
	    (err = kvm_save_irqchip(vm, KVM_IRQCHIP_IOAPIC, ACCEL_REC_IOAPIC, out)) ||
	    (err = kvm_get_rec(vm->vm_fd, KVM_GET_PIT2, ACCEL_REC_PIT, &pit, sizeof(pit), out)) ||
	    (err = kvm_get_rec(vm->vm_fd, KVM_GET_CLOCK, ACCEL_REC_CLOCK, &clock, sizeof(clock), out)))
		accel_state_free(out);
	return err;
}

static int kvm_restore_irqchip(struct accel_vm *vm, const struct accel_state *in, uint32_t tag,
			       uint32_t chip, const char *name, const char **why)
{
	const struct accel_rec *r = accel_state_find(in, tag);
	struct kvm_irqchip c;

	*why = name;
	if (!r || r->len != sizeof(c))
		return -EINVAL;
	memcpy(&c, r->data, sizeof(c));
	if (c.chip_id != chip)
		return -EINVAL;
	return ioctl(vm->vm_fd, KVM_SET_IRQCHIP, &c) < 0 ? -errno : 0;
}

/* After the vCPUs: the IOAPIC and PIC may deliver a pending line at once,
 * and should find the LAPICs in their saved state.  The clock last, once,
 * right before the vCPUs run: KVM_SET_CLOCK makes the guest's kvmclock read
 * the saved value from now on, so the guest does not see the time the VM
 * spent stopped as having passed on its monotonic clock (the wall clock is
 * corrected by the guest agent). */
int accel_vm_restore(struct accel_vm *vm, const struct accel_state *in, const char **why)
{
	const struct accel_rec *r;
	struct kvm_clock_data clock;
	int err;

	if ((err = kvm_restore_irqchip(vm, in, ACCEL_REC_PIC_MASTER, KVM_IRQCHIP_PIC_MASTER,
				       "PIC (master)", why)) ||
	    (err = kvm_restore_irqchip(vm, in, ACCEL_REC_PIC_SLAVE, KVM_IRQCHIP_PIC_SLAVE,
				       "PIC (slave)", why)) ||
	    (err = kvm_restore_irqchip(vm, in, ACCEL_REC_IOAPIC, KVM_IRQCHIP_IOAPIC, "IOAPIC", why)) ||
	    (err = kvm_set_rec(vm->vm_fd, KVM_SET_PIT2, in, ACCEL_REC_PIT,
			       sizeof(struct kvm_pit_state2), false, "PIT", why)))
		return err;
	r = accel_state_find(in, ACCEL_REC_CLOCK);
	*why = "kvmclock";
	if (!r || r->len != sizeof(clock))
		return -EINVAL;
	memcpy(&clock, r->data, sizeof(clock));
	/* Only the value: the flags that GET reports (TSC stable, realtime
	 * valid) describe the old host and are refused by SET. */
	clock = (struct kvm_clock_data){.clock = clock.clock};
	return ioctl(vm->vm_fd, KVM_SET_CLOCK, &clock) < 0 ? -errno : 0;
}
