/* kosa8 vm: the options' help, software emulation where KVM cannot run
 * the guest, then the VMM's own run (vm_run.c). */
#include "cli/cmd_vm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "machine/machine.h"
#include "vmm/seccomp.h"
#include "vmm/vm.h"

/* ---- software emulation: re-run this command inside the test bed ---- */

int vm_find_testbed(char *buf, size_t len)
{
	const char *env = getenv("KOSA8_TESTBED");

	if (env && *env)
		return snprintf(buf, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	return kosa8_data_path("testbed/run", buf, len);
}

static int run_emulated(const struct vm_args *a, const char *reason)
{
	char testbed[PATH_MAX], self[PATH_MAX], kernel[PATH_MAX], initrd[PATH_MAX], disk[PATH_MAX];
	char restore[PATH_MAX], mem[32], cpus[16], cid[24], ids[24];
	const char *argv[34];
	int n = 0;

	if (vm_find_testbed(testbed, sizeof(testbed)) < 0) {
		fprintf(stderr, "kosa8: %s and the software-emulation helper (testbed/run) is not installed\n", reason);
		return VM_EXIT_ERROR;
	}
	if (a->restore_memfd >= 0) {
		fprintf(stderr, "kosa8: %s, and --restore-memfd cannot reach a helper VM\n", reason);
		return VM_EXIT_ERROR;
	}
	if (a->restore) {
		/* The checkpoint and a new disk delta are paths in the helper's view
		 * of this host; the disk need not exist yet. */
		if (!realpath("/proc/self/exe", self) || !realpath(a->restore, restore)) {
			fprintf(stderr, "kosa8: %s: not found\n", a->restore);
			return VM_EXIT_ERROR;
		}
		if (a->disk && a->disk[0] != '/' &&
		    (!getcwd(kernel, sizeof(kernel)) ||
		     snprintf(disk, sizeof(disk), "%s/%s", kernel, a->disk) >= (int)sizeof(disk))) {
			fprintf(stderr, "kosa8: %s: path too long\n", a->disk);
			return VM_EXIT_ERROR;
		}
		fprintf(stderr, "kosa8: warning: %s; running in a helper VM under software emulation (slow)\n", reason);
		argv[n++] = testbed;
		argv[n++] = "--";
		argv[n++] = self;
		argv[n++] = "vm";
		argv[n++] = "--no-emulate";
		argv[n++] = "--restore";
		argv[n++] = restore;
		goto common;
	}
	if (!realpath("/proc/self/exe", self) || !realpath(a->kernel, kernel) ||
	    (a->initrd && !realpath(a->initrd, initrd)) || (a->disk && !realpath(a->disk, disk))) {
		fprintf(stderr, "kosa8: %s: %s\n", a->initrd && access(a->initrd, F_OK) ? a->initrd : a->kernel,
			"file not found");
		return VM_EXIT_ERROR;
	}
	fprintf(stderr, "kosa8: warning: %s; running in a helper VM under software emulation (slow)\n", reason);
	snprintf(mem, sizeof(mem), "%lluK", (unsigned long long)(a->mem / KiB));
	snprintf(cpus, sizeof(cpus), "%d", a->cpus);
	argv[n++] = testbed;
	argv[n++] = "--";
	argv[n++] = self;
	argv[n++] = "vm";
	argv[n++] = "--no-emulate";
	if (a->no_seccomp)
		argv[n++] = "--no-seccomp";
	if (a->jail)
		argv[n++] = "--jail";
	if (a->jail_user) {
		snprintf(ids, sizeof(ids), "%u:%u", (unsigned)a->jail_uid, (unsigned)a->jail_gid);
		argv[n++] = "--jail-user";
		argv[n++] = ids;
	}
	argv[n++] = "--kernel";
	argv[n++] = kernel;
	if (a->initrd) {
		argv[n++] = "--initrd";
		argv[n++] = initrd;
	}
	argv[n++] = "--mem";
	argv[n++] = mem;
	argv[n++] = "--cpus";
	argv[n++] = cpus;
common:
	if (a->disk) {
		argv[n++] = a->disk_ro ? "--disk-ro" : "--disk";
		argv[n++] = a->restore && a->disk[0] == '/' ? a->disk : disk;
	}
	if (a->control) {
		argv[n++] = "--control";
		argv[n++] = a->control;
	}
	if (a->vsock) {
		/* The socket lives inside the helper VM: only commands run there reach it. */
		snprintf(cid, sizeof(cid), "%llu", (unsigned long long)a->cid);
		argv[n++] = "--vsock";
		argv[n++] = a->vsock;
		argv[n++] = "--cid";
		argv[n++] = cid;
	}
	if (a->cmdline) {
		argv[n++] = "--cmdline";
		argv[n++] = a->cmdline;
	}
	argv[n] = NULL;
	execv(testbed, (char *const *)argv);
	fprintf(stderr, "kosa8: cannot run %s: %s\n", testbed, strerror(errno));
	return VM_EXIT_ERROR;
}

int cmd_vm(int argc, char **argv)
{
	struct vm_config cfg;
	struct vm_args a;
	const char *why = NULL;

	if (vm_args_parse(argc, argv, &a, &why) < 0) {
		fprintf(stderr, "kosa8 vm: %s\n", why);
		return VM_EXIT_USAGE;
	}
	if (a.help) {
		cli_print_help(stdout, cli_find(cli_commands, "vm"), NULL);
		return 0;
	}
	if (a.seccomp_rules) {
		vmm_seccomp_print_rules(stdout);
		return 0;
	}
	if (vm_args_config(&a, &cfg, &why) < 0) {
		fprintf(stderr, "kosa8 vm: %s\n", why);
		return VM_EXIT_ERROR;
	}
	if (a.emulate == EMULATE_ALWAYS)
		return run_emulated(&a, "--emulate given");
	if (a.emulate == EMULATE_AUTO && (why = machine_kvm_unusable()))
		return run_emulated(&a, why);
	return vm_args_run(&a, &cfg, "kosa8 vm");
}
