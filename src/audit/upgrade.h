/* Upgrading a format-1 log on disk (docs/audit-format.md, "Upgrading from
 * version 1"): the old files are kept, under names of their own, and the
 * format-2 log that takes the name starts by naming them. */
#ifndef KOSA8_AUDIT_UPGRADE_H
#define KOSA8_AUDIT_UPGRADE_H

#include "audit/format.h"

#define AUDIT_ARCHIVED_TYPE "audit.archived"

/* fd: PATH, open and locked (flock, exclusive).  When PATH holds a whole
 * format-1 header, moves PATH, PATH.heads and PATH.state to PATH.v1-<log
 * id>[.heads|.state] (never over an existing file: -EEXIST, nothing moved),
 * puts a new format-2 log (header only) in its place and returns it in
 * *new_fd, open and locked, with *det (malloc'd) the details of its first
 * record, type "audit.archived" (checked with audit_event_check before
 * anything moves: -EINVAL when the paths are not UTF-8 text).  -EPROTONOSUPPORT when the header is not
 * format 1 (the caller refuses the log as before); -ESTALE when PATH no
 * longer names fd's file (another writer archived it: open it again). */
int audit_v1_archive(const char *path, int fd, int *new_fd, char **det);

/* A new log's file, header only (fresh log id, created now, into *h) and
 * synced, under a temporary name beside path (into tmp) for the caller to
 * link or rename into place: a log appears whole or not at all.  The fd
 * (O_APPEND), or -errno with nothing left behind. */
int audit_new_file(const char *path, char *tmp, size_t cap, struct audit_header *h);

#endif
