#include <stdio.h>

#include "cli/commands.h"

int cmd_audit(int argc, char **argv)
{
	fprintf(stderr, "kosa8 audit: not built yet\n");
	return 2;
}
