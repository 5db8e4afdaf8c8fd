/* The OCI runtime's container state (oci/state.h): ids, which command may
 * run in which status (runc's rules), the state file's round trip and its
 * refusals, a dead or reused monitor pid read as stopped, runc's state
 * JSON, and signal names. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "oci/state.h"
#include "tmp_dir.h"

static void test_ids(void **state)
{
	char big[OCI_ID_MAX + 2], dir[256];

	assert_true(oci_id_valid("abc"));
	assert_true(oci_id_valid("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_true(oci_id_valid("my_ctr+1.v-2"));
	assert_false(oci_id_valid(""));
	assert_false(oci_id_valid("."));
	assert_false(oci_id_valid(".."));
	assert_false(oci_id_valid("a/b"));
	assert_false(oci_id_valid("a b"));
	assert_false(oci_id_valid("a\n"));
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_false(oci_id_valid(big));
	big[OCI_ID_MAX] = 0;
	assert_true(oci_id_valid(big));
	assert_int_equal(oci_container_dir("/run/x", "../etc", dir, sizeof(dir)), -EINVAL);
	assert_int_equal(oci_container_dir("/run/x", "c1", dir, sizeof(dir)), 0);
	assert_string_equal(dir, "/run/x/c1");
}

static void test_transitions(void **state)
{
	/* rows: creating, created, running, stopped; columns: start, kill, delete, delete --force, exec */
	static const bool ok[4][5] = {
		{ false, false, false, true, false },
		{ true, true, true, true, false },
		{ false, true, false, true, true },
		{ false, false, true, true, false },
	};
	char why[200];

	for (int s = 0; s < 4; s++)
		for (int op = 0; op < 5; op++) {
			why[0] = 0;
			int rc = oci_check_op((enum oci_status)s, (enum oci_op)op, why, sizeof(why));
			if ((rc == 0) != ok[s][op])
				fail_msg("status %s op %d: got %d (%s)", oci_status_name(s), op, rc, why);
			if (rc)
				assert_non_null(strstr(why, oci_status_name(s)));
		}
	oci_check_op(OCI_RUNNING, OCI_OP_DELETE, why, sizeof(why));
	assert_non_null(strstr(why, "--force"));
	assert_int_equal(oci_check_op(OCI_STOPPED, OCI_OP_KILL, why, sizeof(why)), -ESRCH);
	/* what containerd's shim matches to take the process as gone */
	assert_non_null(strstr(why, "container not running"));
}

static void test_round_trip(void **state)
{
	struct oci_state st = { .status = OCI_RUNNING, .pid = getpid(), .exit_status = 0, .created = 1700000000 }, back;
	char *text, want[512];
	cJSON *j;

	st.pid_start = oci_pid_start(getpid());
	assert_true(st.pid_start > 0);
	strcpy(st.id, "c1");
	strcpy(st.bundle, "/b");
	strcpy(st.sandbox, "oci-0011");
	st.annotations = cJSON_Parse("{\"io.kosa8.allow\":\"example.com\"}");
	assert_int_equal(oci_state_save(tmp, &st), 0);
	assert_int_equal(oci_state_load(tmp, &back), 0);
	assert_string_equal(back.id, "c1");
	assert_string_equal(back.sandbox, "oci-0011");
	assert_int_equal(back.status, OCI_RUNNING);
	assert_int_equal(back.pid_start, st.pid_start);
	assert_int_equal(oci_state_now(&back), OCI_RUNNING);
	j = oci_state_json(&back);
	text = cJSON_PrintUnformatted(j);
	snprintf(want, sizeof(want), "{\"ociVersion\":\"1.0.2\",\"id\":\"c1\",\"pid\":%d,\"status\":\"running\","
		 "\"bundle\":\"/b\",\"created\":\"2023-11-14T22:13:20Z\",\"owner\":\"\","
		 "\"annotations\":{\"io.kosa8.allow\":\"example.com\"}}", (int)getpid());
	assert_string_equal(text, want);
	free(text);
	cJSON_Delete(j);
	oci_state_free(&back);
	oci_state_free(&st);
}

static void write_state(const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/state.json", tmp);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

static void test_bad_files(void **state)
{
	static const char *const bad[] = {
		"", "[]", "{\"id\":\"../x\",\"bundle\":\"/b\",\"sandbox\":\"s\",\"status\":\"running\",\"pid\":1,"
		"\"pid_start\":1,\"exit_status\":0,\"created\":1}",
		"{\"id\":\"c\",\"bundle\":\"/b\",\"sandbox\":\"s\",\"status\":\"paused\",\"pid\":1,"
		"\"pid_start\":1,\"exit_status\":0,\"created\":1}",
		"{\"id\":\"c\",\"bundle\":\"/b\",\"sandbox\":\"s\",\"status\":\"running\",\"pid\":-1,"
		"\"pid_start\":1,\"exit_status\":0,\"created\":1}",
		"{\"id\":\"c\",\"bundle\":\"/b\",\"sandbox\":\"s\",\"status\":\"running\",\"pid\":1,"
		"\"pid_start\":1,\"exit_status\":300,\"created\":1}",
		"{\"id\":\"c\",\"bundle\":\"/b\",\"sandbox\":\"s\",\"status\":\"running\",\"pid\":1,"
		"\"pid_start\":1,\"exit_status\":0,\"created\":1,\"annotations\":[]}",
	};
	struct oci_state st;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_state(bad[i]);
		if (oci_state_load(tmp, &st) != -EINVAL)
			fail_msg("accepted: %s", bad[i]);
		oci_state_free(&st);
	}
}

/* A monitor that exited (or a pid that now names another process) means
 * stopped, whatever the file says. */
static void test_dead_monitor(void **state)
{
	struct oci_state st = { .status = OCI_RUNNING };
	int ws, p[2];
	char c;

	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0)
		_exit(read(p[0], &c, 1) == 1 ? 0 : 1);
	st.pid = pid;
	st.pid_start = oci_pid_start(pid);
	assert_true(st.pid_start > 0);
	assert_int_equal(oci_state_now(&st), OCI_RUNNING);
	assert_int_equal(write(p[1], "x", 1), 1);
	waitpid(pid, &ws, 0);
	close(p[0]);
	close(p[1]);
	assert_int_equal(oci_state_now(&st), OCI_STOPPED);
	st.pid = getpid();
	st.pid_start = oci_pid_start(getpid()) + 1;
	assert_int_equal(oci_state_now(&st), OCI_STOPPED);
	st.pid_start--;
	assert_int_equal(oci_state_now(&st), OCI_RUNNING);
	st.status = OCI_STOPPED;
	assert_int_equal(oci_state_now(&st), OCI_STOPPED);
}

static void test_signals(void **state)
{
	assert_int_equal(oci_signal_parse("KILL"), SIGKILL);
	assert_int_equal(oci_signal_parse("SIGTERM"), SIGTERM);
	assert_int_equal(oci_signal_parse("sigusr1"), SIGUSR1);
	assert_int_equal(oci_signal_parse("9"), 9);
	assert_int_equal(oci_signal_parse("15"), 15);
	assert_int_equal(oci_signal_parse("0"), -EINVAL);
	assert_int_equal(oci_signal_parse("99"), -EINVAL);
	assert_int_equal(oci_signal_parse("9x"), -EINVAL);
	assert_int_equal(oci_signal_parse("SIG"), -EINVAL);
	assert_int_equal(oci_signal_parse("NOPE"), -EINVAL);
	assert_int_equal(oci_signal_parse(""), -EINVAL);
}

/* Two holders of the lock never overlap. */
static void test_lock(void **state)
{
	int fd = oci_lock(tmp), p[2], ws;
	char c = 0;
	pid_t pid;

	assert_true(fd >= 0);
	assert_int_equal(pipe(p), 0);
	if ((pid = fork()) == 0) {
		close(fd);   /* the parent's lock is the parent's */
		int l = oci_lock(tmp);
		(void)!write(p[1], "x", 1);
		_exit(l >= 0 ? 0 : 1);
	}
	close(p[1]);
	usleep(200 * 1000);
	struct timeval tv = { 0, 0 };
	fd_set r;
	FD_ZERO(&r);
	FD_SET(p[0], &r);
	assert_int_equal(select(p[0] + 1, &r, NULL, NULL, &tv), 0);   /* still waiting */
	close(fd);
	assert_int_equal(read(p[0], &c, 1), 1);
	waitpid(pid, &ws, 0);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	close(p[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids),
		cmocka_unit_test(test_transitions),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_dead_monitor),
		cmocka_unit_test(test_signals),
		cmocka_unit_test(test_lock),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
