/* kosa8: the command line (cli_main.c), without the commands that need
 * heavy libraries, which it hands to kosa8-tools (tools.c). */
#include "cli/commands.h"

int main(int argc, char **argv)
{
	return cli_main(argc, argv);
}
