/* Tree streams: a safe extractor and a recursive sender (see tree.h). */
#include "agentproto/tree.h"

#include "common/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL(w, e, ...) (snprintf((w)->err, sizeof((w)->err), __VA_ARGS__), (e))

/* A failure of the guarded writer, once it returned: its message becomes
 * the stream's. */
static int gw_failed(struct ap_tree_writer *w, int e)
{
	snprintf(w->err, sizeof(w->err), "%s", w->g.err);
	return e;
}

int ap_tw_open(struct ap_tree_writer *w, const char *dir, const struct gw_opts *o)
{
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->g.rootfd = -1;
	int rc = mkdir_p(dir, 0755);
	if (rc)
		return FAIL(w, rc, "cannot create %s: %s", dir, strerror(-rc));
	rc = gw_open(&w->g, dir, o);
	return rc ? gw_failed(w, rc) : 0;
}

void ap_tw_close(struct ap_tree_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	gw_close(&w->g);
	w->st.special_dropped = w->g.special_dropped;
}

static const char *refused_kind(uint8_t kind)
{
	switch (kind) {
	case AP_E_HARDLINK: return "a hard link";
	case AP_E_FIFO: return "a FIFO";
	case AP_E_DEVICE: return "a device node";
	case AP_E_SOCKET: return "a socket";
	default: return NULL;
	}
}

static int on_entry(struct ap_tree_writer *w, const struct ap_frame *f)
{
	struct ap_entry e;
	char path[AP_MAX_PATH + 1], target[AP_MAX_PATH + 1], what[AP_MAX_PATH + 32];
	int rc;

	if (w->fd >= 0)
		return FAIL(w, -EBADMSG, "entry before the previous file ended");
	if (f->h.len && f->p[0] > AP_E_KIND_MAX)
		return FAIL(w, -EBADMSG, "entry of unknown kind %u", f->p[0]);
	if (ap_entry_decode(f->p, f->h.len, &e))
		return FAIL(w, -EBADMSG, "malformed or unsafe entry (path with '..', '.', '//', a "
				      "leading '/' or a NUL)");
	memcpy(path, e.path, e.path_len);
	path[e.path_len] = 0;
	memcpy(target, e.target, e.target_len);
	target[e.target_len] = 0;
	if (refused_kind(e.kind)) {
		snprintf(what, sizeof(what), "%s%s%.300s", refused_kind(e.kind),
			 e.target_len ? " to " : "", target);
		return gw_failed(w, gw_refuse(&w->g, path, what));
	}
	if (e.kind == AP_E_DIR) {
		rc = gw_dir(&w->g, path, e.mode);
	} else if (e.kind == AP_E_SYMLINK) {
		rc = gw_symlink(&w->g, path, target);
	} else if ((rc = gw_file(&w->g, path, e.size)) >= 0) {
		w->fd = rc;
		w->mode = e.mode;
		w->want = e.size;
		w->got = 0;
		w->crc = 0;
		rc = 0;
	}
	if (rc)
		return gw_failed(w, rc);
	w->st.entries++;
	return 0;
}

static int on_data(struct ap_tree_writer *w, const struct ap_frame *f)
{
	if (w->fd < 0)
		return FAIL(w, -EBADMSG, "file data outside a file");
	if (f->h.len > w->want - w->got)
		return FAIL(w, -EBADMSG, "more file data than the entry announced");
	size_t off = 0;
	while (off < f->h.len) {
		ssize_t n = write(w->fd, f->p + off, f->h.len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return FAIL(w, n < 0 ? -errno : -EIO, "write: %s", strerror(n < 0 ? errno : EIO));
		off += (size_t)n;
	}
	w->crc = ap_crc32(w->crc, f->p, f->h.len);
	w->got += f->h.len;
	w->st.bytes += f->h.len;
	return 0;
}

static int on_file_end(struct ap_tree_writer *w, const struct ap_frame *f)
{
	struct ap_rd r;
	uint64_t len;
	uint32_t crc;
	ap_rd_init(&r, f->p, f->h.len);
	if (w->fd < 0 || f->h.len != 12 || ap_get_u64(&r, &len) || ap_get_u32(&r, &crc))
		return FAIL(w, -EBADMSG, "malformed file end");
	if (len != w->want || w->got != w->want)
		return FAIL(w, -EIO, "file length mismatch: got %llu of %llu bytes",
			    (unsigned long long)w->got, (unsigned long long)w->want);
	if (crc != w->crc)
		return FAIL(w, -EIO, "file checksum mismatch (crc32 %08x, expected %08x)", w->crc, crc);
	int rc = gw_file_done(&w->g, w->fd, w->mode);
	w->fd = -1;
	return rc ? gw_failed(w, rc) : 0;
}

static int on_tree_end(struct ap_tree_writer *w, const struct ap_frame *f)
{
	struct ap_rd r;
	uint32_t entries;
	uint64_t bytes;
	ap_rd_init(&r, f->p, f->h.len);
	if (w->fd >= 0 || f->h.len != 12 || ap_get_u32(&r, &entries) || ap_get_u64(&r, &bytes))
		return FAIL(w, -EBADMSG, "malformed tree end");
	if (entries != w->st.entries || bytes != w->st.bytes)
		return FAIL(w, -EIO, "tree mismatch: got %u entries/%llu bytes, sender says %u/%llu",
			    w->st.entries, (unsigned long long)w->st.bytes, entries,
			    (unsigned long long)bytes);
	/* Complete: now every link made can be judged, chains included. */
	int rc = gw_finish(&w->g);
	return rc ? gw_failed(w, rc) : 1;
}

int ap_tw_frame(struct ap_tree_writer *w, const struct ap_frame *f)
{
	switch (f->h.type) {
	case AP_ENTRY:
		return on_entry(w, f);
	case AP_DATA:
		return on_data(w, f);
	case AP_FILE_END:
		return on_file_end(w, f);
	case AP_TREE_END:
		return on_tree_end(w, f);
	default:
		return FAIL(w, -EBADMSG, "unexpected frame type %u in a tree stream", f->h.type);
	}
}

/* ---- sending ---- */

struct sender {
	struct ap_conn *c;
	uint32_t chan;
	struct ap_tree_stats *st;
	char *err;
	size_t errsz;
	char path[AP_MAX_PATH + 1];   /* relative path of the current entry */
};

#define SFAIL(s, e, ...) (snprintf((s)->err, (s)->errsz, __VA_ARGS__), (e))

static int send_frame(struct sender *s, uint16_t type, const void *p, size_t len)
{
	int rc = ap_conn_send(s->c, type, s->chan, p, len);
	if (rc == 0 && ap_conn_pending(s->c) >= 256 * 1024)
		rc = ap_conn_flush_all(s->c);
	return rc ? SFAIL(s, rc, "send: %s", strerror(-rc)) : 0;
}

static int send_entry(struct sender *s, uint8_t kind, const struct stat *sb, const char *target)
{
	struct ap_entry e = {
		.kind = kind,
		.mode = sb->st_mode & 07777,
		.size = kind == AP_E_FILE ? (uint64_t)sb->st_size : 0,
		.path = s->path,
		.path_len = (uint16_t)strlen(s->path),
		.target = target ? target : "",
		.target_len = target ? (uint16_t)strlen(target) : 0,
	};
	struct ap_wr w;
	ap_wr_init(&w);
	ap_entry_encode(&w, &e);
	int rc = ap_wr_status(&w) ? SFAIL(s, -ENOMEM, "out of memory") :
		 send_frame(s, AP_ENTRY, w.p, w.len);
	ap_wr_free(&w);
	if (rc == 0)
		s->st->entries++;
	return rc;
}

static int send_file(struct sender *s, int dfd, const char *name, const struct stat *sb)
{
	/* Never blocks on a FIFO swapped in since the lstat, and sends only
	 * what was stat-ed as a regular file. */
	struct stat now;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return SFAIL(s, -errno, "%s: %s", s->path, strerror(errno));
	if (fstat(fd, &now) < 0 || !S_ISREG(now.st_mode) || now.st_ino != sb->st_ino ||
	    now.st_dev != sb->st_dev) {
		close(fd);
		return SFAIL(s, -EAGAIN, "%s: changed while being copied", s->path);
	}
	uint8_t *buf = malloc(AP_MAX_PAYLOAD);
	if (!buf) {
		close(fd);
		return SFAIL(s, -ENOMEM, "out of memory");
	}
	int rc = send_entry(s, AP_E_FILE, sb, NULL);
	uint64_t left = (uint64_t)sb->st_size;
	uint32_t crc = 0;
	while (rc == 0 && left > 0) {
		ssize_t n = read(fd, buf, left < AP_MAX_PAYLOAD ? left : AP_MAX_PAYLOAD);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = SFAIL(s, n < 0 ? -errno : -EIO, "%s: %s", s->path,
				   n < 0 ? strerror(errno) : "file shrank while being read");
			break;
		}
		crc = ap_crc32(crc, buf, (size_t)n);
		left -= (uint64_t)n;
		s->st->bytes += (uint64_t)n;
		rc = send_frame(s, AP_DATA, buf, (size_t)n);
	}
	close(fd);
	free(buf);
	if (rc == 0) {
		uint8_t end[12];
		struct ap_wr w = { .p = end, .cap = sizeof(end) };
		ap_put_u64(&w, (uint64_t)sb->st_size);
		ap_put_u32(&w, crc);
		rc = send_frame(s, AP_FILE_END, end, sizeof(end));
	}
	return rc;
}

static int send_node(struct sender *s, int dfd, const char *name, int depth);

static int send_dir_contents(struct sender *s, int fd, int depth)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return SFAIL(s, -errno, "%s: %s", s->path, strerror(errno));
	}
	size_t plen = strlen(s->path);
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		size_t nlen = strlen(de->d_name);
		if (plen + 1 + nlen > AP_MAX_PATH) {
			rc = SFAIL(s, -ENAMETOOLONG, "%s/%s: path too long", s->path, de->d_name);
			break;
		}
		if (plen)
			s->path[plen] = '/';
		memcpy(s->path + plen + (plen ? 1 : 0), de->d_name, nlen + 1);
		rc = send_node(s, dirfd(d), de->d_name, depth + 1);
		s->path[plen] = 0;
	}
	closedir(d);
	return rc;
}

static int send_node(struct sender *s, int dfd, const char *name, int depth)
{
	struct stat sb;
	char target[AP_MAX_PATH + 1];
	if (depth > 256)
		return SFAIL(s, -ELOOP, "%s: tree deeper than 256 levels", s->path);
	if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return SFAIL(s, -errno, "%s: %s", s->path, strerror(errno));
	if (S_ISREG(sb.st_mode))
		return send_file(s, dfd, name, &sb);
	if (S_ISLNK(sb.st_mode)) {
		ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
		if (n <= 0)
			return SFAIL(s, -errno, "%s: readlink: %s", s->path, strerror(errno));
		target[n] = 0;
		return send_entry(s, AP_E_SYMLINK, &sb, target);
	}
	if (!S_ISDIR(sb.st_mode))
		return 0;   /* sockets, fifos, devices: not part of a tree copy */
	if (s->path[0]) {
		int rc = send_entry(s, AP_E_DIR, &sb, NULL);
		if (rc)
			return rc;
	}
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return SFAIL(s, -errno, "%s: %s", s->path, strerror(errno));
	return send_dir_contents(s, fd, depth);
}

int ap_tree_send(struct ap_conn *c, uint32_t chan, const char *path,
		 struct ap_tree_stats *st, char *err, size_t errsz)
{
	struct sender s = { .c = c, .chan = chan, .st = st, .err = err, .errsz = errsz };
	struct stat sb;
	memset(st, 0, sizeof(*st));
	if (lstat(path, &sb) < 0)
		return SFAIL(&s, -errno, "%s: %s", path, strerror(errno));
	int rc;
	if (S_ISDIR(sb.st_mode)) {
		s.path[0] = 0;
		rc = send_node(&s, AT_FDCWD, path, 0);
	} else {
		const char *base = strrchr(path, '/');
		base = base ? base + 1 : path;
		if (!*base || strlen(base) > 255)
			return SFAIL(&s, -EINVAL, "%s: no usable file name", path);
		strcpy(s.path, base);
		rc = send_node(&s, AT_FDCWD, path, 0);
	}
	if (rc)
		return rc;
	uint8_t end[12];
	struct ap_wr w = { .p = end, .cap = sizeof(end) };
	ap_put_u32(&w, st->entries);
	ap_put_u64(&w, st->bytes);
	rc = send_frame(&s, AP_TREE_END, end, sizeof(end));
	return rc ? rc : ap_conn_flush_all(c);
}
