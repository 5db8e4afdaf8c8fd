#include "supervisor/vmm_clone.h"

#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/* The supervisor is not dumpable (process_hold_secrets), and a child
 * starts as its parent is: but /proc/PID files of a process that is not
 * dumpable belong to root, and the user could not write the child's
 * uid_map (vmm_clone_map_user).  So the child is made dumpable, the
 * supervisor only for the instant of the clone; the child holds a copy of
 * the supervisor's memory only until its execve. */
static long clone_dumpable(unsigned long flags, int cgroup_fd, bool *in_cgroup)
{
	int was = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	long pid = -1;
	int e;

	if (was == 0)
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	*in_cgroup = false;
	if (cgroup_fd >= 0) {
		struct clone_args a = {.flags = (flags & ~0xffUL) | CLONE_INTO_CGROUP,
				       .exit_signal = flags & 0xff, .cgroup = (uint64_t)cgroup_fd};
		pid = syscall(SYS_clone3, &a, sizeof(a));
		*in_cgroup = pid >= 0;
	}
	/* Before 5.7 (ENOSYS, E2BIG) or without a usable cgroup there: the
	 * caller moves the child itself. */
	if (pid < 0)
		pid = syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
	e = errno;
	if (pid != 0 && was == 0)
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	errno = e;
	return pid;
}

/* A raw clone, not glibc's fork: the child only sets up descriptors and
 * execs, touching no lock or cache that fork would have reset. */
pid_t vmm_clone(bool *userns, int cgroup_fd, bool *in_cgroup)
{
	unsigned long flags = CLONE_NEWPID | SIGCHLD;
	long pid;

	*userns = geteuid() != 0;
	if (*userns)
		flags |= CLONE_NEWUSER;
	pid = clone_dumpable(flags, cgroup_fd, in_cgroup);
	if (pid >= 0)
		return (pid_t)pid;
	if (errno != EINVAL && errno != EPERM && errno != ENOSPC && errno != EUSERS)
		return -1;
	log_warn("the VMM runs without a PID namespace: clone(%s): %s",
		 *userns ? "CLONE_NEWUSER|CLONE_NEWPID" : "CLONE_NEWPID", strerror(errno));
	*userns = false;
	return fork();
}

int vmm_clone_map_user(pid_t pid)
{
	char proc[32];

	snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
	return userns_map_one(proc, (unsigned)geteuid(), (unsigned)getegid());
}
