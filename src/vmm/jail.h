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
 * pthread_create fail, so the supervisor starts the VMM as PID 1 of a new
 * one (supervisor/vmm_clone.h; as a user inside a user namespace of its
 * own, which the jail's nests in).
 *
 * As root, with a user set (jail_set_user; the supervisor always sets one),
 * the VMM ends as that uid and gid with no other group: a uid of its own
 * per sandbox (jail_vmm_uid, from its vsock CID) and a group all VMMs
 * share (JAIL_VMM_GID), through which a fork's VMM reads its parent's
 * checkpoint files (created group-readable, in directories that are the
 * user's alone).  uid 0 without capabilities still owns root's files; this
 * uid owns only what the supervisor handed over (supervisor/vmm_files.h).
 *
 * cgroup limits are the supervisor's (supervisor/cgroup.h): it places the
 * VMM before exec. */
#ifndef KOSA8_VMM_JAIL_H
#define KOSA8_VMM_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JAIL_MAX_PATHS 64

struct jail_path {
	const char *path;  /* absolute; a file or a directory */
	bool writable;
};

struct jail {
	struct jail_path paths[JAIL_MAX_PATHS];
	size_t npaths;
	bool set_user;     /* as root: end as uid/gid below */
	uid_t uid;
	gid_t gid;
};

/* The ids kosa8 takes for VMMs run by root: 0x6b380000 ("k8") and the
 * 65535 above it, a range no distribution hands out.  The group is the
 * first; each sandbox's uid is the base plus the low 16 bits of its vsock
 * CID (unique among running sandboxes, and >= 3). */
#define JAIL_ID_BASE 0x6b380000u
#define JAIL_VMM_GID ((gid_t)JAIL_ID_BASE)

static inline uid_t jail_vmm_uid(uint64_t cid)
{
	return (uid_t)(JAIL_ID_BASE + (cid & 0xffff));
}

static inline bool jail_is_vmm_id(uint32_t id)
{
	return id >= JAIL_ID_BASE && id <= JAIL_ID_BASE + 0xffff;
}

/* Adds a path to expose (resolved to an absolute path, which must exist).
 * -E2BIG when full, -ENOENT etc. from realpath. */
int jail_add(struct jail *j, const char *path, bool writable);
/* Enters the jail.  The process must be single-threaded.  -errno with *why. */
int jail_enter(const struct jail *j, const char **why);

#endif
