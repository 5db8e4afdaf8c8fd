/* The command line's dispatch: global options, the command table, --help,
 * the helper machine; main() of kosa8 and of kosa8-tools (tools.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/log.h"

/* The options before COMMAND are cli_global_opts (cmd_table.c). */
int cli_main(int argc, char **argv)
{
	const struct cli_cmd *cmd, *sub;
	bool no_emulate = false;
	int i = 1, status;
	const char *base = strrchr(argv[0], '/');

	cli_argv = argv;

	/* containerd and Docker call a runtime by its path, with runc's words. */
	if (!strcmp(base ? base + 1 : argv[0], "kosa8-runc"))
		return cmd_oci(argc, argv);

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
			log_set_level(LOG_INFO);
		} else if (!strcmp(argv[i], "-vv")) {
			log_set_level(LOG_DEBUG);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			cli_print_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--no-emulate")) {
			no_emulate = true;
		} else if (!strcmp(argv[i], "--version")) {
			printf("kosa8 %s\n", cli_version());
			return 0;
		} else {
			fprintf(stderr, "kosa8: unknown option '%s' (see 'kosa8 --help')\n", argv[i]);
			return 2;
		}
	}
	if (i >= argc) {
		cli_print_usage(stderr);
		return 2;
	}
	cmd = cli_find(cli_commands, argv[i]);
	if (!cmd) {
		fprintf(stderr, "kosa8: unknown command '%s' (see 'kosa8 --help')\n", argv[i]);
		return 2;
	}
	/* Every command's --help, here, so that none can miss it. */
	if (!cmd->hidden && cli_wants_help(cmd, argc - i, argv + i, &sub)) {
		cli_print_help(stdout, cmd, sub);
		return 0;
	}
	if (cli_machine_dispatch(cmd->name, argc, argv, no_emulate, &status))
		return status;
	if (!cmd->run) /* one of kosa8-tools' (tools.c) */
		return cli_exec_tools();
	return cmd->run(argc - i, argv + i);
}
