#include "supervisor/vmm_clone.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/* A raw clone, not glibc's fork: the child only sets up descriptors and
 * execs, touching no lock or cache that fork would have reset. */
pid_t vmm_clone(bool *userns)
{
	unsigned long flags = CLONE_NEWPID | SIGCHLD;
	long pid;

	*userns = geteuid() != 0;
	if (*userns)
		flags |= CLONE_NEWUSER;
	pid = syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
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
