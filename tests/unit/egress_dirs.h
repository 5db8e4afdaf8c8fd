/* The egress tests' scratch folder: dir (a new /tmp/k8-TAG-XXXXXX) with
 * config/ (KOSA8_CONFIG_DIR, where the user's policy lives) and state/
 * (a sandbox's state directory), and no upstream CA file from the
 * environment.  egress_dirs_remove() deletes it with all it holds.
 * Include after <cmocka.h>. */
#ifndef KOSA8_TESTS_EGRESS_DIRS_H
#define KOSA8_TESTS_EGRESS_DIRS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char dir[64], cfgdir[128], statedir[128];

static int egress_dirs_make(const char *tag)
{
	snprintf(dir, sizeof(dir), "/tmp/k8-%s-XXXXXX", tag);
	assert_non_null(mkdtemp(dir));
	snprintf(cfgdir, sizeof(cfgdir), "%s/config", dir);
	snprintf(statedir, sizeof(statedir), "%s/state", dir);
	assert_int_equal(mkdir(cfgdir, 0700), 0);
	assert_int_equal(mkdir(statedir, 0700), 0);
	setenv("KOSA8_CONFIG_DIR", cfgdir, 1);
	unsetenv("KOSA8_UPSTREAM_CA_FILE");
	return 0;
}

static int egress_dirs_remove(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
