/* The one guarded writer: every tree of files a peer (the guest, for the
 * host) supplies is written through it, whether it arrives as a tree stream
 * (agentproto/tree.c: kosa8 cp, diff, export) or is copied from a staging
 * folder (export --apply).
 *
 * What it promises, whatever the names, targets and order of the entries:
 *  - nothing is created, changed or removed outside the root: every path is
 *    resolved from the root with openat2(RESOLVE_BENEATH |
 *    RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), so no symlink, whether
 *    the stream made it or it was there before, is ever followed or used
 *    as a parent;
 *  - a leaf is created new (O_EXCL | O_NOFOLLOW, after removing a
 *    non-directory in its place): an existing file, a hard link to
 *    something else or a FIFO there is never opened or written through;
 *  - only regular files, directories and symlinks exist; a symlink is
 *    written as a link whose target climbs ("..") only before its first
 *    name, so that no chain of such links leaves; every link made is
 *    checked once the tree is complete: one whose target leads out of the
 *    root (through a link the host had there) is removed and reported;
 *  - names are checked: relative, no "", "." or ".." component, no NUL,
 *    at most GW_MAX_PATH bytes and NAME_MAX per component;
 *  - modes are masked (by default setuid, setgid and sticky go, and the
 *    umask applies), owners are the caller's choice, and the bytes and
 *    entries written can be bounded.
 * Every function returns 0 or -errno and leaves a message in g->err. */
#ifndef KOSA8_COMMON_GUARDED_H
#define KOSA8_COMMON_GUARDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GW_MAX_PATH 4096

struct gw_opts {
	uint32_t mode_mask;   /* applied to every mode; 0 means 0777 & ~umask */
	bool chown;           /* give everything created to uid:gid */
	uid_t uid;
	gid_t gid;
	uint64_t max_bytes;   /* file data and link targets, 0: no bound */
	uint64_t max_entries; /* entries created, 0: no bound */
};

struct gw {
	int rootfd;
	struct gw_opts o;
	uint64_t bytes, entries;
	uint32_t special_dropped; /* entries whose setuid/setgid/sticky bits went */
	char *links;              /* paths of the links made, NUL-separated */
	size_t links_len, links_cap;
	char err[400];
};

/* Opens the existing directory dir as the root.  dir is the caller's own
 * choice and may itself be reached through a symlink. */
int gw_open(struct gw *g, const char *dir, const struct gw_opts *o);
/* Checks a relative entry path (see above); 0 or -EBADMSG. */
int gw_path_check(const char *path, size_t len);
/* Whether a symlink at path with this target stays beneath the root when
 * read lexically: relative, never climbing above it, and every ".." before
 * the first name (no "a/..", since a may be or become a link).  Chains
 * through links the host had are judged by gw_finish. */
bool gw_target_inside(const char *path, const char *target);

/* A directory at path: created with mode, or kept as it is if one is there
 * (its mode and owner untouched).  -ENOTDIR if something else is there. */
int gw_dir(struct gw *g, const char *path, uint32_t mode);
/* Every missing directory leading to path's parent, with mode 0755. */
int gw_parents(struct gw *g, const char *path);
/* A new regular file at path for size bytes (counted against max_bytes
 * now); returns its descriptor, to be ended with gw_file_done. */
int gw_file(struct gw *g, const char *path, uint64_t size);
/* Applies mode and closes the file. */
int gw_file_done(struct gw *g, int fd, uint32_t mode);
/* A symlink at path pointing at target (checked when the tree is done). */
int gw_symlink(struct gw *g, const char *path, const char *target);
/* Removes the file or symlink at path (never a directory), then the
 * parent directories it leaves empty.  0 if nothing was there. */
int gw_remove(struct gw *g, const char *path);
/* Refuses an entry that is no file, directory or symlink, with a message
 * saying what it was ("a FIFO", "a hard link to x", ...).  -EPERM. */
int gw_refuse(struct gw *g, const char *path, const char *what);
/* Checks every link made: each one must resolve inside the root (a
 * dangling link to a name inside is fine).  Those that leave are removed;
 * -EXDEV names the first.  Idempotent. */
int gw_finish(struct gw *g);
/* gw_finish, then closes. */
void gw_close(struct gw *g);

/* Opens path beneath dirfd for reading file data a peer supplied: never
 * following a symlink, never blocking on a FIFO, and only if it is a
 * regular file of at most max bytes (0: any size).  fd, size in *size. */
int gw_open_read(int dirfd, const char *path, uint64_t max, uint64_t *size);

/* Reads the symlink at path beneath dirfd, no link followed on the way;
 * its length, or -errno (-ENAMETOOLONG if it does not fit). */
ssize_t gw_read_link(int dirfd, const char *path, char *buf, size_t size);

#endif
