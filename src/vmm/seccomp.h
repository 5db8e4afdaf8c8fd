/* The VMM's system-call filters.
 *
 * Once set-up is over (KVM, guest memory, kernel, disk and sockets opened),
 * the VMM needs only a few dozen system calls, and a guest that takes over a
 * device thread should find no others.  Two filters, both built from one
 * table in seccomp.c (each allowed call with the reason it is needed):
 *
 *   process filter  every thread (main, device I/O, console input, vCPUs):
 *                   the union of what any of them needs after set-up
 *   vCPU filter     stacked on each vCPU thread when it starts: only what
 *                   running the guest needs (KVM_RUN, interrupts, console
 *                   output, wake-ups, the allocator)
 *
 * ioctl is allowed only for the KVM and terminal requests listed in the
 * table; mmap and mprotect never with PROT_EXEC.  Anything else traps: the
 * SIGSYS handler writes "kosa8 vm: killed by seccomp: syscall NAME (NR) on
 * a vCPU thread" (or "host thread") to stderr, then where the call came
 * from (the trap's address, its return address and the callers' frame
 * records, each with the library and symbol dladdr finds), and the process
 * exits with VMM_SECCOMP_EXIT (6).  The handler cannot be
 * replaced (rt_sigaction is not allowed), and a blocked SIGSYS is delivered
 * anyway by the kernel, so a trap always ends the process; trapping rather
 * than SECCOMP_RET_KILL_PROCESS is what lets it say which call it was.
 *
 * KOSA8_SECCOMP_OMIT=name[,name...] drops rules (by the names shown by
 * `kosa8 vm --seccomp-rules`): the test suite uses it to show that every
 * rule is needed.  It can only make the filter stricter. */
#ifndef KOSA8_VMM_SECCOMP_H
#define KOSA8_VMM_SECCOMP_H

#include <stdio.h>

/* Exit status of a VMM stopped by its filter (cli/cmd_vm.h lists the rest). */
#define VMM_SECCOMP_EXIT 6

/* Installs the process filter on every thread of the process (TSYNC).
 * Call after set-up and before the guest runs.  -errno, *why says what. */
int vmm_seccomp_install(const char **why);
/* Stacks the vCPU filter on the calling thread (a no-op, returning 0, when
 * the process filter is not installed). */
int vmm_seccomp_enter_vcpu(void);
/* Prints the table: name, roles, reason. */
void vmm_seccomp_print_rules(FILE *out);

#endif
