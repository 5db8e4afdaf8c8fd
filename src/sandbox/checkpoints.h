/* A sandbox's checkpoints on disk, as the supervisor records them and the
 * CLI reads them.
 *
 *   state dir/checkpoints/     the jailed VMM's --checkpoint-dir, the only
 *                              place it may write files (vmm/jail.h):
 *     cN/state, cN/memory      checkpoint N (docs/snapshot-format.md)
 *     dN.k8d                   the disk delta the VM writes to after
 *                              checkpoint or rewind N (frozen by the next
 *                              checkpoint)
 *   state dir/ckmeta/          the supervisor's records, out of the VMM's
 *                              reach (a VMM taken over by the guest could
 *                              otherwise rewrite the tree):
 *     cN.json                  {"id","parent","created","message",
 *                               "memory_bytes","paused_ms"}
 *     current.json             {"top","parent","next","chain":[...]}: the
 *                              delta the VM writes to, the checkpoint it
 *                              descends from, the next free N, and the
 *                              frozen layers under the top (bottom first)
 *
 * Ids are "c" and a number, never reused within a sandbox.  The parser takes
 * files a user (or a bug) may have damaged: every field is type- and
 * bounds-checked and a bad file is refused with one line.  It is fuzzed by
 * fuzz/fuzz_ckpt_meta.c. */
#ifndef KOSA8_SANDBOX_CHECKPOINTS_H
#define KOSA8_SANDBOX_CHECKPOINTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_ID_LEN 16          /* "c" + up to 9 digits, NUL */
#define CKPT_MSG_MAX 512        /* bytes of a message, NUL included */
#define CKPT_MAX_CHAIN 256      /* DISK_MAX_LAYERS */
#define CKPT_META_MAX (1 << 20) /* bytes of one metadata file */
#define CKPT_DIR "checkpoints"
#define CKPT_META_DIR "ckmeta"
#define CKPT_CURRENT "current"

struct ckpt_meta {
	char id[CKPT_ID_LEN];      /* "cN", or "current" */
	char parent[CKPT_ID_LEN];  /* "" when none */
	int64_t created;           /* unix seconds */
	char message[CKPT_MSG_MAX];
	uint64_t memory_bytes;     /* guest RAM written (holes not counted) */
	double paused_ms;
	/* current.json only */
	char top[PATH_MAX];
	unsigned next;
	char *chain[CKPT_MAX_CHAIN];
	int nchain;
};

/* "c" followed by 1..9 digits, no leading zero. */
bool ckpt_id_valid(const char *id);
/* Printable text (no control characters), shorter than CKPT_MSG_MAX. */
bool ckpt_message_valid(const char *msg);

/* Parses one metadata file (cN.json or current.json).  0, or -EBADMSG with
 * a one-line reason in err.  Free with ckpt_meta_free. */
int ckpt_meta_parse(const char *text, size_t len, struct ckpt_meta *m, char *err, size_t errlen);
/* The JSON text of m (malloc'd), or NULL without memory. */
char *ckpt_meta_format(const struct ckpt_meta *m);
void ckpt_meta_free(struct ckpt_meta *m);
/* Adds a copy of path to m's chain.  -E2BIG when full. */
int ckpt_meta_chain_add(struct ckpt_meta *m, const char *path);

/* Files: state_dir/ckmeta/<id>.json, written to a temporary file, fsync'ed
 * and renamed into place. */
int ckpt_meta_load(const char *state_dir, const char *id, struct ckpt_meta *m, char *err,
		   size_t errlen);
int ckpt_meta_save(const char *state_dir, const struct ckpt_meta *m);
/* Every checkpoint's metadata, sorted by number; *n set.  Damaged files are
 * skipped with a warning. */
int ckpt_meta_list(const char *state_dir, struct ckpt_meta **out, int *n);

#endif
