/* kosa8 vmctl: sends one command to a running VMM's control socket
 * (kosa8 vm --control PATH) and prints the answer.  The low-level tool
 * behind checkpoints; the sandbox commands come on top of it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "vmm/vm.h"

int cmd_vmctl(int argc, char **argv)
{
	char line[4096], answer[1024];
	size_t n = 0;
	int err;

	if (argc < 3)
		return cli_usage_error("vmctl", NULL);
	for (int i = 2; i < argc; i++) {
		size_t l = strlen(argv[i]);
		if (strchr(argv[i], '\n') || n + l + 2 > sizeof(line)) {
			fprintf(stderr, "kosa8 vmctl: command too long or with a newline\n");
			return 2;
		}
		memcpy(line + n, argv[i], l);
		n += l;
		line[n++] = i + 1 < argc ? ' ' : '\n';
	}
	line[n - 1] = '\0';
	/* A checkpoint of a large guest takes a while, under emulation more. */
	err = vm_control_call(argv[1], line, answer, sizeof(answer), 600 * 1000);
	if (err && err != -EREMOTEIO) {
		fprintf(stderr, "kosa8 vmctl: no answer from %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	puts(answer);
	return err ? 1 : 0;
}
