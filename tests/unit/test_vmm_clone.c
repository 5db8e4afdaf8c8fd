/* The VMM's process (supervisor/vmm_clone.h), for real: as an unprivileged
 * user the child is PID 1 of a new PID namespace inside a user namespace
 * that maps only that user, and the jail (vmm/jail.h) still nests its own
 * namespaces inside.  As root, the child is PID 1 without a user
 * namespace.  Nothing here needs KVM. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "child_report.h"

#include "supervisor/cgroup.h"
#include "supervisor/vmm_clone.h"
#include "vmm/jail.h"

enum {
	PID_1 = 1 << 0,     /* getpid() == 1 in the child */
	SAME_IDS = 1 << 1,  /* the child's uid and gid are the user's (mapped) */
	JAILED = 1 << 2,    /* jail_enter worked inside */
	USERNS = 1 << 3,    /* vmm_clone said a user namespace was made */
	OWN_NS = 1 << 4,    /* another user namespace than the parent's */
};

static char jail_dir[64];

/* In the cloned child, once let go: what it is. */
static int child_report(uid_t uid, gid_t gid, const char *parent_userns)
{
	char ns[64] = "";
	struct jail j = {0};
	const char *why;
	int r = 0;

	if (getpid() == 1)
		r |= PID_1;
	if (getuid() == uid && getgid() == gid)
		r |= SAME_IDS;
	if (readlink("/proc/self/ns/user", ns, sizeof(ns) - 1) > 0 && strcmp(ns, parent_userns))
		r |= OWN_NS;
	if (jail_add(&j, jail_dir, false) == 0 && jail_enter(&j, &why) == 0)
		r |= JAILED;
	return r;
}

/* Runs vmm_clone as the current process's user; the child's report comes
 * back in its exit status. */
static int clone_report(void)
{
	char parent_ns[64] = "";
	int gate[2], status;
	bool userns, in_cgroup;
	char go;
	pid_t pid;

	if (readlink("/proc/self/ns/user", parent_ns, sizeof(parent_ns) - 1) < 0 || pipe(gate) < 0)
		return -1;
	pid = vmm_clone(&userns, -1, &in_cgroup);
	if (pid == 0) {
		close(gate[1]);
		if (read(gate[0], &go, 1) != 1)
			_exit(0);
		_exit(child_report(getuid(), getgid(), parent_ns));
	}
	close(gate[0]);
	if (pid < 0 || (userns && vmm_clone_map_user(pid) < 0)) {
		if (pid > 0)
			kill(pid, SIGKILL);
		close(gate[1]);
		return -1;
	}
	(void)!write(gate[1], "g", 1);
	close(gate[1]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status) | (userns ? USERNS : 0);
}

/* getuid() before the clone is what the child must see after the map. */
static void test_clone_as_invoker(void **state)
{
	int r = clone_report();

	assert_true(r >= 0);
	assert_true(r & PID_1);
	assert_true(r & SAME_IDS);
	assert_true(r & JAILED);
	assert_int_equal(!!(r & USERNS), geteuid() != 0);
	assert_int_equal(!!(r & OWN_NS), geteuid() != 0);
}

/* As nobody; *arg: whether the process is dumpable when the clone
 * happens (set after the uid change, which clears it). */
static int clone_report_as_nobody(void *arg)
{
	if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
		return -1;
	/* A user's process is dumpable; one that changed uids is not. */
	prctl(PR_SET_DUMPABLE, *(bool *)arg, 0, 0, 0);
	return clone_report();
}

static int clone_as_nobody(bool dumpable, int *parent_dumpable)
{
	return run_in_child(clone_report_as_nobody, &dumpable, parent_dumpable);
}

/* A supervisor holding secrets is not dumpable (process_hold_secrets),
 * which would make its child's /proc maps root's: the clone must still
 * map the user, and leave the supervisor as it was. */
static void test_clone_holding_secrets(void **state)
{
	int dumpable = -1, r;

	if (geteuid() != 0)
		skip(); /* needs to become another user */
	r = clone_as_nobody(false, &dumpable);
	assert_true(r >= 0);
	assert_true(r & USERNS);
	assert_true(r & SAME_IDS);
	assert_true(r & JAILED);
	assert_int_equal(dumpable, 0);
}

/* As root, the same as an unprivileged user: the user's path for real. */
static void test_clone_as_user(void **state)
{
	int dumpable = -1, r;

	if (geteuid() != 0)
		skip(); /* test_clone_as_invoker took the user's path */
	r = clone_as_nobody(true, &dumpable);
	assert_true(r >= 0);
	assert_true(r & USERNS);
	assert_true(r & OWN_NS);
	assert_true(r & PID_1);
	assert_true(r & SAME_IDS);
	assert_true(r & JAILED);
}

/* The child's cgroup v2 path, as it sees it first thing. */
static bool child_in(const char *cg_path)
{
	char buf[PATH_MAX + 8] = "", *p;
	int fd = open("/proc/self/cgroup", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0 || !(p = strstr(buf, "0::/")))
		return false;
	p += 3;
	p[strcspn(p, "\n")] = 0;
	return strlen(p) > 1 && strlen(cg_path) >= strlen(p) &&
	       !strcmp(cg_path + strlen(cg_path) - strlen(p), p);
}

/* Given the VMM's cgroup, the child is in it from its first instruction:
 * nobody has to move it there (which waits for an RCU grace period). */
static void test_clone_into_cgroup(void **state)
{
	struct vmm_cgroup_limits lim = {.mem = 64 << 20, .cpus = 1};
	struct vmm_cgroup cg;
	char name[48], why[PATH_MAX + 128];
	bool userns, in_cgroup = false;
	int fd, status = -1;
	pid_t pid;

	snprintf(name, sizeof(name), "unit-clone-%d", (int)getpid());
	if (vmm_cgroup_create(&cg, name, &lim, why, sizeof(why)))
		skip(); /* no cgroup v2 this user may write here */
	fd = vmm_cgroup_open(&cg);
	assert_true(fd >= 0);
	pid = vmm_clone(&userns, fd, &in_cgroup);
	if (pid == 0)
		_exit(child_in(cg.path) ? 0 : 1);
	close(fd);
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	vmm_cgroup_remove(&cg);
	assert_true(in_cgroup);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clone_as_invoker),
		cmocka_unit_test(test_clone_as_user),
		cmocka_unit_test(test_clone_holding_secrets),
		cmocka_unit_test(test_clone_into_cgroup),
	};
	int rc;

	snprintf(jail_dir, sizeof(jail_dir), "/tmp/kosa8-clone-XXXXXX");
	if (!mkdtemp(jail_dir) || chmod(jail_dir, 0755) < 0)
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	rmdir(jail_dir);
	return rc;
}
