/* The guarded writer (see guarded.h). */
#include "common/guarded.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fileio.h"

/* No symlink, whoever made it, is followed while writing. */
#define GW_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

static int fail(struct gw *g, int e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->err, sizeof(g->err), fmt, ap);
	va_end(ap);
	return e;
}

static int open2(int dfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = { .flags = (uint64_t)flags | O_CLOEXEC, .resolve = resolve };
	long fd = syscall(SYS_openat2, dfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

int gw_path_check(const char *path, size_t len)
{
	size_t i = 0;

	if (len == 0 || len > GW_MAX_PATH || memchr(path, 0, len))
		return -EBADMSG;
	while (i <= len) {
		size_t j = i;
		while (j < len && path[j] != '/')
			j++;
		size_t n = j - i;
		if (n == 0 || n > NAME_MAX || (n == 1 && path[i] == '.') ||
		    (n == 2 && path[i] == '.' && path[i + 1] == '.'))
			return -EBADMSG;
		i = j + 1;
	}
	return 0;
}

int gw_open(struct gw *g, const char *dir, const struct gw_opts *o)
{
	mode_t um = umask(0);

	umask(um);
	memset(g, 0, sizeof(*g));
	g->rootfd = -1;
	if (o)
		g->o = *o;
	if (!g->o.mode_mask)
		g->o.mode_mask = 0777 & ~um;
	g->rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g->rootfd < 0)
		return fail(g, -errno, "cannot open %s: %s", dir, strerror(errno));
	return 0;
}

/* The directory holding path, opened beneath the root without following
 * any symlink; its last component goes to base. */
static int open_parent(struct gw *g, const char *path, const char **base)
{
	char dir[GW_MAX_PATH + 1];
	size_t len = strlen(path);
	int fd;

	if (gw_path_check(path, len))
		return fail(g, -EBADMSG, "%.300s: refused name (absolute, empty, '.' or '..' "
				 "component, or too long)", path);
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!slash)
		return open2(g->rootfd, ".", O_PATH | O_DIRECTORY, GW_RESOLVE);
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = 0;
	fd = open2(g->rootfd, dir, O_PATH | O_DIRECTORY, GW_RESOLVE);
	if (fd == -ELOOP)
		return fail(g, -ELOOP, "%.300s: a parent directory is a symlink (not followed)", path);
	if (fd < 0)
		return fail(g, fd, "%.300s: parent directory: %s", path, strerror(-fd));
	return fd;
}

static int own(struct gw *g, int fd)
{
	return g->o.chown && fchown(fd, g->o.uid, g->o.gid) < 0 ? -errno : 0;
}

static mode_t masked(struct gw *g, uint32_t mode)
{
	if ((mode & 07000) && (mode & 07000 & ~g->o.mode_mask))
		g->special_dropped++;
	return (mode_t)(mode & g->o.mode_mask);
}

static int count_entry(struct gw *g, const char *path)
{
	if (g->o.max_entries && g->entries >= g->o.max_entries)
		return fail(g, -EDQUOT, "%.300s: more than %llu entries: over the bound", path,
			    (unsigned long long)g->o.max_entries);
	g->entries++;
	return 0;
}

int gw_dir(struct gw *g, const char *path, uint32_t mode)
{
	const char *base;
	int pfd = open_parent(g, path, &base), fd, rc;

	if (pfd < 0)
		return pfd;
	if ((rc = count_entry(g, path))) {
		close(pfd);
		return rc;
	}
	bool made = mkdirat(pfd, base, 0700) == 0;
	if (!made && errno != EEXIST) {
		rc = -errno;
		close(pfd);
		return fail(g, rc, "%.300s: %s", path, strerror(-rc));
	}
	fd = open2(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, GW_RESOLVE);
	close(pfd);
	if (fd == -ELOOP || fd == -ENOTDIR)
		return fail(g, -ENOTDIR, "%.300s: %s is there, not a directory (not followed)", path,
			    fd == -ELOOP ? "a symlink" : "something");
	if (fd < 0)
		return fail(g, fd, "%.300s: %s", path, strerror(-fd));
	/* A directory that was there keeps its owner and mode. */
	rc = made ? own(g, fd) : 0;
	if (rc == 0 && made && fchmod(fd, masked(g, mode)) < 0)
		rc = -errno;
	close(fd);
	return rc ? fail(g, rc, "%.300s: %s", path, strerror(-rc)) : 0;
}

int gw_parents(struct gw *g, const char *path)
{
	char p[GW_MAX_PATH + 1];
	size_t n = strlen(path);
	int rc;

	if (gw_path_check(path, n))
		return fail(g, -EBADMSG, "%.300s: refused name", path);
	memcpy(p, path, n + 1);
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '/')
			continue;
		p[i] = 0;
		int fd = open2(g->rootfd, p, O_PATH | O_DIRECTORY, GW_RESOLVE);
		if (fd >= 0)
			close(fd);
		else if (fd == -ENOENT && (rc = gw_dir(g, p, 0755)))
			return rc;
		else if (fd < 0 && fd != -ENOENT)
			return fail(g, fd, "%.300s: %s%s", p, strerror(-fd),
				    fd == -ELOOP ? " (a symlink, not followed)" : "");
		p[i] = '/';
	}
	return 0;
}

/* Removes a non-directory at base so that a new entry takes its place:
 * whatever was there (a file, a hard link, a FIFO, a symlink) is unlinked,
 * never opened. */
static int clear_slot(struct gw *g, int pfd, const char *base, const char *path)
{
	if (unlinkat(pfd, base, 0) < 0 && errno != ENOENT)
		return fail(g, errno == EISDIR ? -EISDIR : -errno, "%.300s: %s", path,
			    errno == EISDIR ? "a directory is there" : strerror(errno));
	return 0;
}

/* Charges size bytes against max_bytes: file data, and a link's target,
 * which the host disk holds as well. */
static int charge(struct gw *g, const char *path, uint64_t size)
{
	if (g->o.max_bytes && size > g->o.max_bytes - g->bytes)
		return fail(g, -EDQUOT, "%.300s: %llu more bytes would pass the bound of %llu bytes",
			    path, (unsigned long long)size, (unsigned long long)g->o.max_bytes);
	return 0;
}

int gw_file(struct gw *g, const char *path, uint64_t size)
{
	const char *base;
	int pfd, fd, rc;

	if ((rc = charge(g, path, size)))
		return rc;
	if ((pfd = open_parent(g, path, &base)) < 0)
		return pfd;
	rc = count_entry(g, path) ?: clear_slot(g, pfd, base, path);
	if (rc) {
		close(pfd);
		return rc;
	}
	fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	rc = fd < 0 ? -errno : own(g, fd);
	close(pfd);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return fail(g, rc, "%.300s: %s", path, strerror(-rc));
	}
	g->bytes += size;
	return fd;
}

int gw_file_done(struct gw *g, int fd, uint32_t mode)
{
	int rc = fchmod(fd, masked(g, mode)) < 0 ? -errno : 0;

	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc ? fail(g, rc, "chmod: %s", strerror(-rc)) : 0;
}

/* A target that is absolute or climbs above the root when read lexically
 * from the link's directory is refused at once, and so is one that climbs
 * after a name ("a/.."): that name may be, or later become, a link, and
 * its ".." then climbs from wherever the link leads, which no sweep of the
 * links made by one tree sees when the link comes in a later tree.  With
 * every climb first, each link climbs only from its own real directory, so
 * a chain of such links stays inside; links the host had there are caught
 * by gw_finish. */
bool gw_target_inside(const char *path, const char *target)
{
	long depth = 0;
	bool named = false;
	size_t i = 0, tlen = strlen(target);

	if (!tlen || tlen > GW_MAX_PATH || target[0] == '/')
		return false;
	for (const char *p = path; *p; p++)
		depth += *p == '/';
	while (i < tlen) {
		size_t j = i;
		while (j < tlen && target[j] != '/')
			j++;
		size_t n = j - i;
		if (n == 2 && target[i] == '.' && target[i + 1] == '.') {
			if (named || --depth < 0)
				return false;
		} else if (n > 0 && !(n == 1 && target[i] == '.')) {
			named = true;
		}
		i = j + 1;
	}
	return true;
}

static int remember_link(struct gw *g, const char *path)
{
	size_t n = strlen(path) + 1;

	if (g->links_len + n > g->links_cap) {
		size_t cap = g->links_cap ? g->links_cap * 2 : 4096;
		while (cap < g->links_len + n)
			cap *= 2;
		char *p = realloc(g->links, cap);
		if (!p)
			return -ENOMEM;
		g->links = p;
		g->links_cap = cap;
	}
	memcpy(g->links + g->links_len, path, n);
	g->links_len += n;
	return 0;
}

int gw_symlink(struct gw *g, const char *path, const char *target)
{
	const char *base;
	int pfd, rc;

	if (!gw_target_inside(path, target))
		return fail(g, -EXDEV, "%.300s: symlink target %.300s leaves the destination", path,
			    target);
	if ((rc = charge(g, path, strlen(target))))
		return rc;
	if ((pfd = open_parent(g, path, &base)) < 0)
		return pfd;
	rc = count_entry(g, path) ?: clear_slot(g, pfd, base, path);
	if (rc == 0 && symlinkat(target, pfd, base) < 0)
		rc = fail(g, -errno, "%.300s: %s", path, strerror(errno));
	if (rc == 0 && (rc = remember_link(g, path)))
		unlinkat(pfd, base, 0);
	if (rc == 0 && g->o.chown && fchownat(pfd, base, g->o.uid, g->o.gid, AT_SYMLINK_NOFOLLOW) < 0)
		rc = fail(g, -errno, "%.300s: %s", path, strerror(errno));
	if (rc == 0)
		g->bytes += strlen(target);
	close(pfd);
	return rc == -ENOMEM ? fail(g, rc, "out of memory") : rc;
}

/* Removes the empty directories above path, deepest first. */
static void prune_parents(struct gw *g, const char *path)
{
	char p[GW_MAX_PATH + 1];
	char *slash;
	const char *base;

	snprintf(p, sizeof(p), "%s", path);
	while ((slash = strrchr(p, '/'))) {
		*slash = 0;
		int pfd = open_parent(g, p, &base);
		if (pfd < 0)
			return;
		int rc = unlinkat(pfd, base, AT_REMOVEDIR);
		close(pfd);
		if (rc < 0)
			return;
	}
}

int gw_remove(struct gw *g, const char *path)
{
	const char *base;
	int pfd = open_parent(g, path, &base);

	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	int rc = unlinkat(pfd, base, 0) < 0 && errno != ENOENT ? -errno : 0;
	close(pfd);
	if (rc)
		return fail(g, rc, "%.300s: %s", path, rc == -EISDIR ? "a directory is there" :
								     strerror(-rc));
	prune_parents(g, path);
	g->err[0] = 0;
	return 0;
}

int gw_refuse(struct gw *g, const char *path, const char *what)
{
	return fail(g, -EPERM, "%.300s: %s; only files, directories and symlinks are copied", path,
		    what);
}

/* A link made here whose resolution leaves the root: the kernel follows
 * every link on the way (RESOLVE_BENEATH) and says EXDEV. */
static bool link_escapes(struct gw *g, const char *path)
{
	int fd = open2(g->rootfd, path, O_PATH, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);

	if (fd >= 0)
		close(fd);
	return fd == -EXDEV;
}

int gw_finish(struct gw *g)
{
	int rc = 0;

	for (size_t off = 0; g->rootfd >= 0 && off < g->links_len; off += strlen(g->links + off) + 1) {
		const char *path = g->links + off, *base;
		struct stat st;
		if (!link_escapes(g, path))
			continue;
		int pfd = open_parent(g, path, &base);
		if (pfd >= 0 && fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			unlinkat(pfd, base, 0);
		if (pfd >= 0)
			close(pfd);
		if (!rc)
			rc = fail(g, -EXDEV, "%.300s: symlink leads out of the destination through "
					     "other links; removed", path);
	}
	g->links_len = 0;
	return rc;
}

void gw_close(struct gw *g)
{
	char keep[sizeof(g->err)];

	/* Links made before a failure are checked too; the first error stays. */
	memcpy(keep, g->err, sizeof(keep));
	if (gw_finish(g) && keep[0])
		memcpy(g->err, keep, sizeof(keep));
	free(g->links);
	g->links = NULL;
	g->links_cap = 0;
	if (g->rootfd >= 0)
		close(g->rootfd);
	g->rootfd = -1;
}

int gw_open_read(int dirfd, const char *path, uint64_t max, uint64_t *size)
{
	int fd = open2(dirfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, GW_RESOLVE), rc;
	size_t n;

	if (fd < 0)
		return fd;
	if ((rc = fd_regular_size(fd, max ? max : UINT64_MAX, &n))) {
		close(fd);
		return rc;
	}
	*size = n;
	return fd;
}

ssize_t gw_read_link(int dirfd, const char *path, char *buf, size_t size)
{
	const char *slash = strrchr(path, '/');
	char dir[GW_MAX_PATH + 1];
	int pfd;

	if (strlen(path) > GW_MAX_PATH)
		return -ENAMETOOLONG;
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	if ((pfd = open2(dirfd, dir, O_PATH | O_DIRECTORY, GW_RESOLVE)) < 0)
		return pfd;
	ssize_t n = readlinkat(pfd, slash ? slash + 1 : path, buf, size);
	int e = errno;
	close(pfd);
	if (n < 0)
		return -e;
	if ((size_t)n >= size)
		return -ENAMETOOLONG;
	buf[n] = 0;
	return n;
}
