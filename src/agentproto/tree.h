/* Directory-tree streams of the agent protocol (AP_ENTRY, AP_DATA,
 * AP_FILE_END, AP_TREE_END), both directions, shared by the agent (put =
 * receive, get = send) and the host client (the reverse).
 *
 * The receiver is the security boundary: every path is checked with
 * ap_path_check, every symlink target with ap_symlink_check, and every file
 * is created through openat2(RESOLVE_BENEATH) relative to the target
 * directory, so neither "..", nor absolute symlinks, nor symlinks already
 * present in the target can make it write outside. */
#ifndef KOSA8_AGENTPROTO_TREE_H
#define KOSA8_AGENTPROTO_TREE_H

#include <sys/types.h>

#include "agentproto/conn.h"

struct ap_tree_stats {
	uint32_t entries;
	uint64_t bytes;
};

struct ap_tree_writer {
	int rootfd;
	int fd;               /* file being written, or -1 */
	uint32_t mode;        /* its mode, applied at AP_FILE_END */
	uint64_t want, got;
	uint32_t crc;
	bool chown;
	uid_t uid;
	gid_t gid;
	struct ap_tree_stats st;
	char err[320];        /* message for the last failure */
};

/* Creates dir (and parents) if missing and opens it as the tree root.
 * When chown is set, everything created is given to uid:gid. */
int ap_tw_open(struct ap_tree_writer *w, const char *dir, bool chown, uid_t uid, gid_t gid);
/* Applies one frame: 0 to go on, 1 after a correct AP_TREE_END, -errno with
 * w->err set otherwise (the stream is then unusable). */
int ap_tw_frame(struct ap_tree_writer *w, const struct ap_frame *f);
void ap_tw_close(struct ap_tree_writer *w);

/* Sends path (a file, symlink or directory, recursively) as a tree stream on
 * chan, blocking, ending with AP_TREE_END.  A directory's contents are sent
 * relative to it; a single file or symlink under its base name.  Sockets,
 * fifos and devices are skipped.  -errno with err filled on failure (the
 * stream is then cut short; the caller reports the error). */
int ap_tree_send(struct ap_conn *c, uint32_t chan, const char *path,
		 struct ap_tree_stats *st, char *err, size_t errsz);

#endif
