/* The VMM's jail (vmm/jail.h), entered for real in a child process: as root
 * (mount, network, IPC and UTS namespaces) and, when the tests run as root,
 * also as an unprivileged user (a user namespace on top).  The child reports
 * what it could reach; nothing here needs KVM. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include <cmocka.h>

#include "vmm/jail.h"

static char dir[64], ro_file[160], rw_dir[96];

/* Each probe is one bit of the child's exit status's report. */
enum {
	READ_RO = 1 << 0,      /* read the read-only file: must work */
	WRITE_RO = 1 << 1,     /* write it: must fail */
	WRITE_RW = 1 << 2,     /* create a file in the writable directory: must work */
	HOST_FILE = 1 << 3,    /* open /etc/passwd: must fail */
	NET = 1 << 4,          /* TCP to 127.0.0.1: must fail */
	CAPS = 1 << 5,         /* any capability left: must not be */
	ROOT_WRITE = 1 << 6,   /* mkdir in /: must fail */
	ENTERED = 1 << 7,      /* jail_enter succeeded */
	LIMITS = 1 << 8,       /* core 0, <= 4096 descriptors (hard), not dumpable: must be */
	RAISE_FDS = 1 << 9,    /* raise the descriptor limit again: must fail */
	VMM_IDS = 1 << 10,     /* the VMM's uid and group, no other group, no way back to 0 */
	ROOT_FILE = 1 << 11,   /* read a root-only file in the writable directory: must fail */
};

static char root_file[160];
static uid_t want_uid;
static gid_t want_gid;

/* With a user set (as root): exactly that uid and gid, no supplementary
 * group, no return to root, a task limit, and root's files closed. */
static int user_probes(void)
{
	struct rlimit tasks;
	int r = 0, fd;

	if (getuid() == want_uid && geteuid() == want_uid && getgid() == want_gid &&
	    getegid() == want_gid && getgroups(0, NULL) == 0 && setuid(0) < 0 && setgid(0) < 0 &&
	    getrlimit(RLIMIT_NPROC, &tasks) == 0 && tasks.rlim_max <= 512)
		r |= VMM_IDS;
	if ((fd = open(root_file, O_RDONLY)) >= 0) {
		r |= ROOT_FILE;
		close(fd);
	}
	return r;
}

static int limit_probes(void)
{
	struct rlimit core, fds, more = {8192, 8192};
	int r = 0;

	if (getrlimit(RLIMIT_CORE, &core) == 0 && core.rlim_cur == 0 && core.rlim_max == 0 &&
	    getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_max <= 4096 &&
	    prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
		r |= LIMITS;
	if (setrlimit(RLIMIT_NOFILE, &more) == 0)
		r |= RAISE_FDS;
	return r;
}

static int probes(void)
{
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = htons(9),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	char path[160], buf[8];
	int r = ENTERED, fd;

	if ((fd = open(ro_file, O_RDONLY)) >= 0 && read(fd, buf, 5) == 5 && !memcmp(buf, "hello", 5))
		r |= READ_RO;
	if (fd >= 0)
		close(fd);
	if ((fd = open(ro_file, O_WRONLY)) >= 0) {
		r |= WRITE_RO;
		close(fd);
	}
	snprintf(path, sizeof(path), "%s/new-%u", rw_dir, (unsigned)geteuid());
	if ((fd = open(path, O_WRONLY | O_CREAT, 0600)) >= 0) {
		r |= WRITE_RW;
		close(fd);
	}
	if ((fd = open("/etc/passwd", O_RDONLY)) >= 0) {
		r |= HOST_FILE;
		close(fd);
	}
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd >= 0 && (connect(fd, (struct sockaddr *)&lo, sizeof(lo)) == 0 || errno != ENETUNREACH))
		r |= NET;
	if (fd >= 0)
		close(fd);
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) != 0 || d[0].effective || d[0].permitted || d[1].effective ||
	    d[1].permitted)
		r |= CAPS;
	if (mkdir("/x", 0700) == 0 || errno != EROFS)
		r |= ROOT_WRITE;
	return r | limit_probes() | (want_uid ? user_probes() : 0);
}

/* Runs the jail in a child (as uid, or as root when uid is 0); the report
 * comes back through a pipe. */
static int jailed_report(uid_t uid)
{
	int p[2], status, report = -1;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct jail j = {0};
		const char *why;
		int r = 0;

		close(p[0]);
		if (uid && (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid)))
			_exit(2);
		j.set_user = want_uid != 0;
		j.uid = want_uid;
		j.gid = want_gid;
		if (jail_add(&j, ro_file, false) == 0 && jail_add(&j, rw_dir, true) == 0 &&
		    jail_enter(&j, &why) == 0)
			r = probes();
		else
			fprintf(stderr, "jail_enter: %s (%s)\n", why, strerror(errno));
		(void)!write(p[1], &r, sizeof(r));
		_exit(0); /* no exit handlers: the sanitizer's need /proc */
	}
	close(p[1]);
	if (read(p[0], &report, sizeof(report)) != sizeof(report))
		report = -1;
	close(p[0]);
	waitpid(pid, &status, 0);
	return report;
}

static void check(int r)
{
	assert_true(r >= 0);
	assert_true(r & ENTERED);
	assert_true(r & READ_RO);
	assert_false(r & WRITE_RO);
	assert_true(r & WRITE_RW);
	assert_false(r & HOST_FILE);
	assert_false(r & NET);
	assert_false(r & CAPS);
	assert_false(r & ROOT_WRITE);
	assert_true(r & LIMITS);
	assert_false(r & RAISE_FDS);
}

static void test_jail_as_invoker(void **state)
{
	check(jailed_report(0));
}

/* The user-namespace path, as an unprivileged uid (needs root to switch). */
static void test_jail_as_unprivileged_user(void **state)
{
	if (geteuid() != 0) {
		/* Already unprivileged: the first test took the user-namespace path. */
		check(jailed_report(0));
		return;
	}
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(chown(rw_dir, 65534, 65534), 0);
	check(jailed_report(65534));
}

/* Root's path with the VMM's own uid, as the supervisor runs it: the
 * writable directory handed over first (supervisor/vmm_files.h), a file
 * of root's left in it. */
static void test_jail_as_root_with_vmm_user(void **state)
{
	int fd, r;

	if (geteuid() != 0)
		skip(); /* only root may switch uids; test_jail_as_invoker covered a user */
	want_uid = jail_vmm_uid(7);
	want_gid = JAIL_VMM_GID;
	snprintf(root_file, sizeof(root_file), "%s/root-only", rw_dir);
	fd = open(root_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chown(rw_dir, want_uid, want_gid), 0);
	r = jailed_report(0);
	want_uid = 0;
	unlink(root_file);
	check(r);
	assert_true(r & VMM_IDS);
	assert_false(r & ROOT_FILE);
	snprintf(root_file, sizeof(root_file), "%s/new-%u", rw_dir, (unsigned)jail_vmm_uid(7));
	unlink(root_file);
}

static void test_jail_user_ids(void **state)
{
	assert_int_equal(jail_vmm_uid(3), 0x6b380003u);
	assert_int_equal(jail_vmm_uid(0x10005), 0x6b380005u); /* the low 16 bits */
	assert_true(jail_is_vmm_id(JAIL_VMM_GID));
	assert_true(jail_is_vmm_id(0x6b38ffffu));
	assert_false(jail_is_vmm_id(0x6b390000u));
	assert_false(jail_is_vmm_id(0));
}

static void test_jail_missing_path(void **state)
{
	struct jail j = {0};

	assert_int_equal(jail_add(&j, "/nonexistent/kosa8/file", false), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jail_as_invoker),
		cmocka_unit_test(test_jail_as_unprivileged_user),
		cmocka_unit_test(test_jail_as_root_with_vmm_user),
		cmocka_unit_test(test_jail_user_ids),
		cmocka_unit_test(test_jail_missing_path),
	};
	int fd, rc;

	snprintf(dir, sizeof(dir), "/tmp/kosa8-jail-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(ro_file, sizeof(ro_file), "%s/ro.txt", dir);
	snprintf(rw_dir, sizeof(rw_dir), "%s/rw", dir);
	fd = open(ro_file, O_WRONLY | O_CREAT, 0644);
	if (fd < 0 || write(fd, "hello", 5) != 5 || mkdir(rw_dir, 0755) < 0)
		return 1;
	close(fd);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(ro_file);
	snprintf(ro_file, sizeof(ro_file), "%s/new-0", rw_dir);
	unlink(ro_file);
	snprintf(ro_file, sizeof(ro_file), "%s/new-65534", rw_dir);
	unlink(ro_file);
	rmdir(rw_dir);
	rmdir(dir);
	return rc;
}
