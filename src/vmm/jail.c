#include "vmm/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"

/* Where the new root is built: any directory that exists on every host
 * will do, since the tmpfs mounted over it is seen only in the jail. */
#define NEW_ROOT "/tmp"

int jail_add(struct jail *j, const char *path, bool writable)
{
	char *abs;

	if (j->npaths >= JAIL_MAX_PATHS)
		return -E2BIG;
	if (!(abs = realpath(path, NULL)))
		return -errno;
	j->paths[j->npaths++] = (struct jail_path){.path = abs, .writable = writable};
	return 0;
}

/* Maps only the calling user into the new user namespace. */
static int map_user(uid_t uid, gid_t gid)
{
	/* A process that changed uids is not dumpable, and then /proc/self is
	 * root's: its maps could not be written.  limit() undoes this. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
		return -errno;
	return userns_map_one("/proc/self", (unsigned)uid, (unsigned)gid);
}

/* Creates the mount point for src at NEW_ROOT/path: parents, then an
 * empty file or directory like the source. */
static int make_target(const char *target, bool dir)
{
	char tmp[PATH_MAX];
	int fd, err;

	if (snprintf(tmp, sizeof(tmp), "%s", target) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	*strrchr(tmp, '/') = 0;
	if ((err = mkdir_p(tmp, 0755)) < 0)
		return err;
	if (dir)
		return mkdir(target, 0755) < 0 && errno != EEXIST ? -errno : 0;
	fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* Binds one path (held open as an O_PATH fd, because the tmpfs may now hide
 * it) at its own path under the new root. */
static int bind_path(const struct jail_path *p, int fd)
{
	unsigned long ro = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	char target[PATH_MAX], src[64];
	struct stat st;
	int err;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (snprintf(target, sizeof(target), NEW_ROOT "%s", p->path) >= (int)sizeof(target))
		return -ENAMETOOLONG;
	if ((err = make_target(target, S_ISDIR(st.st_mode))))
		return err;
	snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
	if (mount(src, target, NULL, MS_BIND, NULL) < 0)
		return -errno;
	if (!p->writable)
		ro |= MS_RDONLY;
	return mount(NULL, target, NULL, ro, NULL) < 0 ? -errno : 0;
}

static int switch_root(void)
{
	if (chdir(NEW_ROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return -errno;
	/* Nothing in the jail's own root is to be written. */
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0)
		return -errno;
	return 0;
}

/* The bounding set first: dropping from it needs CAP_SETPCAP, which a
 * change of uid takes away. */
static int drop_bounding_set(void)
{
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

/* Groups, then gid, then uid: each step needs the rights the next one
 * takes away.  Leaving uid 0 clears the permitted and effective sets. */
static int become_user(const struct jail *j)
{
	int death = 0;

	/* A change of ids clears the parent-death signal: kept, so that a
	 * VMM whose parent asked to die with it still does. */
	prctl(PR_GET_PDEATHSIG, &death);
	if (setgroups(0, NULL) < 0 || setresgid(j->gid, j->gid, j->gid) < 0 ||
	    setresuid(j->uid, j->uid, j->uid) < 0)
		return -errno;
	if (death && prctl(PR_SET_PDEATHSIG, death) < 0)
		return -errno;
	/* Files the VMM creates (checkpoints, deltas) are read by a fork's
	 * VMM through the shared group, and by nobody else. */
	umask(027);
	return 0;
}

static int clear_capabilities(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

/* Descriptors the VMM may hold: the vsock device's connection limit (1024,
 * docs/vsock.md) plus disk layers, KVM, eventfds and sockets, with room.  A
 * bug in the device's own limit then meets this one, not the host's. */
#define JAIL_MAX_FDS 4096

/* Threads: vCPUs (at most 254) and the device threads.  Counted per uid,
 * so only with a uid of the VMM's own. */
#define JAIL_MAX_TASKS 512

static int limit(bool own_uid)
{
	struct rlimit none = {0, 0}, fds, tasks = {JAIL_MAX_TASKS, JAIL_MAX_TASKS};

	if (setrlimit(RLIMIT_CORE, &none) < 0)
		return -errno;
	if (getrlimit(RLIMIT_NOFILE, &fds) < 0)
		return -errno;
	if (fds.rlim_max > JAIL_MAX_FDS)
		fds.rlim_max = JAIL_MAX_FDS;
	fds.rlim_cur = fds.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &fds) < 0)
		return -errno;
	if (own_uid && setrlimit(RLIMIT_NPROC, &tasks) < 0)
		return -errno;
	/* Not dumpable: no core, and no other process of the user may ptrace
	 * the VMM or read its memory through /proc. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return 0;
}

int jail_enter(const struct jail *j, const char **why)
{
	int flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
	bool userns = geteuid() != 0;
	uid_t uid = getuid();
	gid_t gid = getgid();
	int fds[JAIL_MAX_PATHS];
	size_t opened = 0;
	int err = 0;

	if (userns)
		flags |= CLONE_NEWUSER;
	*why = "cannot create the jail's namespaces (unshare; are user namespaces enabled?)";
	if (unshare(flags) < 0) {
		err = -errno;
		goto out;
	}
	*why = "cannot map the user into the jail's user namespace";
	if (userns && (err = map_user(uid, gid)))
		goto out;
	*why = "cannot build the jail's root (mount)";
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		err = -errno;
		goto out;
	}
	/* Held open across the tmpfs mount, which may hide them; opened only
	 * now because a bind mount's source must be in the jail's namespace. */
	for (; opened < j->npaths; opened++) {
		fds[opened] = open(j->paths[opened].path, O_PATH | O_CLOEXEC);
		if (fds[opened] < 0) {
			*why = "cannot open a file the jailed VMM needs";
			err = -errno;
			goto out;
		}
	}
	if (mount("kosa8-jail", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=1m,mode=0755") < 0) {
		err = -errno;
		goto out;
	}
	*why = "cannot bind a file into the jail";
	for (size_t i = 0; i < j->npaths; i++)
		if ((err = bind_path(&j->paths[i], fds[i])))
			goto out;
	*why = "cannot enter the jail's root (pivot_root)";
	if ((err = switch_root()))
		goto out;
	*why = "cannot drop capabilities";
	if ((err = drop_bounding_set()))
		goto out;
	*why = "cannot switch to the VMM's user (setresuid)";
	if (j->set_user && !userns && (err = become_user(j)))
		goto out;
	*why = "cannot drop capabilities";
	if ((err = clear_capabilities()))
		goto out;
	*why = "cannot set resource limits";
	err = limit(j->set_user && !userns);
out:
	for (size_t i = 0; i < opened; i++)
		close(fds[i]);
	return err;
}
