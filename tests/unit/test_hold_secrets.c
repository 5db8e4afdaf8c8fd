/* Processes that hold secrets are not dumpable (issue 23 item 9): every
 * loader of a secret value, the audit signing key or a CA key marks its
 * process (common/util.h process_hold_secrets), and so does the
 * supervisor before anything else.  Each case runs in a child of its own,
 * which reports PR_GET_DUMPABLE afterwards. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "child_report.h"

#include "audit/sign.h"
#include "common/util.h"
#include "proxy/ca.h"
#include "proxy/secrets.h"
#include "supervisor/supervisor.h"

static char dir[64];

static int setup(void **state)
{
	char p[128];

	strcpy(dir, "/tmp/k8hold-XXXXXX");
	assert_non_null(mkdtemp(dir));
	setenv("KOSA8_STATE_DIR", dir, 1);
	snprintf(p, sizeof(p), "%s/config", dir);
	mkdir(p, 0700);
	setenv("KOSA8_CONFIG_DIR", p, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Runs what in a child, dumpable before it (as a user's process is): its
 * result, and whether the child was still dumpable after it. */
static int start_dumpable(void *what)
{
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	return ((int (*)(void))what)();
}

static int in_child(int (*what)(void), int *dumpable)
{
	return run_in_child(start_dumpable, (void *)what, dumpable);
}

static int audit_key(void)
{
	char kd[128];
	EVP_PKEY *k = NULL;
	int err;

	snprintf(kd, sizeof(kd), "%s/keys", dir);
	err = audit_key_load_or_create(kd, &k);
	EVP_PKEY_free(k);
	return err;
}

static int ca_key(void)
{
	struct egress_ca *ca = NULL;
	int err = egress_ca_open(dir, "t", &ca);

	egress_ca_free(ca);
	return err;
}

static int secret_values(void)
{
	struct secret_set *set = NULL;
	int err = secret_set_load(NULL, 0, dir, &set);

	secret_set_free(set);
	return err;
}

/* A start of a sandbox that does not exist: it fails, after the mark. */
static int supervisor(void)
{
	return supervisor_main("/nonexistent/kosa8", "no-such-sandbox", -1, -1);
}

static void test_audit_key_loader(void **state)
{
	int d;

	assert_int_equal(in_child(audit_key, &d), 0);
	assert_int_equal(d, 0);
}

static void test_ca_key_loader(void **state)
{
	int d;

	assert_int_equal(in_child(ca_key, &d), 0);
	assert_int_equal(d, 0);
}

static void test_secret_loader(void **state)
{
	int d;

	assert_int_equal(in_child(secret_values, &d), 0);
	assert_int_equal(d, 0);
}

static void test_supervisor(void **state)
{
	int d;

	assert_true(in_child(supervisor, &d) < 0);
	assert_int_equal(d, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_audit_key_loader),
		cmocka_unit_test(test_ca_key_loader),
		cmocka_unit_test(test_secret_loader),
		cmocka_unit_test(test_supervisor),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
