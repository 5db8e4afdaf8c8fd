/* The version kosa8 reports (kosa8 --version, the man pages).  The Makefile
 * defines these for this file only, so that a new commit rebuilds one
 * object; a build without them (no git tree) says "unknown". */
#include "cli/cmd_table.h"

#ifndef KOSA8_VERSION
#define KOSA8_VERSION "0.1.0"
#endif
#ifndef KOSA8_COMMIT
#define KOSA8_COMMIT "unknown"
#endif
#ifndef KOSA8_FLAVOUR
#define KOSA8_FLAVOUR "unknown"
#endif

const char *cli_version(void)
{
	return KOSA8_VERSION " (commit " KOSA8_COMMIT ", " KOSA8_FLAVOUR " build)";
}
