/* The console log's bound (src/supervisor/console_log.c, issue 23 item
 * 4): a writer at full speed through the pipe the VMM gets, far past the
 * limit; the host keeps console.log and one console.log.1, each within
 * the limit, and the newest bytes are in console.log, whole. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "supervisor/console_log.h"

#define MAX (64 * 1024)

static char dir[64], path[128], old[136];

static int setup(void **state)
{
	strcpy(dir, "/tmp/k8cons-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/console.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static off_t size_of(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* 16 MiB from a child process (as the VMM writes), 256 times the limit. */
static void test_flood_rotates(void **state)
{
	struct console_log *c = NULL;
	char line[100], tail[64];
	uint8_t *buf = NULL;
	size_t len = 0;
	int wfd;
	pid_t pid;

	assert_int_equal(console_log_start(path, MAX, &c, &wfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < 16 * 1024 * 1024 / (int)sizeof(line); i++) {
			memset(line, 'x', sizeof(line));
			snprintf(line, sizeof(line), "line %08d ", i);
			line[sizeof(line) - 1] = '\n';
			if (write_all(wfd, line, sizeof(line)))
				_exit(1);
		}
		_exit(0);
	}
	close(wfd);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	console_log_stop(c);
	assert_true(size_of(path) > 0 && size_of(path) <= MAX);
	assert_true(size_of(old) > 0 && size_of(old) <= MAX);
	/* The newest line is the last in console.log. */
	assert_int_equal(read_file(path, MAX, &buf, &len), 0);
	snprintf(tail, sizeof(tail), "line %08d ", 16 * 1024 * 1024 / 100 - 1);
	assert_true(len >= 100);
	assert_memory_equal(buf + len - 100, tail, strlen(tail));
	free(buf);
}

/* A restart appends to what is there, and the bound counts it. */
static void test_restart_appends(void **state)
{
	struct console_log *c = NULL;
	char chunk[MAX / 2];
	int wfd;

	unlink(path);
	unlink(old);
	memset(chunk, 'a', sizeof(chunk));
	for (int run = 0; run < 3; run++) {
		assert_int_equal(console_log_start(path, MAX, &c, &wfd), 0);
		assert_int_equal(write_all(wfd, chunk, sizeof(chunk)), 0);
		close(wfd);
		console_log_stop(c);
	}
	/* 3 halves: two in the old file, the third new. */
	assert_int_equal(size_of(old), MAX);
	assert_int_equal(size_of(path), MAX / 2);
}

/* console.log as a link somewhere else is not followed. */
static void test_symlink_refused(void **state)
{
	struct console_log *c = NULL;
	char target[140];
	int wfd;

	unlink(path);
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(console_log_start(path, MAX, &c, &wfd), -ELOOP);
	assert_int_equal(size_of(target), -1);
	unlink(path);
}

/* The supervisor's own log: its stderr is the file (no pipe); writing
 * 4 MiB with a check after each 4 KiB (the event loop checks once a
 * second) leaves the file and one .1, each within the limit plus one
 * chunk, the newest line last; stdout follows.  Runs in a child: it
 * changes stderr. */
static int own_log_child(void)
{
	char line[64], other[140];
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0600), rotations = 0, r;

	if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
		return 10;
	close(fd);
	/* Another file's name: not ours, left alone. */
	snprintf(other, sizeof(other), "%s/other.log", dir);
	for (int i = 0; i < 4 * 1024 * 1024 / (int)sizeof(line); i++) {
		memset(line, 'y', sizeof(line));
		snprintf(line, sizeof(line), "line %08d ", i);
		line[sizeof(line) - 1] = '\n';
		if (write_all(STDERR_FILENO, line, sizeof(line)))
			return 11;
		if (i % (4096 / sizeof(line)))
			continue;
		if (console_log_bound_stderr(other, MAX) != 0)
			return 12;
		if ((r = console_log_bound_stderr(path, MAX)) < 0)
			return 13;
		rotations += r;
	}
	if (printf("from stdout\n") < 0 || fflush(stdout))
		return 14;
	return rotations >= 32 ? 0 : 15;
}

static void test_own_log_bounded(void **state)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int status;
	pid_t pid;

	unlink(path);
	unlink(old);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(own_log_child());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(size_of(path) > 0 && size_of(path) <= MAX + 4096);
	assert_true(size_of(old) > MAX && size_of(old) <= MAX + 4096);
	assert_int_equal(read_file(path, MAX + 4096, &buf, &len), 0);
	assert_true(len > 100);
	assert_memory_equal(buf + len - 12, "from stdout\n", 12);
	assert_memory_equal(buf + len - 12 - 64, "line 00065535 ", 14);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_rotates),
		cmocka_unit_test(test_restart_appends),
		cmocka_unit_test(test_symlink_refused),
		cmocka_unit_test(test_own_log_bounded),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
