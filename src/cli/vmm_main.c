/* kosa8-vmm: the VMM as its own executable, the one the supervisor runs for
 * each sandbox.  It takes `kosa8 vm`'s options (vm_run.c) but links none of
 * kosa8's other commands, so that it maps only what a VMM needs: no
 * OpenSSL, whose libraries kept 3.6 MiB of every VMM resident
 * (bench/results/memory.md).  It never falls back to software emulation:
 * `kosa8 vm` does that, and the supervisor runs only where KVM does. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/cmd_vm.h"
#include "vmm/seccomp.h"
#include "vmm/vm.h"

/* The stack of every thread the VMM starts (vCPUs, console input, vsock,
 * disk workers).  Measured: the most any of them had touched in a booted
 * sandbox was 28 KiB (bench/results/memory.md), and their deepest static
 * paths (disk layer writes) need tens of KiB; checkpoints and restores,
 * whose frames reach 70 KiB, run on the main thread.  glibc's default, 8
 * MiB, is also big enough for a transparent huge page: one run of the old
 * VMM had 2 MiB resident in one thread's stack.  Below 2 MiB none fits. */
#define VMM_THREAD_STACK (256 * 1024)

static void small_thread_stacks(void)
{
	pthread_attr_t at;

	if (pthread_attr_init(&at))
		return;
	if (!pthread_attr_setstacksize(&at, VMM_THREAD_STACK))
		pthread_setattr_default_np(&at);
	pthread_attr_destroy(&at);
}

int main(int argc, char **argv)
{
	struct vm_config cfg;
	struct vm_args a;
	const char *why = NULL;

	/* One malloc arena, not one per thread that allocates: the four
	 * extra arenas of a sandbox's VMM (vCPU, console input, vsock, disk
	 * threads) kept 48 KiB resident, and with them 90 KiB in all
	 * (bench/results/memory.md).  No thread allocates on a hot path
	 * (disk requests use chains made at start, vsock allocates per
	 * connection), so they do not contend for the one lock. */
	mallopt(M_ARENA_MAX, 1);
	small_thread_stacks();
	if (vm_args_parse(argc, argv, &a, &why) < 0) {
		fprintf(stderr, "kosa8-vmm: %s\n", why);
		return VM_EXIT_USAGE;
	}
	if (a.help) {
		printf("usage: kosa8-vmm [OPTION]...\n"
		       "The microVM monitor kosa8 runs for each sandbox; its options are\n"
		       "kosa8 vm's (see 'kosa8 vm --help'), without software emulation.\n");
		return 0;
	}
	if (a.seccomp_rules) {
		vmm_seccomp_print_rules(stdout);
		return 0;
	}
	if (a.emulate == EMULATE_ALWAYS) {
		fprintf(stderr, "kosa8-vmm: --emulate is kosa8 vm's; kosa8-vmm runs on /dev/kvm only\n");
		return VM_EXIT_USAGE;
	}
	if (vm_args_config(&a, &cfg, &why) < 0) {
		fprintf(stderr, "kosa8-vmm: %s\n", why);
		return VM_EXIT_ERROR;
	}
	return vm_args_run(&a, &cfg, "kosa8-vmm");
}
