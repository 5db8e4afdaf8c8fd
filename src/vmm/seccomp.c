#include "vmm/seccomp.h"

#include <errno.h>
#include <dlfcn.h>
#include <ucontext.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "common/util.h"

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the filter's table knows the system calls of x86-64 and arm64 only"
#endif

/* Thread roles.  R_VCPU: vCPU threads.  R_HOST: every other thread (main,
 * console input, virtio-blk I/O, virtio-vsock), which the process filter
 * covers as one role because it is installed once for all of them. */
#define R_VCPU 1u
#define R_HOST 2u
#define R_ALL (R_VCPU | R_HOST)

enum arg_check {
	ARGS_ANY,
	ARGS_IOCTL,   /* arg 1 must equal .request */
	ARGS_NO_EXEC, /* arg 2 (prot) must not have PROT_EXEC */
	ARGS_ARG0,    /* arg 0 must equal .request */
	ARGS_OWN_PID, /* arg 0 must be this process's pid */
	ARGS_ARG2,    /* arg 2 must equal .request */
};

struct rule {
	const char *name;
	int nr;
	enum arg_check args;
	unsigned long request;
	unsigned roles;
	const char *why;
};

#define SC(n) #n, SCMP_SYS(n)
#define IOC(req) "ioctl:" #req, SCMP_SYS(ioctl), ARGS_IOCTL, (req)
/* Checkpoint groups: one name per group (see the table). */
#define CK_IOC(req) "checkpoint-kvm-state", SCMP_SYS(ioctl), ARGS_IOCTL, (req)
#define CK_SC(n) "checkpoint-files", SCMP_SYS(n), ARGS_ANY, 0, R_HOST

/* Everything the VMM may do once the guest runs.  Set-up (opening KVM,
 * files, sockets, creating the VM, initializing the vCPUs, restoring a
 * checkpoint) happens before the filter exists.
 *
 * One table for both architectures.  arm64 has no system calls the
 * generic table left out (poll, epoll_wait, unlink, mkdir, readlink,
 * rmdir): glibc makes them ppoll, epoll_pwait, mkdirat, readlinkat and
 * unlinkat there, and the rows under `#if` name those.  ioctl requests
 * are numbered alike on both (asm-generic). */
static const struct rule rules[] = {
	/* Running the guest. */
	{IOC(KVM_RUN), R_VCPU, "enter the guest"},
	{IOC(KVM_IRQ_LINE), R_ALL, "raise and lower device interrupts (UART on vCPUs, virtio on I/O threads)"},
	/* Moving bytes. */
	{SC(read), ARGS_ANY, 0, R_HOST, "console input, the stop pipe, eventfd kicks, host sockets"},
	{SC(write), ARGS_ANY, 0, R_ALL, "console output, eventfd kicks, the stop pipe, host sockets, logs"},
	{SC(readv), ARGS_ANY, 0, R_HOST, "vsock: host socket into a guest buffer chain"},
	{SC(sendmsg), ARGS_ANY, 0, R_HOST, "vsock: guest buffer chain to a host socket (MSG_NOSIGNAL)"},
	{SC(recvfrom), ARGS_ANY, 0, R_HOST, "vsock: the host client's CONNECT line (MSG_PEEK)"},
	{SC(sendto), ARGS_ANY, 0, R_HOST, "vsock: the OK line to a host client"},
	{SC(preadv), ARGS_ANY, 0, R_HOST, "virtio-blk reads from the disk layers"},
	{SC(pwritev), ARGS_ANY, 0, R_HOST, "virtio-blk writes to the top delta"},
	{SC(pwrite64), ARGS_ANY, 0, R_HOST, "disk: block-map and header updates"},
	{SC(fdatasync), ARGS_ANY, 0, R_HOST, "virtio-blk flush: make the guest's writes durable"},
	{SC(fallocate), ARGS_ANY, 0, R_HOST, "virtio-blk discard: punch holes in the top delta"},
	{IOC(FIONREAD), R_HOST, "vsock: how much a host socket holds, within the guest's credit"},
	/* Host sockets of the vsock device. */
	{SC(accept4), ARGS_ANY, 0, R_HOST, "vsock: a host client connects to the device's socket"},
	{SC(socket), ARGS_ANY, 0, R_HOST, "vsock: the guest connects to a host port (U_port)"},
	{SC(connect), ARGS_ANY, 0, R_HOST, "vsock: the guest connects to a host port (U_port)"},
	{SC(shutdown), ARGS_ANY, 0, R_HOST, "vsock: half-close from the guest"},
	{SC(close), ARGS_ANY, 0, R_HOST, "vsock connections ending; tear-down"},
#if defined(__x86_64__)
	{SC(unlink), ARGS_ANY, 0, R_HOST, "vsock: the device removes its listening socket when the VM ends"},
#else /* unlink() is unlinkat(AT_FDCWD, path, 0); flags 0 keep rmdir out */
	{SC(unlinkat), ARGS_ARG2, 0, R_HOST, "vsock: the device removes its listening socket when the VM ends"},
#endif
	/* Waiting. */
#if defined(__x86_64__)
	{SC(poll), ARGS_ANY, 0, R_HOST, "the main and console threads wait for work"},
	{SC(ppoll), ARGS_ANY, 0, R_HOST, "the virtio-blk I/O thread waits for work, or a coalescing window's end"},
	{SC(epoll_wait), ARGS_ANY, 0, R_HOST, "the vsock thread waits for host sockets"},
#else
	{SC(ppoll), ARGS_ANY, 0, R_HOST, "the main, console and virtio-blk I/O threads wait for work (poll())"},
	{SC(epoll_pwait), ARGS_ANY, 0, R_HOST, "the vsock thread waits for host sockets (epoll_wait())"},
#endif
	{SC(epoll_ctl), ARGS_ANY, 0, R_HOST, "the vsock thread watches new and closed host sockets"},
	{SC(futex), ARGS_ANY, 0, R_ALL, "mutexes and condition variables between threads"},
	{SC(clock_gettime), ARGS_ANY, 0, R_ALL, "timeouts (the vDSO falls back to the system call under nested KVM)"},
	{SC(clock_nanosleep), ARGS_ANY, 0, R_HOST, "the console thread waits for the guest's UART"},
	/* Entropy. */
	{SC(getrandom), ARGS_ANY, 0, R_VCPU, "virtio-rng: the guest's entropy (served on the vCPU that notifies)"},
	/* Memory: the allocator, never executable. */
	{SC(mmap), ARGS_NO_EXEC, 0, R_ALL, "the allocator (never PROT_EXEC)"},
	{SC(mprotect), ARGS_NO_EXEC, 0, R_ALL, "the allocator's arenas (never PROT_EXEC)"},
	{SC(munmap), ARGS_ANY, 0, R_ALL, "the allocator gives memory back"},
	{SC(madvise), ARGS_ANY, 0, R_ALL, "the allocator gives pages back (MADV_DONTNEED)"},
#if defined(__aarch64__)
	/* Seen on arm64 (tests/arm64/run, a template's VMM stopping): a vCPU
	 * thread that ends empties its tcache (glibc's tcache_thread_shutdown),
	 * and a chunk of the main thread's heap freed there, merged into the
	 * heap's top, makes free() trim that heap with brk.  brk only moves the
	 * end of the heap, never executable; not seen on x86-64, where it stays
	 * a checkpoint call of the host threads (below). */
	{SC(brk), ARGS_ANY, 0, R_ALL, "free() on an ending vCPU thread trims the main heap (systrim)"},
#endif
	/* Threads and signals. */
	{SC(rt_sigprocmask), ARGS_ANY, 0, R_ALL, "threads block host signals; raise()"},
	{SC(rt_sigreturn), ARGS_ANY, 0, R_ALL, "return from the vCPU kick and stop-signal handlers"},
	{SC(restart_syscall), ARGS_ANY, 0, R_ALL, "the kernel resumes a sleep a signal interrupted"},
	{SC(tgkill), ARGS_OWN_PID, 0, R_HOST, "kick a vCPU out of KVM_RUN (pthread_kill); own threads only"},
	{SC(getpid), ARGS_ANY, 0, R_HOST, "pthread_kill names the process"},
	{SC(exit), ARGS_ANY, 0, R_ALL, "a thread ends"},
	{SC(exit_group), ARGS_ANY, 0, R_HOST, "the VMM ends"},
	{SC(seccomp), ARGS_ARG0, SECCOMP_SET_MODE_FILTER, R_HOST,
	 "each vCPU thread stacks its own, narrower filter (can only take rights away)"},
	/* Checkpoints (vm_checkpoint.c, on the control socket's request, in the
	 * main thread).  Only a jailed VMM has them with its filter: the jail's
	 * one writable directory (--checkpoint-dir) is where the files can go.
	 * Two groups, each left out as a whole by KOSA8_SECCOMP_OMIT and shown
	 * needed as a whole by tests/vm/seccomp-rules (a test per member would
	 * cost a VM boot each). */
#if defined(__x86_64__)
	{CK_IOC(KVM_GET_MP_STATE), R_HOST, "read a parked vCPU's state for a checkpoint"},
	{CK_IOC(KVM_GET_REGS), R_HOST, "the same: general registers"},
	{CK_IOC(KVM_GET_SREGS), R_HOST, "the same: segment and control registers"},
	{CK_IOC(KVM_GET_XSAVE), R_HOST, "the same: FPU/SSE/AVX (4 KiB area)"},
	{CK_IOC(KVM_GET_XSAVE2), R_HOST, "the same: a larger XSAVE area (AMX)"},
	{CK_IOC(KVM_GET_XCRS), R_HOST, "the same: XCR0"},
	{CK_IOC(KVM_GET_DEBUGREGS), R_HOST, "the same: debug registers"},
	{CK_IOC(KVM_GET_LAPIC), R_HOST, "the same: local APIC"},
	{CK_IOC(KVM_GET_MSRS), R_HOST, "the same: MSRs"},
	{CK_IOC(KVM_GET_VCPU_EVENTS), R_HOST, "the same: pending events"},
	{CK_IOC(KVM_GET_TSC_KHZ), R_HOST, "the same: TSC frequency"},
	{CK_IOC(KVM_GET_IRQCHIP), R_HOST, "read PIC and IOAPIC for a checkpoint"},
	{CK_IOC(KVM_GET_PIT2), R_HOST, "read the PIT for a checkpoint"},
	{CK_IOC(KVM_GET_CLOCK), R_HOST, "read kvmclock for a checkpoint"},
	{CK_IOC(KVM_GET_MSR_INDEX_LIST), R_HOST, "which MSRs to save (asked at the first checkpoint)"},
	{CK_IOC(KVM_CHECK_EXTENSION), R_HOST, "which optional vCPU records exist (XCRS, DEBUGREGS, XSAVE2)"},
#else /* vmm/arm64/accel_kvm.c: one-reg registers, the vGIC's attributes */
	{CK_IOC(KVM_GET_MP_STATE), R_HOST, "read a parked vCPU's state for a checkpoint (PSCI power state)"},
	{CK_IOC(KVM_GET_REG_LIST), R_HOST, "the same: which one-reg registers the vCPU has"},
	{CK_IOC(KVM_GET_ONE_REG), R_HOST, "the same: each register (core, FP/SIMD, system, timer, firmware)"},
	{CK_IOC(KVM_GET_DEVICE_ATTR), R_HOST, "read the GIC: distributor, redistributors, CPU interfaces"},
#endif
	{CK_IOC(KVM_GET_DIRTY_LOG), R_HOST, "pages the guest wrote since the last checkpoint (incremental memory)"},
	{CK_SC(openat), "create the checkpoint's files and the new disk delta; fsync the directory"},
#if defined(__x86_64__)
	{CK_SC(mkdir), "the checkpoint's temporary directory"},
#else
	{CK_SC(mkdirat), "the checkpoint's temporary directory (mkdir())"},
#endif
	{CK_SC(newfstatat), "the checkpoint directory must not exist; fstat of a new disk layer"},
#if defined(__x86_64__)
	{CK_SC(readlink), "realpath() of the new disk delta's path (the jail has no links)"},
#else
	{CK_SC(readlinkat), "realpath() of the new disk delta's path (the jail has no links)"},
#endif
	{CK_SC(ftruncate), "size the sparse memory file and the new delta"},
	{CK_SC(lseek), "SEEK_DATA/SEEK_HOLE: write only the guest pages that hold data"},
	{CK_SC(pread64), "read the new delta's header; /proc/self/pagemap (opened before the jail)"},
	{CK_SC(fsync), "the checkpoint's files, the frozen delta and their directories are durable"},
	{CK_SC(flock), "lock the new top delta, share the frozen one (other processes keep out)"},
	{CK_SC(renameat2), "the complete checkpoint is renamed into place (RENAME_NOREPLACE)"},
#if defined(__x86_64__)
	{CK_SC(rmdir), "remove the temporary directory of a checkpoint that failed"},
#else /* rmdir() is unlinkat(AT_FDCWD, path, AT_REMOVEDIR) */
	{"checkpoint-files", SCMP_SYS(unlinkat), ARGS_ARG2, AT_REMOVEDIR, R_HOST,
	 "remove the temporary directory of a checkpoint that failed (rmdir())"},
#endif
	{CK_SC(brk), "the state file is built in memory: malloc grows the heap"},
	{CK_SC(fcntl), "a live fork seals the frozen guest memory against writes (F_ADD_SEALS)"},
	{CK_SC(memfd_create), "a live fork of RAM restored from a file copies it into a memfd first"},
	/* The terminal, given back at exit. */
	{IOC(TCGETS), R_HOST, "isatty/tcgetattr on the console"},
	{IOC(TCSETSF), R_HOST, "restore the user's terminal (tcsetattr TCSAFLUSH)"},
};

static bool installed;
static const char *names[512];
/* Which filter the calling thread is under, for the report. */
static __thread bool vcpu_filtered;

/* Names for the report, resolved before the filter exists: the SIGSYS
 * handler must not allocate (the trapped call may come from malloc). */
static void resolve_names(void)
{
	for (int nr = 0; nr < (int)ARRAY_SIZE(names); nr++) {
		char *n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
		names[nr] = n ? n : NULL; /* kept for the life of the process */
	}
}

static void put(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

static void put_num(unsigned long v)
{
	char buf[24];
	int i = sizeof(buf);

	buf[--i] = 0;
	do
		buf[--i] = (char)('0' + v % 10);
	while ((v /= 10) && i > 0);
	put(buf + i);
}

static void put_hex(unsigned long v)
{
	char buf[20];
	int i = sizeof(buf);

	buf[--i] = 0;
	do
		buf[--i] = "0123456789abcdef"[v & 15];
	while ((v >>= 4) && i > 2);
	buf[--i] = 'x';
	buf[--i] = '0';
	put(buf + i);
}

static void put_sym(const char *what, unsigned long a)
{
	Dl_info d;

	put("  ");
	put(what);
	put(" ");
	put_hex(a);
	if (dladdr((void *)a, &d) && d.dli_fname) {
		put(" ");
		put(strrchr(d.dli_fname, '/') ? strrchr(d.dli_fname, '/') + 1 : d.dli_fname);
		put(" +");
		put_hex(a - (unsigned long)d.dli_fbase);
		if (d.dli_sname) {
			put(" ");
			put(d.dli_sname);
			put("+");
			put_hex(a - (unsigned long)d.dli_saddr);
		}
	}
	put("\n");
}

/* A frame record (previous fp, return address) at fp is read only when it
 * lies just above sp on the same stack: the walk stops at anything else. */
static bool frame_ok(const unsigned long *fp, unsigned long sp)
{
	unsigned long a = (unsigned long)fp;

	return a && !(a & 7) && a >= sp && a - sp < (256u << 10);
}

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	int nr = si->si_syscall;

	put("kosa8 vm: killed by seccomp: syscall ");
	put(nr >= 0 && nr < (int)ARRAY_SIZE(names) && names[nr] ? names[nr] : "?");
	put(" (");
	put_num((unsigned long)nr);
	put(vcpu_filtered ? ") on a vCPU thread\n" : ") on a host thread\n");
	{
		ucontext_t *u = uc;
#if defined(__aarch64__)
		unsigned long pc = u->uc_mcontext.pc, lr = u->uc_mcontext.regs[30];
		unsigned long sp = u->uc_mcontext.sp;
		unsigned long *fp = (unsigned long *)u->uc_mcontext.regs[29];
#else
		unsigned long pc = u->uc_mcontext.gregs[REG_RIP];
		unsigned long sp = (unsigned long)u->uc_mcontext.gregs[REG_RSP];
		unsigned long lr = *(unsigned long *)sp; /* the return address: glibc's wrappers are leaves */
		unsigned long *fp = (unsigned long *)u->uc_mcontext.gregs[REG_RBP];
#endif
		put_sym("pc", pc);
		put_sym("return", lr);
		/* The frame records, as far as they stay on this thread's
		 * stack above the trap and go up: a wrong pointer is not read. */
		for (int i = 0; i < 8 && frame_ok(fp, sp); i++) {
			put_sym("caller", fp[1]);
			sp = (unsigned long)(fp + 2);
			fp = (unsigned long *)fp[0];
		}
	}
	syscall(SYS_exit_group, VMM_SECCOMP_EXIT);
}

static bool omitted(const char *name)
{
	const char *list = getenv("KOSA8_SECCOMP_OMIT");
	size_t n = strlen(name);

	for (const char *p = list; p && *p;) {
		const char *end = strchrnul(p, ',');
		if ((size_t)(end - p) == n && strncmp(p, name, n) == 0)
			return true;
		p = *end ? end + 1 : end;
	}
	return false;
}

static int add_rule(scmp_filter_ctx ctx, const struct rule *r)
{
	switch (r->args) {
	case ARGS_IOCTL:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 1,
					SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, r->request));
	case ARGS_ARG0:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 1,
					SCMP_A0(SCMP_CMP_EQ, r->request));
	case ARGS_ARG2:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 1,
					SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, r->request));
	case ARGS_OWN_PID:
		/* The jail has no PID namespace of its own: without this, a taken-over
		 * device thread could signal any process of the jail's uid. */
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 1,
					SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (uint32_t)getpid()));
	case ARGS_NO_EXEC:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 1,
					SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	default:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, r->nr, 0);
	}
}

/* The sanitizer build's runtime needs more at exit (LeakSanitizer stops the
 * world with a tracer thread).  Never part of a release build. */
#if defined(__SANITIZE_ADDRESS__)
static const int sanitizer_extra[] = {
	SCMP_SYS(clone), SCMP_SYS(clone3), SCMP_SYS(ptrace), SCMP_SYS(wait4), SCMP_SYS(prctl),
	SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity), SCMP_SYS(getppid),
	SCMP_SYS(sigaltstack), SCMP_SYS(rt_sigaction), SCMP_SYS(openat), SCMP_SYS(newfstatat),
	SCMP_SYS(fstat), SCMP_SYS(lseek), SCMP_SYS(getdents64), SCMP_SYS(readlink),
	SCMP_SYS(open), SCMP_SYS(getdents), SCMP_SYS(gettid), SCMP_SYS(brk), SCMP_SYS(pread64),
	SCMP_SYS(mmap), SCMP_SYS(mprotect), SCMP_SYS(set_robust_list), SCMP_SYS(rseq),
	SCMP_SYS(nanosleep), SCMP_SYS(kill), SCMP_SYS(pipe2), SCMP_SYS(dup2), SCMP_SYS(dup),
	SCMP_SYS(set_tid_address), SCMP_SYS(setrlimit), SCMP_SYS(prlimit64), SCMP_SYS(ioctl),
	SCMP_SYS(uname), SCMP_SYS(sysinfo),
};
#endif

static int load(unsigned role, uint32_t tsync, const char **why)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
	int err = -ENOMEM;

	*why = "cannot build the seccomp filter";
	if (!ctx)
		return err;
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
		if (!(rules[i].roles & role) || omitted(rules[i].name))
			continue;
		if ((err = add_rule(ctx, &rules[i])) < 0)
			goto out;
	}
#if defined(__SANITIZE_ADDRESS__)
	for (size_t i = 0; i < ARRAY_SIZE(sanitizer_extra); i++)
		if ((err = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, sanitizer_extra[i], 0)) < 0)
			goto out;
#endif
	/* no_new_privs is set once, by vmm_seccomp_install (prctl is not allowed
	 * afterwards, when the vCPU filters are loaded). */
	if ((err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0)
		goto out;
	if (tsync && (err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)) < 0)
		goto out;
	*why = "the kernel refused the seccomp filter";
	err = seccomp_load(ctx);
out:
	seccomp_release(ctx);
	return err;
}

int vmm_seccomp_install(const char **why)
{
	struct sigaction sa;
	int err;

	resolve_names();
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0) {
		*why = "cannot install the SIGSYS handler";
		return -errno;
	}
	/* no_new_privs: needed to load a filter without CAP_SYS_ADMIN, and the
	 * VMM never gains privileges by exec anyway. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		*why = "cannot set no_new_privs";
		return -errno;
	}
	if ((err = load(R_ALL, 1, why)))
		return err;
	installed = true;
	return 0;
}

int vmm_seccomp_enter_vcpu(void)
{
	const char *why;

	if (!installed)
		return 0;
	vcpu_filtered = true;
	return load(R_VCPU, 0, &why);
}

void vmm_seccomp_print_rules(FILE *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
		const struct rule *r = &rules[i];
		char *sc = strncmp(r->name, "checkpoint-", 11) ? NULL :
			   seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, r->nr);
		fprintf(out, "%-24s %-10s %s%s%s\n", r->name,
			r->roles == R_ALL ? "all" : r->roles == R_VCPU ? "vcpu" : "host",
			sc ? sc : "", sc ? ": " : "", r->why);
		free(sc);
	}
}
