#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_size_units),
		cmocka_unit_test(test_parse_size_rejects),
	};
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
