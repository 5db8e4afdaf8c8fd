/* Handing a root-run VMM the files it works on.
 *
 * As root the supervisor runs each VMM as a uid of its own and the group
 * all VMMs share (vmm/jail.h).  Before each start it gives that uid what
 * the VMM writes: the directory of its sockets (and the egress sockets in
 * it, made by the supervisor), the checkpoint directory (made setgid to the
 * shared group, so that files root creates there later are the group's
 * too) and every kosa8 file in it, and the sandbox's first delta.  What is
 * taken: files owned by root (made by the supervisor or CLI, or by a VMM
 * of an older kosa8 that ran as root) or by another VMM uid; symbolic
 * links are never followed nor changed; nothing deeper than a checkpoint's
 * own files is visited.  A fork's VMM reads its parent's checkpoint through
 * the group: VMMs create files group-readable (umask 027).
 *
 * The directories these live in (the sandbox's state and runtime
 * directories) stay root's and 0700: no other host user gets in. */
#ifndef KOSA8_SUPERVISOR_VMM_FILES_H
#define KOSA8_SUPERVISOR_VMM_FILES_H

#include <stddef.h>
#include <sys/types.h>

struct vmm_files {
	const char *vm_dir;     /* sockets: the VMM's own and the egress listeners */
	const char *ckpt_dir;   /* checkpoints and their deltas */
	const char *first_disk; /* state_dir/disk.k8d: the top until the first checkpoint */
	const char *top;        /* the delta the VMM will write (may be one of the above) */
	uid_t uid;
	gid_t gid;
};

/* 0, or -errno with why naming the file. */
int vmm_files_hand_over(const struct vmm_files *f, char *why, size_t whylen);

#endif
