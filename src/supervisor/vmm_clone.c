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

static int write_map(pid_t pid, const char *file, unsigned id)
{
	char path[64], line[32];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	snprintf(line, sizeof(line), "%u %u 1\n", id, id);
	return write_text_file(path, line);
}

int vmm_clone_map_user(pid_t pid)
{
	char path[64];
	int err;

	/* An unprivileged writer may map its own gid only once setgroups is
	 * denied in the namespace. */
	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
	if ((err = write_text_file(path, "deny")) || (err = write_map(pid, "uid_map", geteuid())))
		return err;
	return write_map(pid, "gid_map", getegid());
}
