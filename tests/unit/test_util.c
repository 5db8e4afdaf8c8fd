#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "end_child.h"
#include "tmp_dir.h"

static void test_parse_size_units(void **state)
{
	uint64_t v;

	assert_int_equal(parse_size("512M", &v), 0);
	assert_int_equal(v, 512 * MiB);
	assert_int_equal(parse_size("2G", &v), 0);
	assert_int_equal(v, 2 * GiB);
	assert_int_equal(parse_size("128MiB", &v), 0);
	assert_int_equal(v, 128 * MiB);
	assert_int_equal(parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(parse_size("64k", &v), 0);
	assert_int_equal(v, 64 * KiB);
}

static void test_parse_size_rejects(void **state)
{
	uint64_t v;

	assert_int_equal(parse_size("", &v), -EINVAL);
	assert_int_equal(parse_size("M", &v), -EINVAL);
	assert_int_equal(parse_size("-1G", &v), -EINVAL);
	assert_int_equal(parse_size("12X", &v), -EINVAL);
	assert_int_equal(parse_size("1GG", &v), -EINVAL);
	assert_int_equal(parse_size("99999999999999999999", &v), -ERANGE);
	assert_int_equal(parse_size("99999999999T", &v), -ERANGE);
}

/* Each ring adds one; a saturated counter is a pending wake-up, not an
 * error; a descriptor that is not open is. */
static void test_eventfd_ring(void **state)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	uint64_t v;

	assert_true(fd >= 0);
	assert_int_equal(eventfd_ring(fd), 0);
	assert_int_equal(eventfd_ring(fd), 0);
	assert_int_equal(read(fd, &v, sizeof(v)), sizeof(v));
	assert_int_equal(v, 2);
	v = UINT64_MAX - 1; /* the most an eventfd holds */
	assert_int_equal(write(fd, &v, sizeof(v)), sizeof(v));
	assert_int_equal(eventfd_ring(fd), 0);
	close(fd);
	assert_int_equal(eventfd_ring(fd), -EBADF);
}

static void touch(const char *dir, const char *rel, mode_t mode)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chmod(p, mode), 0);
}

/* The supervisor's VMM: next to kosa8 (a build tree) before ../lib/kosa8
 * (installed); a file that is not executable is not it. */
static void test_vmm_path(void **state)
{
	char d[128], exe[PATH_MAX], got[PATH_MAX], want[PATH_MAX];

	snprintf(d, sizeof(d), "%s/vmm", tmp);
	assert_int_equal(mkdir_p(d, 0700), 0);
	snprintf(want, sizeof(want), "%s/bin", d);
	assert_int_equal(mkdir_p(want, 0700), 0);
	snprintf(want, sizeof(want), "%s/lib/kosa8", d);
	assert_int_equal(mkdir_p(want, 0700), 0);
	snprintf(exe, sizeof(exe), "%s/bin/kosa8", d);
	assert_int_equal(kosa8_vmm_path(exe, got, sizeof(got)), -ENOENT);
	touch(d, "lib/kosa8/kosa8-vmm", 0644);
	assert_int_equal(kosa8_vmm_path(exe, got, sizeof(got)), -ENOENT);
	touch(d, "lib/kosa8/kosa8-vmm", 0755);
	assert_int_equal(kosa8_vmm_path(exe, got, sizeof(got)), 0);
	snprintf(want, sizeof(want), "%s/bin/../lib/kosa8/kosa8-vmm", d);
	assert_string_equal(got, want);
	touch(d, "bin/kosa8-vmm", 0755);
	assert_int_equal(kosa8_vmm_path(exe, got, sizeof(got)), 0);
	snprintf(want, sizeof(want), "%s/bin/kosa8-vmm", d);
	assert_string_equal(got, want);
	assert_int_equal(kosa8_vmm_path(exe, got, 8), -ENOENT); /* too long for buf */
}

/* usleep as the library sees it: counted, so that a wait that naps
 * between looks (a poll's delay after the child has gone) shows. */
static int naps;

int usleep(useconds_t us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};

	naps++;
	return nanosleep(&ts, NULL);
}

static void *close_later(void *arg)
{
	struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};

	nanosleep(&ts, NULL);
	close(*(int *)arg);
	return NULL;
}

/* A child that exits 7 when the write end p[1] (the caller's) closes. */
static pid_t child_until_eof(int p[2])
{
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		close(p[1]);
		_exit(read(p[0], &c, 1) == 0 ? 7 : 1);
	}
	close(p[0]);
	return pid;
}

/* A child that ends while the wait runs (when a thread closes its pipe) is
 * reaped by the wake-up its end causes, with no nap; one that does not end
 * is a timeout, and one that is not a child an error. */
static void test_wait_child(void **state)
{
	int p[2], status = 0;
	pthread_t t;
	pid_t pid;

	(void)state;
	pid = child_until_eof(p);
	naps = 0;
	assert_int_equal(pthread_create(&t, NULL, close_later, &p[1]), 0);
	assert_int_equal(wait_child_ms(pid, &status, 60000), 0);
	pthread_join(t, NULL);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 7);
	assert_int_equal(naps, 0);
	assert_int_equal(wait_child_ms(pid, &status, 10), -ECHILD);

	pid = child_until_eof(p);
	assert_int_equal(wait_child_ms(pid, &status, 30), -ETIMEDOUT);
	close(p[1]);
	assert_int_equal(wait_child_ms(pid, &status, 60000), 0);
	assert_int_equal(WEXITSTATUS(status), 7);
	end_child(pid, SIGKILL, false);
}

static void *make_later(void *arg)
{
	struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};

	char p[PATH_MAX];

	nanosleep(&ts, NULL);
	snprintf(p, sizeof(p), "%s/%s", tmp, (const char *)arg);
	close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	return NULL;
}

/* The supervisor's wait for the VMM's socket: a file made while it waits
 * wakes it with no nap, as does the child's end; with neither, the
 * timeout. */
static void test_wait_created(void **state)
{
	char path[PATH_MAX];
	int p[2], status;
	pthread_t t;
	pid_t pid = child_until_eof(p);

	(void)state;
	snprintf(path, sizeof(path), "%s/vsock.sock", tmp);
	assert_int_equal(wait_created_ms(path, pid, 30), -ETIMEDOUT);
	naps = 0;
	assert_int_equal(pthread_create(&t, NULL, make_later, "vsock.sock"), 0);
	assert_int_equal(wait_created_ms(path, pid, 60000), 0);
	pthread_join(t, NULL);
	assert_int_equal(naps, 0);
	assert_int_equal(wait_created_ms(path, pid, 60000), 0); /* there already */
	snprintf(path, sizeof(path), "%s/never.sock", tmp);
	close(p[1]);
	assert_int_equal(wait_created_ms(path, pid, 60000), -ETIMEDOUT); /* the child ended */
	assert_int_equal(wait_child_ms(pid, &status, 60000), 0);
	end_child(pid, SIGKILL, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size_units),
		cmocka_unit_test(test_parse_size_rejects),
		cmocka_unit_test(test_eventfd_ring),
		cmocka_unit_test(test_vmm_path),
		cmocka_unit_test(test_wait_child),
		cmocka_unit_test(test_wait_created),
	};
	return cmocka_run_group_tests_name("util", tests, tmp_setup, tmp_teardown);
}
