#include <stdio.h>

#include "cli/commands.h"

int cmd_vm(int argc, char **argv)
{
	fprintf(stderr, "kosa8 vm: not built yet\n");
	return 2;
}
