/* The VMM's cgroup (cgroup v2): a memory, process-count and CPU ceiling per
 * sandbox, so that a guest that takes over its VMM cannot take the host's
 * memory or CPU with it (docs/vmm-security.md).
 *
 * Where: kosa8 run as root uses <cgroup2 mount>/kosa8/<sandbox>; a user
 * uses kosa8/<sandbox> below the user@UID.service cgroup that systemd
 * delegates to them.  A controller that cannot be enabled there (cgroup v1
 * owns it, no delegation, no cgroup2 mount) is named in a warning and the
 * sandbox runs without that limit: the jail and seccomp filter stand alone.
 *
 * The supervisor creates the cgroup and starts the VMM's process in it
 * (or moves it there before it execs), so every page of guest memory is
 * charged to it. */
#ifndef KOSA8_SUPERVISOR_CGROUP_H
#define KOSA8_SUPERVISOR_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Above the guest's RAM the VMM needs its own heap, thread stacks, the
 * sanitizer build's quarantine (256 MiB by default) and the disk layers'
 * page cache (reclaimed at the ceiling, never a reason to kill). */
#define VMM_CGROUP_MEM_SLACK (512ull << 20)
/* The VMM's threads: vCPUs, devices, control; clone is refused by its
 * seccomp filter after set-up anyway. */
#define VMM_CGROUP_PIDS 128

struct vmm_cgroup {
	char path[PATH_MAX]; /* "" when the VMM runs without one */
	char limits[160];    /* what was applied, for the log: "memory.max=... " */
};

struct vmm_cgroup_limits {
	uint64_t mem;  /* guest RAM, bytes */
	int cpus;      /* vCPUs: cpu.max allows one CPU more, for the devices */
};

/* Creates (or reuses) the sandbox's cgroup and writes its limits.  0 with
 * cg->limits naming what was applied (some controllers may be missing:
 * then why says which); -errno with why when there is no usable cgroup
 * (cg->path is then ""). */
int vmm_cgroup_create(struct vmm_cgroup *cg, const char *sandbox, const struct vmm_cgroup_limits *lim,
		      char *why, size_t whylen);
/* After a live fork the VMM's cgroup holds the frozen guest memory the
 * forks map (charged to it, and not reclaimable without swap) beside the
 * VMM's own copies of the pages the guest writes after: up to twice the
 * guest's RAM.  Raises memory.max to that (nothing when there is no
 * cgroup or no memory controller). */
int vmm_cgroup_allow_frozen(struct vmm_cgroup *cg, uint64_t guest_mem);
/* Where kosa8's per-sandbox cgroups go (<mount>/kosa8 for root, below
 * user@UID.service for a user), found without creating anything: 0, or
 * -errno with why. */
int vmm_cgroup_parent(char *dir, size_t len, char *why, size_t whylen);
/* cg's directory, for starting a process in it (vmm_clone): a descriptor,
 * or -errno (-ENOENT when cg has no path). */
int vmm_cgroup_open(const struct vmm_cgroup *cg);
/* Moves process pid into cg (nothing when cg has no path). */
int vmm_cgroup_add(const struct vmm_cgroup *cg, pid_t pid);
/* Removes the cgroup once no process is left in it. */
void vmm_cgroup_remove(struct vmm_cgroup *cg);

/* Parsing, apart for the unit tests: the cgroup2 mount point in a
 * /proc/self/mountinfo text, and the v2 path in a /proc/self/cgroup text. */
int cgroup_find_mount(const char *mountinfo, char *out, size_t len);
int cgroup_own_path(const char *proc_cgroup, char *out, size_t len);
/* The parent directory (relative to the mount) for kosa8's cgroups:
 * "kosa8" for root; ".../user@UID.service/kosa8" for a user. */
int cgroup_kosa8_parent(const char *own, unsigned uid, char *out, size_t len);

#endif
