/* kosa8 machine start runs testbed/machine, whose QEMU daemon lives as
 * long as the machine: it must get none of the starting command's files.
 * An inherited descriptor kept whatever it named for the machine's whole
 * life: a caller's flock (a script's lock around `kosa8 run`, which then
 * never ended), a pipe a caller waits on for its end. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "shell_run.h"

static char kosa8[PATH_MAX], tmp[64];

static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len, "K='%s' T='%s'", kosa8, tmp);
}

static int setup(void **state)
{
	char self[PATH_MAX - 16], path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	snprintf(tmp, sizeof(tmp), "/tmp/kosa8-machine-start-XXXXXX");
	if (access(kosa8, X_OK) || !mkdtemp(tmp))
		return -1;
	snprintf(path, sizeof(path), "%s/state", tmp);
	setenv("KOSA8_STATE_DIR", path, 1);
	snprintf(path, sizeof(path), "%s/run", tmp);
	setenv("XDG_RUNTIME_DIR", path, 1);
	/* A stand-in for testbed/machine: lists the descriptors it got. */
	snprintf(path, sizeof(path), "%s/machine", tmp);
	setenv("KOSA8_MACHINE_SCRIPT", path, 1);
	return run("printf '#!/bin/sh\\nls /proc/$$/fd >\"%%s\"/fds\\nexit 1\\n' \"$T\" >\"$T/machine\" && "
		   "chmod +x \"$T/machine\"") ? -1 : 0;
}

static int teardown(void **state)
{
	return run("rm -rf \"$T\"") ? -1 : 0;
}

static void test_script_gets_only_stdio(void **state)
{
	/* Descriptors 7 (a held lock) and 8 (a pipe), not close-on-exec. */
	run("exec 7>\"$T/lock\"; flock 7; exec 8>\"$T/pipe-ish\"; \"$K\" machine start");
	/* dash keeps its own descriptors at 10 and up (the script's file):
	 * below that, only stdio may be open. */
	assert_int_equal(run("awk '$1 >= 3 && $1 < 10' \"$T/fds\" | tr '\\n' ' '"), 0);
	if (out[0])
		fail_msg("testbed/machine got the caller's descriptors: %s", out);
	assert_int_equal(run("grep -cx 2 \"$T/fds\""), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_script_gets_only_stdio),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
