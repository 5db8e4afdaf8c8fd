/* kosa8 and kosa8-tools: the command line (cli_main.c).  kosa8 is linked
 * without the commands that need heavy libraries and hands them to
 * kosa8-tools, linked with them (tools.c). */
#include "cli/commands.h"

int main(int argc, char **argv)
{
	return cli_main(argc, argv);
}
