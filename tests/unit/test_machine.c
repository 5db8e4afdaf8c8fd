/* The helper machine's request file (src/machine/req.c): what the host
 * writes, the machine reads back exactly; what it must not take, it
 * refuses with a reason.  And where the machine's directory is
 * (machine_dir: KOSA8_MACHINE_DIR or the state directory's). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "machine/machine.h"

static void test_round_trip(void **state)
{
	char *argv[] = {"kosa8", "exec", "dev", "--", "sh", "-c", "echo 'a\nb' \x01\xff", "", NULL};
	char *env[] = {"HOME=/home/u", "EMPTY=", "X=a=b", "noequals", "=bad", NULL};
	struct machine_req r;
	char why[128], *buf;
	size_t len;

	assert_int_equal(machine_req_encode("/usr/bin/kosa8", "/work/x y", true, 45, 123, argv, env, &buf, &len), 0);
	assert_int_equal(machine_req_parse(buf, len, &r, why, sizeof(why)), 0);
	assert_string_equal(r.exe, "/usr/bin/kosa8");
	assert_string_equal(r.cwd, "/work/x y");
	assert_true(r.tty);
	assert_int_equal(r.rows, 45);
	assert_int_equal(r.cols, 123);
	assert_int_equal(r.argc, 8);
	for (int i = 0; i < 8; i++)
		assert_string_equal(r.argv[i], argv[i]);
	assert_null(r.argv[8]);
	/* Entries that are no NAME=VALUE are not sent. */
	assert_int_equal(r.envc, 3);
	assert_string_equal(r.env[2], "X=a=b");
	assert_null(r.env[3]);
	machine_req_free(&r);
	free(buf);
}

static void test_no_tty(void **state)
{
	char *argv[] = {"kosa8", "ps", NULL};
	struct machine_req r;
	char why[128], *buf;
	size_t len;

	assert_int_equal(machine_req_encode("/k", "/", false, 0, 0, argv, NULL, &buf, &len), 0);
	assert_int_equal(machine_req_parse(buf, len, &r, why, sizeof(why)), 0);
	assert_false(r.tty);
	assert_int_equal(r.envc, 0);
	machine_req_free(&r);
	free(buf);
}

/* Each bad request by its bytes (sizeof - 1: the literal's own NUL is not sent). */
#define REQ(s) {s, sizeof(s) - 1}
static void test_rejects(void **state)
{
	static const struct {
		const char *s;
		size_t len;
	} bad[] = {
		REQ(""),
		REQ("kosa8-machine-request 2\0exe\0/k\0cwd\0/\0arg\0k\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k"),  /* no final NUL */
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0"),   /* a key without value */
		REQ("kosa8-machine-request 1\0cwd\0/\0arg\0k\0"),         /* no exe */
		REQ("kosa8-machine-request 1\0exe\0/k\0arg\0k\0"),        /* no cwd */
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0"),        /* no command */
		REQ("kosa8-machine-request 1\0exe\0k\0cwd\0/\0arg\0k\0"), /* relative exe */
		REQ("kosa8-machine-request 1\0exe\0/k\0exe\0/j\0cwd\0/\0arg\0k\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0env\0NOEQ\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0env\0=v\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0tty\0 24 80\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0tty\00024 0\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0tty\00024 99999\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0tty\00024 80x\0"),
		REQ("kosa8-machine-request 1\0exe\0/k\0cwd\0/\0arg\0k\0what\0x\0"),
	};
	struct machine_req r;
	char why[128], buf[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(buf, bad[i].s, bad[i].len);
		why[0] = 0;
		assert_int_equal(machine_req_parse(buf, bad[i].len, &r, why, sizeof(why)), -EINVAL);
		assert_true(why[0] != 0);
		assert_null(r.argv);
	}
}

static void test_bounds(void **state)
{
	size_t n = MACHINE_REQ_MAX_ITEMS + 1, len;
	char **argv = calloc(n + 1, sizeof(char *)), *buf;

	assert_non_null(argv);
	for (size_t i = 0; i < n; i++)
		argv[i] = "a";
	/* The host refuses what the machine would. */
	assert_int_equal(machine_req_encode("/k", "/", false, 0, 0, argv, NULL, &buf, &len), -E2BIG);
	free(argv);
}

/* KOSA8_MACHINE_DIR names one machine for several state directories
 * (tests/machine/sandboxes): taken only absolute, and checked as the
 * default one is: the caller's own, 0700, not a link. */
static void test_dir(void **state)
{
	char tmp[] = "/tmp/kosa8-mdir.XXXXXX", want[256], link[256], buf[256], why[256];
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(tmp));
	snprintf(want, sizeof(want), "%s/state", tmp);
	setenv("KOSA8_STATE_DIR", want, 1);
	unsetenv("KOSA8_MACHINE_DIR");
	assert_int_equal(machine_dir(buf, sizeof(buf), false, why, sizeof(why)), 0);
	snprintf(want, sizeof(want), "%s/state/machine", tmp);
	assert_string_equal(buf, want);

	setenv("KOSA8_MACHINE_DIR", "rel/machine", 1);
	assert_int_equal(machine_dir(buf, sizeof(buf), true, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "not an absolute path"));

	snprintf(want, sizeof(want), "%s/shared", tmp);
	setenv("KOSA8_MACHINE_DIR", want, 1);
	assert_int_equal(machine_dir(buf, sizeof(buf), true, why, sizeof(why)), 0);
	assert_string_equal(buf, want);
	assert_int_equal(stat(want, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(st.st_uid, geteuid());
	/* Not made under the state directory. */
	snprintf(buf, sizeof(buf), "%s/state/machine", tmp);
	assert_int_not_equal(access(buf, F_OK), 0);

	assert_int_equal(chmod(want, 0755), 0);
	assert_int_equal(machine_dir(buf, sizeof(buf), true, why, sizeof(why)), -EPERM);
	assert_int_equal(chmod(want, 0700), 0);
	snprintf(link, sizeof(link), "%s/link", tmp);
	assert_int_equal(symlink(want, link), 0);
	setenv("KOSA8_MACHINE_DIR", link, 1);
	assert_int_equal(machine_dir(buf, sizeof(buf), true, why, sizeof(why)), -ELOOP);

	unsetenv("KOSA8_MACHINE_DIR");
	unsetenv("KOSA8_STATE_DIR");
	unlink(link);
	rmdir(want);
	rmdir(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_no_tty),
		cmocka_unit_test(test_rejects),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
