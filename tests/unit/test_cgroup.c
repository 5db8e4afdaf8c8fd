/* supervisor/cgroup.c: finding cgroup v2 and kosa8's place in it. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "supervisor/cgroup.h"

/* A systemd host (unified) and a hybrid one, as /proc/self/mountinfo shows them. */
static const char unified[] =
	"22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
	"26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
	"rw,nsdelegate,memory_recursiveprot\n";
static const char hybrid[] =
	"30 22 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
	"31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	"32 30 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory\n";
/* A container's view: cgroup2 mounted from a sub-tree (root not "/"),
 * then a mount point with an escaped space; neither is used. */
static const char odd[] =
	"40 22 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	"41 22 0:31 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n";

static void test_find_mount(void **state)
{
	char m[64];

	assert_int_equal(cgroup_find_mount(unified, m, sizeof(m)), 0);
	assert_string_equal(m, "/sys/fs/cgroup");
	assert_int_equal(cgroup_find_mount(hybrid, m, sizeof(m)), 0);
	assert_string_equal(m, "/sys/fs/cgroup/unified");
	assert_int_equal(cgroup_find_mount(odd, m, sizeof(m)), -ENOENT);
	assert_int_equal(cgroup_find_mount("", m, sizeof(m)), -ENOENT);
	assert_int_equal(cgroup_find_mount(unified, m, 8), -ENAMETOOLONG);
}

static void test_own_path(void **state)
{
	char p[PATH_MAX];

	assert_int_equal(cgroup_own_path("0::/user.slice/user-1000.slice/session-2.scope\n", p, sizeof(p)), 0);
	assert_string_equal(p, "/user.slice/user-1000.slice/session-2.scope");
	/* v1 lines first (hybrid host); the v2 line is the "0::" one. */
	assert_int_equal(cgroup_own_path("12:memory:/x\n1:name=systemd:/y\n0::/\n", p, sizeof(p)), 0);
	assert_string_equal(p, "/");
	assert_int_equal(cgroup_own_path("4:pids:/z\n", p, sizeof(p)), -ENOENT);
	assert_int_equal(cgroup_own_path("0::/long/path\n", p, 5), -ENAMETOOLONG);
}

static void test_kosa8_parent(void **state)
{
	char p[PATH_MAX];

	assert_int_equal(cgroup_kosa8_parent("/user.slice/user-0.slice/session-1.scope", 0, p, sizeof(p)), 0);
	assert_string_equal(p, "kosa8");
	assert_int_equal(cgroup_kosa8_parent(
				 "/user.slice/user-1000.slice/user@1000.service/app.slice/term.scope", 1000, p,
				 sizeof(p)),
			 0);
	assert_string_equal(p, "user.slice/user-1000.slice/user@1000.service/kosa8");
	/* Another user's service, a prefix of the uid, or no delegation at all. */
	assert_int_equal(cgroup_kosa8_parent("/user.slice/user-1001.slice/user@1001.service/x", 1000, p,
					     sizeof(p)),
			 -EPERM);
	assert_int_equal(cgroup_kosa8_parent("/user.slice/user@10000.service/x", 1000, p, sizeof(p)), -EPERM);
	assert_int_equal(cgroup_kosa8_parent("/user.slice/user-1000.slice/session-3.scope", 1000, p, sizeof(p)),
			 -EPERM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_mount),
		cmocka_unit_test(test_own_path),
		cmocka_unit_test(test_kosa8_parent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
