/* Directory-tree streams of the agent protocol (AP_ENTRY, AP_DATA,
 * AP_FILE_END, AP_TREE_END), both directions, shared by the agent (put =
 * receive, get = send) and the host client (the reverse).
 *
 * The receiver is the security boundary, and it writes only through the
 * guarded writer (common/guarded.h): no symlink followed, no special file,
 * links that lead out removed, modes masked, sizes bounded.  This file only
 * checks the stream's framing, lengths and checksums. */
#ifndef KOSA8_AGENTPROTO_TREE_H
#define KOSA8_AGENTPROTO_TREE_H

#include <sys/types.h>

#include "agentproto/conn.h"
#include "common/guarded.h"

struct ap_tree_stats {
	uint32_t entries;
	uint64_t bytes;
	uint32_t special_dropped; /* receiver: entries whose setuid/setgid/sticky bits went */
};

struct ap_tree_writer {
	struct gw g;
	int fd;               /* file being written, or -1 */
	uint32_t mode;        /* its mode, applied at AP_FILE_END */
	uint64_t want, got;
	uint32_t crc;
	struct ap_tree_stats st;
	char err[400];        /* message for the last failure */
};

/* Creates dir (and parents) if missing and opens it as the tree root; o
 * (NULL: the defaults) says modes, owner and bounds (common/guarded.h). */
int ap_tw_open(struct ap_tree_writer *w, const char *dir, const struct gw_opts *o);
/* Applies one frame: 0 to go on, 1 after a correct AP_TREE_END, -errno with
 * w->err set otherwise (the stream is then unusable). */
int ap_tw_frame(struct ap_tree_writer *w, const struct ap_frame *f);
/* Checks the links made if the stream did not end well (removing those
 * that lead out), fills st.special_dropped, closes. */
void ap_tw_close(struct ap_tree_writer *w);

/* Sends path (a file, symlink or directory, recursively) as a tree stream on
 * chan, blocking, ending with AP_TREE_END.  A directory's contents are sent
 * relative to it; a single file or symlink under its base name.  Sockets,
 * fifos and devices are skipped.  -errno with err filled on failure (the
 * stream is then cut short; the caller reports the error). */
int ap_tree_send(struct ap_conn *c, uint32_t chan, const char *path,
		 struct ap_tree_stats *st, char *err, size_t errsz);

#endif
