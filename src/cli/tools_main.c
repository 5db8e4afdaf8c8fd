/* kosa8-tools: the same command line as kosa8 (cli_main.c), linked with
 * the commands kosa8 leaves out for their libraries (tools.c): kosa8 execs
 * it for `ui`, `image import|export` and the default image's import. */
#include "cli/commands.h"

int main(int argc, char **argv)
{
	return cli_main(argc, argv);
}
