/* kosa8 ui: the local web console (src/ui/, docs/console.md).  Serves
 * until SIGINT or SIGTERM; prints the one address that opens it, with its
 * secret token. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "ui/state.h"
#include "ui/ui.h"

/* 0, or -EINVAL after saying which word is wrong. */
static int parse(int argc, char **argv, struct ui_opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		unsigned long p;

		if (!strcmp(a, "--no-notify")) {
			o->notify = false;
		} else if (!strcmp(a, "--listen") && v) {
			o->listen = argv[++i];
		} else if (!strcmp(a, "--port") && v) {
			errno = 0;
			p = strtoul(v, &end, 10);
			if (errno || *end || !*v || p < 1 || p > 65535) {
				fprintf(stderr, "kosa8 ui: --port takes 1 to 65535, not '%s'\n", v);
				return -EINVAL;
			}
			o->port = (uint16_t)p;
			i++;
		} else {
			fprintf(stderr, "kosa8 ui: '%s' is not an option of ui%s\n", a, v ? "" : " (or lacks its value)");
			return -EINVAL;
		}
	}
	return 0;
}

int cmd_ui(int argc, char **argv)
{
	struct ui_opts o = {.notify = true};
	const char *why_machine;
	struct ui *u;
	sigset_t set;
	char why[300];
	int sig, err;

	if (parse(argc, argv, &o))
		return cli_usage_error("ui", NULL);
	/* The supervisors' control sockets are then in the machine's own
	 * /run: the console reads and acts through commands forwarded there. */
	if ((why_machine = cli_machine_why())) {
		o.remote = true;
		fprintf(stderr, "kosa8 ui: sandboxes run in kosa8's helper machine here (%s); the console reads "
				"them through it\n", why_machine);
	}
	/* The signals wait for sigwait here, not in the server's threads. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((err = ui_start(&o, &u, why, sizeof(why)))) {
		fprintf(stderr, "kosa8 ui: %s\n", why);
		return err == -EPERM ? 2 : 1;
	}
	printf("kosa8 ui: open http://127.0.0.1:%u/?token=%s\n"
	       "  (the token is the key to your sandboxes' approvals: do not share the address; Ctrl-C stops)\n",
	       ui_auth(u)->port, ui_auth(u)->token);
	fflush(stdout);
	sigwait(&set, &sig);
	ui_stop(u);
	return 0;
}
