#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"

static const struct command commands[] = {
	{"run", "run a command in a new sandbox: kosa8 run [--rm] [--workspace DIR] -- CMD", cmd_run},
	{"create", "create a sandbox (disk over an image, workspace to copy in)", cmd_create},
	{"start", "boot a sandbox; it keeps running after this command exits", cmd_start},
	{"stop", "power a sandbox off", cmd_stop},
	{"rm", "remove a stopped sandbox (-f: stop it first)", cmd_rm},
	{"ps", "list sandboxes (--json)", cmd_ps},
	{"exec", "run a command in a running sandbox", cmd_exec},
	{"shell", "an interactive shell in a running sandbox", cmd_shell},
	{"cp", "copy files: NAME:PATH HOSTDIR, or HOSTPATH NAME:DIR", cmd_cp},
	{"diff", "the changes under a sandbox's /workspace, as a patch against the host folder", cmd_diff},
	{"export", "bring /workspace changes back: --patch FILE, --to DIR, or --apply to the workspace", cmd_export},
	{"logs", "a sandbox's console output", cmd_logs},
	{"checkpoint", "checkpoint a running sandbox: NAME [-m MESSAGE] -> id; rm NAME ID", cmd_checkpoint},
	{"checkpoints", "a sandbox's checkpoint tree: ids, times, parents, sizes", cmd_checkpoints},
	{"rewind", "put a running sandbox back to a checkpoint: NAME ID", cmd_rewind},
	{"fork", "new running sandboxes from a checkpoint: NAME [ID] --name NEW [--count K]", cmd_fork},
	{"vm", "boot a kernel in a microVM (low level: --kernel, --initrd, ...)", cmd_vm},
	{"disk", "create and inspect layered copy-on-write disks", cmd_disk},
	{"vmctl", "send pause, resume or checkpoint to a VM's control socket (low level)", cmd_vmctl},
	{"audit", "show, verify and prove the tamper-evident audit log", cmd_audit},
	{"image", "build, list and remove Debian root filesystem images", cmd_image},
	{"secret", "API keys the egress proxy adds for the guest (never in the VM)", cmd_secret},
	{"policy", "show a sandbox's egress policy, check HOST[:PORT] against it", cmd_policy},
	{"approvals", "list and answer network requests waiting for approval", cmd_approvals},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kosa8 [-v] COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nRun 'kosa8 COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
			log_set_level(LOG_INFO);
		} else if (!strcmp(argv[i], "-vv")) {
			log_set_level(LOG_DEBUG);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "kosa8: unknown option '%s' (see 'kosa8 --help')\n", argv[i]);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[i], "__supervise"))
		return cmd_supervise(argc - i, argv + i);
	for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
		if (!strcmp(argv[i], commands[c].name))
			return commands[c].run(argc - i, argv + i);
	}
	fprintf(stderr, "kosa8: unknown command '%s' (see 'kosa8 --help')\n", argv[i]);
	return 2;
}
