/* kosa8-tools: the commands that need libmicrohttpd (`kosa8 ui`), libcurl
 * and libarchive (`kosa8 image import|export`, the default image from
 * $KOSA8_IMAGE_SOURCE).  Those libraries and what they pull in (GnuTLS,
 * Kerberos, LDAP, libxml2, ICU: 35 of the 47 shared objects kosa8 used to
 * map) cost every process that links them their loading: 27 ms of CPU
 * against 18 ms for a program with the rest of kosa8's libraries and 3 ms
 * with libc alone (perf stat, 2026-12-07), 0.3 s more per command in the
 * emulated helper VM.  Every other command -- run, exec, ps, the supervisor
 * of each sandbox -- needs none of them.  So, as git leaves libcurl to
 * git-remote-http, the kosa8 binary is linked without them and hands those
 * commands to kosa8-tools, installed beside it (or in ../lib/kosa8), which
 * runs the same command table.  Their entry points are weak in commands.h:
 * NULL in kosa8, linked in kosa8-tools (its Makefile rule names their
 * objects). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"

char **cli_argv;

static int tools_path(char *buf, size_t len)
{
	char self[PATH_MAX];
	const char *base;

	if (!realpath("/proc/self/exe", self))
		return -errno;
	/* kosa8-tools without the command it was asked for: not a loop. */
	base = strrchr(self, '/');
	if (!strcmp(base ? base + 1 : self, KOSA8_TOOLS_FILE))
		return -ENOSYS;
	return kosa8_helper_path(self, KOSA8_TOOLS_FILE, buf, len);
}

static int no_tools(int err)
{
	fprintf(stderr, "kosa8: %s: %s (it runs 'kosa8 ui' and 'kosa8 image import|export'; "
		"it is installed beside kosa8 or in ../lib/kosa8)\n", KOSA8_TOOLS_FILE,
		err == -ENOSYS ? "does not have this command" : "not found");
	return 127;
}

int cli_exec_tools(void)
{
	char path[PATH_MAX], self[PATH_MAX];
	int err = tools_path(path, sizeof(path));

	if (err || !cli_argv)
		return no_tools(err ? err : -ENOENT);
	/* The console runs kosa8 commands (__ui-state, approvals), forwarded
	 * into the helper machine where KVM is missing: this kosa8, not
	 * kosa8-tools, whose installed place has no data folders beside it. */
	if (realpath("/proc/self/exe", self))
		setenv(KOSA8_CLI_ENV, self, 1);
	execv(path, cli_argv);
	fprintf(stderr, "kosa8: cannot run %s: %s\n", path, strerror(errno));
	return 127;
}

int cli_image_from_source(const char *cmd, const char *name, char *path, size_t len)
{
	const char *src = getenv("KOSA8_IMAGE_SOURCE");
	char tools[PATH_MAX];
	const char *argv[] = {tools, "__image-from-source", cmd, name, NULL};
	int err;

	if (!src || !*src)
		return -ENOENT;
	if ((err = tools_path(tools, sizeof(tools))))
		return no_tools(err), -ENOENT;
	/* Its errors are said on stderr; a failure is -EIO here. */
	return run_for_last_line_shown(argv, path, len) ? -EIO : 0;
}
