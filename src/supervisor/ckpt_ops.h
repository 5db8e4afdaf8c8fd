/* Checkpoint, rewind and checkpoint rm on disk (checkpoints.h for the
 * layout).  Each returns 0 or -errno with a one-line reason in err. */
#ifndef KOSA8_SUPERVISOR_CKPT_OPS_H
#define KOSA8_SUPERVISOR_CKPT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/checkpoints.h"

/* How long the VMM may take to write a checkpoint (a large guest under
 * software emulation is slow). */
#define CKPT_VMM_TIMEOUT_MS (300 * 1000)

/* state_dir/checkpoints/<id> into buf. */
int ckpt_dir_of(char *buf, size_t len, const char *state_dir, const char *id);
/* current.json, or the sandbox's first delta when there is none. */
int ckpt_current(const char *state_dir, struct ckpt_meta *cur, char *err, size_t errlen);

/* Asks the VMM at vm_ctl for a checkpoint with the next id, records it and
 * moves current.json to the new delta.  *out gets the record.  With memfd
 * (a live fork, vm_checkpoint_live): *memfd gets a read-only descriptor of
 * the VMM's frozen memory for the forks to map, or -1 when the VMM had none
 * to give (then the checkpoint's memory file is complete on return). */
int ckpt_take(const char *state_dir, const char *vm_ctl, const char *message,
	      struct ckpt_meta *out, int *memfd, char *err, size_t errlen);

/* Checks that checkpoint id loads (a damaged one is refused here, before
 * the running VM is touched) and creates the delta the restored VM will
 * write to, over the checkpoint's frozen disk. */
int ckpt_rewind_prepare(const char *state_dir, const char *id, char *restore_dir, size_t rlen,
			char *new_top, size_t tlen, char *err, size_t errlen);
/* After the VM runs from the checkpoint: records new_top as the current
 * disk and deletes the delta written since (*freed: its bytes). */
int ckpt_rewind_commit(const char *state_dir, const char *id, const char *new_top,
		       uint64_t *freed);

/* Deletes checkpoint id: its memory and state, and its frozen disk delta
 * unless the current disk or another checkpoint stands on it.  Children are
 * re-parented.  *freed: bytes given back. */
int ckpt_remove(const char *state_dir, const char *id, uint64_t *freed, char *err, size_t errlen);

/* A checkpoint that failed, or whose supervisor was killed, after the VMM
 * froze the top leaves current.json naming that frozen delta.  This moves
 * it to the delta the VMM went on writing (or a new one over the frozen
 * one): the sandbox goes on (or boots, as after a power loss) with nothing
 * lost, every recorded checkpoint stays, the unfinished one's files go and
 * its number stays unused.  A new delta left over a top that was never
 * frozen is removed.  Safe while the VMM runs (headers are read without
 * locks).  1 when it changed something, 0 when there was nothing to do,
 * else -errno (err). */
int ckpt_recover_top(const char *state_dir, char *err, size_t errlen);

/* A VMM killed while it wrote a checkpoint leaves checkpoints/cN.tmp-PID
 * (vm_checkpoint.c builds it there and renames it whole).  Removes every
 * such directory and its files (never following a link): only while no
 * VMM runs for the sandbox, i.e. by a supervisor that holds its owner lock
 * before it starts one.  How many went; *freed: bytes given back. */
int ckpt_sweep_tmp(const char *state_dir, uint64_t *freed);

/* ---- forks ----
 * A fork is a new sandbox that runs from another sandbox's checkpoint: its
 * own delta over the checkpoint's frozen disk chain, the checkpoint's memory
 * mapped copy-on-write.  It reads the parent's files, so the parent keeps
 * them: state_dir/ckmeta/<id>.forks/<child> pins checkpoint id for child,
 * and checkpoint rm and rm of the parent are refused while a pinned child
 * exists.  The child's state dir holds fork.json until its first start has
 * run from the checkpoint. */
#define CKPT_FORK_FILE "fork.json"

struct ckpt_fork {
	char parent[64];            /* the parent sandbox's name */
	char id[CKPT_ID_LEN];       /* its checkpoint */
	char restore[PATH_MAX];     /* that checkpoint's directory */
};

/* Sets up child_dir (which exists, the child's sandbox.json aside) to run
 * from checkpoint id of the sandbox in parent_dir: its disk.k8d over the
 * checkpoint's chain, fork.json, the pin. */
int ckpt_fork_prepare(const char *parent_dir, const char *parent, const char *id,
		      const char *child_dir, const char *child, char *err, size_t errlen);
/* fork.json of a sandbox: 0, -ENOENT when it is no (new) fork, -EBADMSG. */
int ckpt_fork_load(const char *state_dir, struct ckpt_fork *f);
/* After the first run from the checkpoint: fork.json becomes forked.json
 * (kept for the record; a later start boots the fork's own disk). */
int ckpt_fork_done(const char *state_dir);
/* The first child (in buf) of a fork that still exists and runs from
 * checkpoint id (NULL: any checkpoint) of the sandbox in state_dir: 1, or 0
 * when there is none.  Pins of children that are gone are removed. */
int ckpt_live_fork(const char *state_dir, const char *id, char *buf, size_t len);

/* "layer" when the checkpoint's memory holds only the pages written since
 * the checkpoint below it, "full", or "?" when its state cannot be read. */
const char *ckpt_memory_kind(const char *state_dir, const char *id);

/* Bytes a checkpoint's memory and state files take; *disk_bytes those of
 * its frozen delta. */
uint64_t ckpt_size(const char *state_dir, const struct ckpt_meta *m, uint64_t *disk_bytes);

#endif
