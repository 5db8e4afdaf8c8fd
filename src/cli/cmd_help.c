/* kosa8 help, version and completion: the commands about kosa8 itself,
 * all answered from the command table. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd_table.h"

int cmd_help(int argc, char **argv)
{
	const struct cli_cmd *c = NULL, *s = NULL;
	bool man = false;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--man")) {
			man = true;
		} else if (!strcmp(argv[i], "--commands")) {
			for (c = cli_commands; c->name; c++)
				if (!c->hidden)
					puts(c->name);
			return 0;
		} else {
			fprintf(stderr, "kosa8 help: unknown option '%s'\n", argv[i]);
			return cli_usage_error("help", NULL);
		}
	}
	if (argc - i > 2 || (man && argc - i > 1))
		return cli_usage_error("help", NULL);
	if (i < argc && (!(c = cli_find(cli_commands, argv[i])) || c->hidden)) {
		fprintf(stderr, "kosa8 help: no command '%s' (see 'kosa8 --help')\n", argv[i]);
		return 2;
	}
	if (i + 1 < argc && !(s = cli_find(c->subs, argv[i + 1]))) {
		fprintf(stderr, "kosa8 help: '%s' has no command '%s'\n", c->name, argv[i + 1]);
		return 2;
	}
	if (man)
		return cli_print_man(stdout, c);
	if (c)
		cli_print_help(stdout, c, s);
	else
		cli_print_usage(stdout);
	return 0;
}

int cmd_version(int argc, char **argv)
{
	if (argc != 1)
		return cli_usage_error("version", NULL);
	printf("kosa8 %s\n", cli_version());
	return 0;
}

int cmd_completion(int argc, char **argv)
{
	if (argc != 2 || cli_print_completion(stdout, argv[1]) < 0)
		return cli_usage_error("completion", NULL);
	return 0;
}
