/* A private temporary directory for one test binary, as its cmocka group
 * fixtures: tmp_setup makes /tmp/kosa8-<binary>-XXXXXX and names it in
 * `tmp`, tmp_teardown removes it with everything in it.  Include after
 * <cmocka.h>. */
#ifndef KOSA8_TESTS_TMP_DIR_H
#define KOSA8_TESTS_TMP_DIR_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static char tmp[64];

static int tmp_setup(void **state)
{
	snprintf(tmp, sizeof(tmp), "/tmp/kosa8-%.20s-XXXXXX", program_invocation_short_name);
	return mkdtemp(tmp) ? 0 : -1;
}

static int tmp_teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes text into path, replacing it (a test's input file). */
static inline void tmp_put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

#endif
