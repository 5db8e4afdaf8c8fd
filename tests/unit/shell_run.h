/* The CLI tests' one way to run a shell line against the built kosa8.
 * Include after <cmocka.h>.  The test file defines shell_vars(), which
 * writes the variables its lines use ("K='...'; D='...'"). */
#ifndef KOSA8_TESTS_SHELL_RUN_H
#define KOSA8_TESTS_SHELL_RUN_H

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static char out[1 << 17];

static void shell_vars(char *buf, size_t len);

/* Runs "VARS; (LINE) </dev/null 2>&1"; its output (cut at sizeof(out) - 1
 * bytes) in `out`, its exit status returned (128 when it did not exit). */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
	char vars[2 * PATH_MAX + 512], cmd[8192], full[sizeof(vars) + sizeof(cmd) + 32];
	va_list ap;
	FILE *p;
	size_t n;
	int st;

	/* The CLI's own checks, here: never in a helper machine (docs/machine.md). */
	setenv("KOSA8_MACHINE", "never", 1);
	shell_vars(vars, sizeof(vars));
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	snprintf(full, sizeof(full), "%s; (%s) </dev/null 2>&1", vars, cmd);
	assert_non_null(p = popen(full, "r"));
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The CLI it runs and this process see the same kosa8 folders, under
 * root: cfg/, state/ and run/ (made by whoever needs them). */
static inline void shell_use_dirs(const char *root)
{
	char sub[PATH_MAX];

	snprintf(sub, sizeof(sub), "%s/cfg", root);
	setenv("KOSA8_CONFIG_DIR", sub, 1);
	snprintf(sub, sizeof(sub), "%s/state", root);
	setenv("KOSA8_STATE_DIR", sub, 1);
	snprintf(sub, sizeof(sub), "%s/run", root);
	setenv("XDG_RUNTIME_DIR", sub, 1);
}

#endif
