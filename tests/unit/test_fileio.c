/* fd_regular_size and the readers built on it (read_fd/read_file, the
 * audit log's snapshot): a FIFO, a directory and a file over the bound are
 * refused with their own error, never read, waited on or mapped. */
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
#include <unistd.h>
#include <cmocka.h>

#include "audit/bundle.h"
#include "common/util.h"

static char dir[64];
static char fifo[128], big[128], small[128];

static int setup(void **state)
{
	int fd;

	snprintf(dir, sizeof(dir), "/tmp/kosa8-fileio-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(big, sizeof(big), "%s/big", dir);
	snprintf(small, sizeof(small), "%s/small", dir);
	if (mkfifo(fifo, 0600) < 0)
		return -1;
	/* Sparse: 1 MiB + 1 bytes that take no space. */
	fd = open(big, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (1 << 20) + 1) < 0 || close(fd) < 0)
		return -1;
	fd = open(small, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, "hello", 5) < 0 || close(fd) < 0)
		return -1;
	/* A reader that waits on the FIFO fails the test instead of hanging. */
	alarm(20);
	return 0;
}

static int teardown(void **state)
{
	unlink(fifo);
	unlink(big);
	unlink(small);
	return rmdir(dir);
}

static int open_ro(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	assert_true(fd >= 0);
	return fd;
}

static void test_size_of_kinds(void **state)
{
	size_t n = 99;
	int fd;

	fd = open_ro(fifo);
	assert_int_equal(fd_regular_size(fd, 1 << 20, &n), -EINVAL);
	close(fd);
	fd = open_ro(dir);
	assert_int_equal(fd_regular_size(fd, 1 << 20, &n), -EINVAL);
	close(fd);
	fd = open_ro("/dev/null");
	assert_int_equal(fd_regular_size(fd, 1 << 20, &n), -EINVAL);
	close(fd);
	assert_int_equal(n, 99); /* untouched on refusal */
	assert_int_equal(fd_regular_size(-1, 1 << 20, &n), -EBADF);
}

static void test_size_bound(void **state)
{
	size_t n = 0;
	int fd = open_ro(big);

	assert_int_equal(fd_regular_size(fd, 1 << 20, &n), -EFBIG);
	assert_int_equal(fd_regular_size(fd, (1 << 20) + 1, &n), 0);
	assert_int_equal(n, (1 << 20) + 1);
	assert_int_equal(fd_regular_size(fd, UINT64_MAX, &n), 0);
	close(fd);
	fd = open_ro(small);
	assert_int_equal(fd_regular_size(fd, 5, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(fd_regular_size(fd, 4, &n), -EFBIG);
	close(fd);
}

static void test_read_file_refusals(void **state)
{
	uint8_t *buf = NULL;
	size_t len = 0;

	/* Opened without blocking, then refused: no writer needed. */
	assert_int_equal(read_file(fifo, 1 << 20, &buf, &len), -EINVAL);
	assert_int_equal(read_file(dir, 1 << 20, &buf, &len), -EINVAL);
	assert_int_equal(read_file(big, 1 << 20, &buf, &len), -EFBIG);
	assert_null(buf);
	assert_int_equal(read_file(small, 5, &buf, &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "hello", 5);
	free(buf);
}

/* The audit log's reader takes the same checks: a log that is a FIFO is
 * refused rather than waited on, one over the bound is -EFBIG. */
static void test_audit_snapshot_refusals(void **state)
{
	struct audit_snapshot s;

	assert_int_equal(audit_snapshot_read(fifo, 1 << 20, &s), -EINVAL);
	assert_int_equal(audit_snapshot_read(dir, 1 << 20, &s), -EINVAL);
	assert_int_equal(audit_snapshot_read(big, 1 << 20, &s), -EFBIG);
}

static void test_audit_files_refusals(void **state)
{
	struct audit_verify_result res;
	const uint8_t *p = (const uint8_t *)"x";
	uint8_t pub[AUDIT_PUBKEY_LEN] = {0};
	size_t len = 7;

	assert_int_equal(audit_map_file(fifo, &p, &len), -EINVAL);
	assert_null(p);
	assert_int_equal(audit_map_file(dir, &p, &len), -EINVAL);
	assert_int_equal(audit_verify_files(fifo, small, pub, &res, NULL), -EINVAL);
	assert_int_equal(audit_verify_files(small, fifo, pub, &res, NULL), -EINVAL);
}

/* write_file_replace: the whole new text replaces the old, with the
 * mode asked; a link planted at PATH.tmp is not followed (its target stays
 * as it was) and the old file is kept. */
static void test_replace(void **state)
{
	char path[160], tmp[168], target[160];
	uint8_t *buf;
	size_t len;
	struct stat st;

	snprintf(path, sizeof(path), "%s/replaced", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	snprintf(target, sizeof(target), "%s/target", dir);
	assert_int_equal(write_file_replace(path, "old text", 0600), 0);
	assert_int_equal(write_file_replace(path, "new", 0640), 0);
	assert_int_equal(read_file(path, 64, &buf, &len), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(buf, "new", 3);
	free(buf);
	assert_int_equal(stat(path, &st), 0);
	{
		mode_t mask = umask(0);

		umask(mask);
		assert_int_equal(st.st_mode & 0777, 0640 & ~mask);
	}
	assert_int_equal(access(tmp, F_OK), -1);

	assert_int_equal(symlink(target, tmp), 0);
	assert_int_equal(write_file_replace(path, "via link", 0600), -ELOOP);
	assert_int_equal(access(target, F_OK), -1);
	assert_int_equal(read_file(path, 64, &buf, &len), 0);
	assert_int_equal(len, 3);
	free(buf);
	unlink(tmp);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_of_kinds),
		cmocka_unit_test(test_size_bound),
		cmocka_unit_test(test_read_file_refusals),
		cmocka_unit_test(test_audit_snapshot_refusals),
		cmocka_unit_test(test_audit_files_refusals),
		cmocka_unit_test(test_replace),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
