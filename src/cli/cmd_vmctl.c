/* kosa8 vmctl: sends one request to a running VMM's control socket
 * (kosa8 vm --control PATH; vmm/vm_control.h) and prints the reply as
 * "ok TEXT" or "error TEXT".  The low-level tool behind checkpoints; the
 * sandbox commands come on top of it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "vmm/vm_control.h"

/* COMMAND [ARG...] as a request: the words the text protocol had. */
static int parse_request(int argc, char **argv, struct vm_control_req *req)
{
	static const struct {
		const char *word;
		enum vm_control_op op;
		bool live;
	} words[] = {
		{"pause", VMCTL_PAUSE, false},   {"resume", VMCTL_RESUME, false},
		{"status", VMCTL_STATUS, false}, {"stop", VMCTL_STOP, false},
		{"checkpoint", VMCTL_CHECKPOINT, false},
		{"checkpoint-live", VMCTL_CHECKPOINT, true},
	};

	memset(req, 0, sizeof(*req));
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (strcmp(argv[0], words[i].word))
			continue;
		req->op = words[i].op;
		req->live = words[i].live;
		if (req->op != VMCTL_CHECKPOINT)
			return argc == 1 ? 0 : -EINVAL;
		if (argc < 2 || argc > 3 || strlen(argv[1]) >= sizeof(req->dir) ||
		    (argc == 3 && strlen(argv[2]) >= sizeof(req->top)))
			return -EINVAL;
		memcpy(req->dir, argv[1], strlen(argv[1]) + 1);
		if (argc == 3)
			memcpy(req->top, argv[2], strlen(argv[2]) + 1);
		return 0;
	}
	return -EINVAL;
}

int cmd_vmctl(int argc, char **argv)
{
	static struct vm_control_req req;
	struct vm_control_reply rep;
	int err, fd = -1;

	if (argc < 3)
		return cli_usage_error("vmctl", NULL);
	if (parse_request(argc - 2, argv + 2, &req)) {
		fprintf(stderr, "kosa8 vmctl: COMMAND is pause, resume, status, stop, "
				"checkpoint DIR [NEWTOP] or checkpoint-live DIR [NEWTOP]\n");
		return 2;
	}
	/* A checkpoint of a large guest takes a while, under emulation more. */
	err = vm_control_call(argv[1], &req, &rep, &fd, 600 * 1000);
	if (fd >= 0)
		close(fd); /* a live checkpoint's frozen memory: no fork here */
	if (err && err != -EREMOTEIO) {
		fprintf(stderr, "kosa8 vmctl: no answer from %s: %s\n", argv[1], rep.text);
		return 1;
	}
	printf("%s %s\n", err ? "error" : "ok", rep.text);
	return err ? 1 : 0;
}
