/* The VMM's jail: what a guest that takes over the VMM process finds.
 *
 * Entered by `kosa8 vm --jail` before any thread exists and before the VM is
 * built (namespaces and capabilities are per thread; later threads inherit
 * them), so that nothing the guest controls ever runs outside it:
 *
 *   - new mount, network, IPC and UTS namespaces, and a user namespace when
 *     kosa8 runs as a user (mapping only that user);
 *   - an empty, read-only root (a small tmpfs, pivot_root) holding only the
 *     files the VM needs, bind-mounted at their own paths: kernel and initrd
 *     (read-only), the disk's layers (read-only but the top delta), and the
 *     directory of the vsock sockets; no /proc, /sys, /dev, home or config;
 *   - no network: the empty network namespace has only a down loopback
 *     (unix sockets reached through the bind-mounted vsock directory are the
 *     VMM's only peers);
 *   - no capabilities (bounding, permitted, effective, inheritable, ambient),
 *     no_new_privs, no core dumps (guest memory would land on disk), at
 *     most 4096 descriptors.
 *
 * /dev/kvm is opened before (accel_preopen): device nodes cannot be reached
 * through a user namespace's mounts.  The seccomp filter (seccomp.h) comes
 * on top once set-up is over.
 *
 * The PID namespace is not the jail's: unshare(CLONE_NEWPID) here would make
 * pthread_create fail, so the supervisor, as root, starts the VMM as PID 1
 * of a new one (supervisor.c, fork_vmm).
 *
 * Not done: a PID namespace as a user (the filter stands in: kill is not
 * allowed, tgkill only on its own pid, no /proc to look through);
 * dropping to another uid when run as root (the vsock sockets belong to the
 * user running kosa8).  cgroup limits are the supervisor's
 * (supervisor/cgroup.h): it places the VMM before exec. */
#ifndef KOSA8_VMM_JAIL_H
#define KOSA8_VMM_JAIL_H

#include <stdbool.h>
#include <stddef.h>

#define JAIL_MAX_PATHS 64

struct jail_path {
	const char *path;  /* absolute; a file or a directory */
	bool writable;
};

struct jail {
	struct jail_path paths[JAIL_MAX_PATHS];
	size_t npaths;
};

/* Adds a path to expose (resolved to an absolute path, which must exist).
 * -E2BIG when full, -ENOENT etc. from realpath. */
int jail_add(struct jail *j, const char *path, bool writable);
/* Enters the jail.  The process must be single-threaded.  -errno with *why. */
int jail_enter(const struct jail *j, const char **why);

#endif
