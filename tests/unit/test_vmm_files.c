/* Handing a root-run VMM its files (supervisor/vmm_files.h), for real on a
 * temporary tree: root's files and other VMM uids' files are taken, a
 * user's file and whatever a symbolic link points at are not, and nothing
 * below a checkpoint's own files is visited.  Needs root (chown). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "supervisor/vmm_files.h"
#include "vmm/jail.h"

static char top[64];

static void path(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", top, rel);
}

static void make_file(const char *rel, mode_t mode, uid_t uid)
{
	char p[160];
	int fd;

	path(p, sizeof(p), rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(fchown(fd, uid, 0), 0);
	close(fd);
}

static void make_dir(const char *rel)
{
	char p[160];

	path(p, sizeof(p), rel);
	assert_int_equal(mkdir(p, 0700), 0);
}

static void make_socket(const char *rel)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	path(a.sun_path, sizeof(a.sun_path), rel);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(chmod(a.sun_path, 0600), 0);
	close(fd);
}

static struct stat stat_of(const char *rel)
{
	struct stat st;
	char p[160];

	path(p, sizeof(p), rel);
	assert_int_equal(lstat(p, &st), 0);
	return st;
}

static void assert_vmm_owns(const char *rel, uid_t uid)
{
	struct stat st = stat_of(rel);

	assert_int_equal(st.st_uid, uid);
	assert_int_equal(st.st_gid, JAIL_VMM_GID);
	if (S_ISREG(st.st_mode))
		assert_true(st.st_mode & S_IRGRP);
	if (S_ISDIR(st.st_mode))
		assert_int_equal(st.st_mode & (S_IRGRP | S_IXGRP | S_ISGID), S_IRGRP | S_IXGRP | S_ISGID);
}

static void test_hand_over(void **state)
{
	uid_t uid = jail_vmm_uid(5), user = 1000;
	char vm[160], ck[160], first[160], victim[160], link[160], why[256];
	struct stat st;

	if (geteuid() != 0)
		skip(); /* chown is root's */
	make_dir("vm");
	make_socket("vm/vsock.sock_1053");
	make_dir("checkpoints");
	make_file("checkpoints/d1.k8d", 0600, 0);
	make_dir("checkpoints/c1");
	make_file("checkpoints/c1/state", 0600, 0);
	make_file("checkpoints/c1/memory", 0600, jail_vmm_uid(9)); /* another VMM's */
	make_dir("checkpoints/c1/deeper");
	make_file("checkpoints/c1/deeper/x", 0600, 0);               /* below a checkpoint */
	make_file("checkpoints/users", 0600, user);                   /* a user's: never */
	make_file("victim", 0600, 0);                                 /* outside: never */
	path(victim, sizeof(victim), "victim");
	path(link, sizeof(link), "checkpoints/c1/link");
	assert_int_equal(symlink(victim, link), 0);
	make_file("disk.k8d", 0600, 0);

	path(vm, sizeof(vm), "vm");
	path(ck, sizeof(ck), "checkpoints");
	path(first, sizeof(first), "disk.k8d");
	struct vmm_files f = {.vm_dir = vm, .ckpt_dir = ck, .first_disk = first, .top = first,
			      .uid = uid, .gid = JAIL_VMM_GID};
	assert_int_equal(vmm_files_hand_over(&f, why, sizeof(why)), 0);

	assert_vmm_owns("vm", uid);
	assert_vmm_owns("vm/vsock.sock_1053", uid);
	assert_vmm_owns("checkpoints", uid);
	assert_vmm_owns("checkpoints/d1.k8d", uid);
	assert_vmm_owns("checkpoints/c1", uid);
	assert_vmm_owns("checkpoints/c1/state", uid);
	assert_vmm_owns("checkpoints/c1/memory", uid);
	assert_vmm_owns("checkpoints/c1/deeper", uid);
	assert_vmm_owns("disk.k8d", uid);
	assert_int_equal(stat_of("checkpoints/c1/deeper/x").st_uid, 0);
	assert_int_equal(stat_of("checkpoints/users").st_uid, user);
	st = stat_of("victim");
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat_of("checkpoints/c1/link").st_uid, 0); /* the link itself untouched */

	/* Twice is the same: a restart hands over what is already handed. */
	assert_int_equal(vmm_files_hand_over(&f, why, sizeof(why)), 0);
	assert_vmm_owns("checkpoints/c1/state", uid);
}

static void test_missing_paths_are_fine(void **state)
{
	char why[256];
	struct vmm_files f = {.vm_dir = "/nonexistent/kosa8/vm", .ckpt_dir = NULL,
			      .first_disk = "/nonexistent/kosa8/disk.k8d", .uid = jail_vmm_uid(5),
			      .gid = JAIL_VMM_GID};

	assert_int_equal(vmm_files_hand_over(&f, why, sizeof(why)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_over),
		cmocka_unit_test(test_missing_paths_are_fine),
	};
	char cmd[96];
	int rc;

	snprintf(top, sizeof(top), "/tmp/kosa8-vmmfiles-XXXXXX");
	if (!mkdtemp(top))
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
