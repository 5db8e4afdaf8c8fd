#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/util.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size_units),
		cmocka_unit_test(test_parse_size_rejects),
		cmocka_unit_test(test_eventfd_ring),
	};
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
