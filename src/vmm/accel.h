/* The accelerator interface: everything kosa8 asks of the hypervisor.
 *
 * The VMM core never calls an ioctl itself; it goes through these few
 * functions, so that a second backend (Apple's Hypervisor.framework) can sit
 * behind the same interface later.  accel_kvm.c is the Linux/KVM backend's
 * common part, vmm/x86/accel_kvm.c and vmm/arm64/accel_kvm.c its
 * architectures' (one is built).  The boot state is described in plain
 * values computed by the machine (vmm/x86/boot.c, vmm/arm64/boot.c), so the
 * backend only applies them.  Functions marked x86 or arm64 exist only in
 * that architecture's build. */
#ifndef KOSA8_ACCEL_H
#define KOSA8_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct accel_vm;
struct accel_vcpu;

/* One CPUID leaf, in the layout the filter in cpuid.c works on. */
struct cpuid_leaf {
	uint32_t function;
	uint32_t index;
	uint32_t flags; /* CPUID_FLAG_SIGNIFICANT_INDEX when index matters */
	uint32_t eax, ebx, ecx, edx;
};
#define CPUID_FLAG_SIGNIFICANT_INDEX 1u
#define CPUID_MAX_LEAVES 256

struct x86_segment {
	uint64_t base;
	uint32_t limit;
	uint16_t selector;
	uint8_t type, present, dpl, db, s, l, g, avl;
};

/* Architectural state of a vCPU at the 64-bit kernel entry point. */
struct x86_boot_cpu {
	uint64_t rip, rsp, rsi, rflags;
	uint64_t cr0, cr3, cr4, efer;
	uint64_t gdt_base, idt_base;
	uint16_t gdt_limit, idt_limit;
	struct x86_segment cs, ds, es, fs, gs, ss, tr, ldt;
};

struct x86_msr {
	uint32_t index;
	uint64_t value;
};

/* Why KVM_RUN (or its equivalent) returned, in backend-neutral form. */
enum vcpu_exit_kind {
	VCPU_EXIT_IO,         /* port I/O: io.* valid, data in/out through io.data */
	VCPU_EXIT_MMIO,       /* memory-mapped I/O: mmio.* valid */
	VCPU_EXIT_MSR,        /* unknown MSR: msr.* valid; set msr.error or msr.data */
	VCPU_EXIT_SHUTDOWN,   /* triple fault: a real machine resets */
	VCPU_EXIT_SYSTEM_RESET,
	VCPU_EXIT_SYSTEM_OFF,
	VCPU_EXIT_HLT,
	VCPU_EXIT_INTR,       /* interrupted by a signal: check for stop requests */
	VCPU_EXIT_FAIL,       /* entry failure or internal error: reason in code */
	VCPU_EXIT_OTHER,
};

struct vcpu_exit {
	enum vcpu_exit_kind kind;
	uint64_t code; /* backend-specific detail for FAIL/OTHER, for the log */
	/* FAIL: what the hypervisor said beyond the code (for KVM's internal
	 * errors its data words: exit reason, fault address, instruction
	 * bytes), for the log; empty if nothing. */
	char detail[200];
	union {
		struct {
			uint16_t port;
			uint8_t size;   /* 1, 2 or 4 */
			bool write;
			uint32_t count; /* rep string ops: repeat count */
			uint8_t *data;  /* count * size bytes, owned by the backend */
		} io;
		struct {
			uint64_t addr;
			uint32_t len;   /* 1..8 */
			bool write;
			uint8_t *data;
		} mmio;
		struct {
			uint32_t index;
			bool write;
			uint64_t data;  /* value written, or to be returned on read */
			bool error;     /* set to inject #GP */
		} msr;
	};
};

struct accel_caps {
	int max_vcpus;
	bool user_msr_exits;
};

/* Opens the accelerator.  On failure err_msg gets a sentence for the user
 * that says what is wrong and what to do. */
/* Whether the CPU offers hardware virtualization (x86: the vmx or svm flag
 * in /proc/cpuinfo).  A /dev/kvm without it is a software KVM (kvm-pvm,
 * seen on this project's build machines), which fails to run a stock
 * kernel's early boot: its emulator gives up on cmpxchg16b in SLUB.  Read
 * before any jail (which hides /proc/cpuinfo). */
bool accel_hw_virt(void);
/* The same from a file in /proc/cpuinfo's format (true if unreadable). */
bool accel_cpuinfo_hw_virt(const char *path);

/* Opens the accelerator's device now, for the next accel_open() (which
 * then needs no file system access: the VMM's jail hides /dev). */
int accel_preopen(const char **err_msg);
int accel_open(struct accel_vm **vm, const char **err_msg);
void accel_close(struct accel_vm *vm);
void accel_caps(struct accel_vm *vm, struct accel_caps *caps);

/* Guest physical memory: host range [hva, hva+size) appears at gpa.  With
 * log_dirty the hypervisor records which pages the guest writes. */
int accel_map_memory(struct accel_vm *vm, uint32_t slot, uint64_t gpa,
		     uint64_t size, void *hva, bool log_dirty);
/* The pages of a slot mapped with log_dirty that were written since the
 * last call (or since it was mapped), one bit per page from the slot's
 * start, and starts a new interval.  bitmap holds (pages + 63) / 64 words. */
int accel_dirty_log(struct accel_vm *vm, uint32_t slot, uint64_t *bitmap);

/* x86: interrupt controller and timer in the hypervisor (PIC, IOAPIC, PIT). */
int accel_create_irqchip(struct accel_vm *vm);
/* An interrupt line: x86 a GSI of the IOAPIC, arm64 a GIC SPI (INTID - 32). */
int accel_irq_line(struct accel_vm *vm, uint32_t gsi, int level);

/* arm64: the GICv3 in the hypervisor, its distributor and redistributors
 * (ARM64_GIC_REDIST_STRIDE each, one per vCPU) at these guest-physical
 * addresses; created before the vCPUs, started after all of them exist. */
#define ARM64_GIC_DIST_SIZE 0x10000ULL
#define ARM64_GIC_REDIST_STRIDE 0x20000ULL
int accel_arm64_create_gic(struct accel_vm *vm, uint64_t dist, uint64_t redist);
int accel_arm64_start_gic(struct accel_vm *vm);
/* arm64: a vCPU with PSCI 0.2 (CPU on/off, power-off and reset in the
 * hypervisor); every one but the boot processor starts powered off and is
 * started by the guest through PSCI CPU_ON. */
int accel_vcpu_arm64_init(struct accel_vcpu *vcpu, bool powered_off);
/* arm64: the boot processor at the kernel's entry (the Image protocol: x0
 * the device tree's address, x1-x3 zero, EL1 with interrupts masked). */
int accel_vcpu_arm64_boot(struct accel_vcpu *vcpu, uint64_t pc, uint64_t x0);

/* A doorbell in the hypervisor: a guest write of `len` bytes equal to
 * `value` at the guest-physical MMIO address `gpa` signals the eventfd `fd`
 * without the vCPU leaving the hypervisor (KVM_IOEVENTFD).  A device whose
 * I/O thread waits on fd then costs the guest no exit to the VMM per
 * notification; writes of other values still exit as MMIO. */
int accel_mmio_doorbell(struct accel_vm *vm, uint64_t gpa, uint32_t len, uint64_t value, int fd);

/* x86: CPUID leaves the hypervisor can offer (before filtering). */
int accel_supported_cpuid(struct accel_vm *vm, struct cpuid_leaf *leaves,
			  size_t max, size_t *count);

int accel_vcpu_create(struct accel_vm *vm, int id, struct accel_vcpu **vcpu);
void accel_vcpu_destroy(struct accel_vcpu *vcpu);
int accel_vcpu_set_cpuid(struct accel_vcpu *vcpu, const struct cpuid_leaf *leaves,
			 size_t count);
int accel_vcpu_set_msrs(struct accel_vcpu *vcpu, const struct x86_msr *msrs,
			size_t count);
/* x86: boot processor state; application processors wait for INIT/SIPI. */
int accel_vcpu_set_boot_state(struct accel_vcpu *vcpu, const struct x86_boot_cpu *st);
/* x86: local APIC: LINT0 as ExtINT and LINT1 as NMI, as firmware would leave them. */
int accel_vcpu_init_lapic(struct accel_vcpu *vcpu);
/* Runs the vCPU until the next exit that needs the VMM. */
int accel_vcpu_run(struct accel_vcpu *vcpu, struct vcpu_exit *exit);
/* One line of a stopped vCPU's registers (RIP, RSP, control registers,
 * IDT), for reporting a guest whose CPU reset itself.  Host threads only:
 * the vCPU role's seccomp filter does not allow the register reads. */
int accel_vcpu_describe(struct accel_vcpu *vcpu, char *buf, size_t len);
/* Makes a blocked accel_vcpu_run() return VCPU_EXIT_INTR soon (any thread). */
void accel_vcpu_kick(struct accel_vcpu *vcpu);

/* Finishes the I/O of the previous exit without running guest code (KVM's
 * immediate exit).  A port or MMIO read completes only on the next entry, so
 * a vCPU parked for a checkpoint calls this first: otherwise the saved RIP
 * would still point at the IN instruction and the value read be lost. */
int accel_vcpu_settle(struct accel_vcpu *vcpu, struct vcpu_exit *prev);

/* ---- Saved state (checkpoint, restore, fork) ----
 *
 * The backend hands its state out as tagged records whose layout it alone
 * knows (for KVM: the kernel's own x86 ABI structs from <linux/kvm.h>, which
 * never change size once released); the VMM core stores them as they are
 * and gives them back.  A record the backend could not read on this host
 * (e.g. no XCRs) is simply absent, and skipped on restore. */
enum accel_rec_tag {
	/* per vCPU */
	ACCEL_REC_TSC_KHZ = 1,    /* uint32_t: the guest's TSC frequency */
	ACCEL_REC_MP_STATE,
	ACCEL_REC_REGS,
	ACCEL_REC_SREGS,
	ACCEL_REC_XSAVE,          /* FPU, SSE, AVX...: the whole XSAVE area */
	ACCEL_REC_XCRS,
	ACCEL_REC_DEBUGREGS,
	ACCEL_REC_LAPIC,
	ACCEL_REC_MSRS,           /* every MSR the hypervisor can save, TSC included */
	ACCEL_REC_EVENTS,         /* pending exceptions, interrupts, NMI, SIPI */
	/* arm64, per vCPU (MP state as above: powered off or runnable) */
	ACCEL_REC_ARM64_REGS = 16,  /* pairs: every register the one-reg list names */
	ACCEL_REC_ARM64_GIC_CPU,    /* pairs: its redistributor and GIC CPU interface */
	/* per VM */
	ACCEL_REC_PIC_MASTER = 32,
	ACCEL_REC_PIC_SLAVE,
	ACCEL_REC_IOAPIC,
	ACCEL_REC_PIT,
	ACCEL_REC_CLOCK,          /* kvmclock */
	/* arm64, per VM */
	ACCEL_REC_ARM64_GIC_DIST = 48, /* pairs: the GIC distributor */
};
#define ACCEL_MAX_RECS 16

struct accel_rec {
	uint32_t tag;
	uint32_t len;
	uint8_t *data;            /* malloc'd by save, or owned by the caller on restore */
};

struct accel_state {
	int n;
	struct accel_rec recs[ACCEL_MAX_RECS];
};

/* Frees the records' data (after a save) and empties the set. */
void accel_state_free(struct accel_state *s);
const struct accel_rec *accel_state_find(const struct accel_state *s, uint32_t tag);
/* Adds a copy of data; -ENOSPC when full, -ENOMEM. */
int accel_state_add(struct accel_state *s, uint32_t tag, const void *data, size_t len);

/* Records of (id, value) pairs, the form of register lists: each pair is
 * the id (8 bytes, host order) and its value, whose size the id gives as
 * the one-reg interface does (bits 52-55: log2 of the size in bytes, at
 * most ACCEL_PAIR_MAX bytes).  A checkpoint file holds them: the reader is
 * bounds-checked (fuzz/fuzz_accel_pairs.c). */
#define ACCEL_PAIR_SIZE_SHIFT 52
#define ACCEL_PAIR_MAX 256
struct accel_pairs {
	uint8_t *buf;
	size_t len, cap;
	int err;                  /* sticky: the first failure of add */
};
/* The size of id's value, 0 when the id names none this reader takes. */
size_t accel_pair_size(uint64_t id);
/* Appends a pair (value: accel_pair_size(id) bytes). */
void accel_pairs_add(struct accel_pairs *p, uint64_t id, const void *val);
/* The pair at *off of a record: 1 with *id and *val (pointing into data),
 * 0 at the end, -EINVAL if what is there is not a whole pair. */
int accel_pairs_next(const uint8_t *data, size_t len, size_t *off, uint64_t *id,
		     const uint8_t **val);

/* The vCPU must not be running (parked, after accel_vcpu_settle).  Both
 * saves start by emptying out: callers pass it uninitialised. */
int accel_vcpu_save(struct accel_vcpu *vcpu, struct accel_state *out);
/* On failure why names the record that was refused. */
int accel_vcpu_restore(struct accel_vcpu *vcpu, const struct accel_state *in,
		       const char **why);
/* Interrupt controllers, PIT, clock: with every vCPU parked. */
int accel_vm_save(struct accel_vm *vm, struct accel_state *out);
/* After every vCPU was restored, just before they run again (see why in
 * accel_kvm.c). */
int accel_vm_restore(struct accel_vm *vm, const struct accel_state *in, const char **why);

#endif
