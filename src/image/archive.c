/* An image as one archive (archive.h), written and read with libarchive:
 * its pax writer keeps the disk's holes as a GNU sparse map, so a 4 GiB
 * image with 600 MiB of data is 600 MiB of archive before compression. */
#include "image/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/sha256.h"

#define CHUNK (1u << 20)
/* Zero runs at least this long are left as holes when unpacking. */
#define ZERO_RUN 4096u

static const uint8_t zeros[CHUNK];

void image_progress_report(const struct image_progress *p, const char *what, uint64_t done,
			   uint64_t total, bool final)
{
	if (p && p->fn)
		p->fn(p->ctx, what, done, total, final);
}

bool image_cancelled(const struct image_progress *p)
{
	return p && p->cancel && *p->cancel;
}

/* ---- writing ---- */

struct sink {
	int fd;
	struct sha256 sha;
	int err;
};

static la_ssize_t sink_write(struct archive *a, void *ctx, const void *buf, size_t len)
{
	struct sink *s = ctx;

	if (write_all(s->fd, buf, len) < 0) {
		s->err = errno;
		archive_set_error(a, errno, "%s", strerror(errno));
		return -1;
	}
	sha256_update(&s->sha, buf, len);
	return (la_ssize_t)len;
}

static struct archive_entry *new_entry(const char *name, const struct stat *st)
{
	struct archive_entry *e = archive_entry_new();

	if (!e)
		return NULL;
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0444);
	archive_entry_set_size(e, st->st_size);
	archive_entry_set_mtime(e, st->st_mtim.tv_sec, 0);
	return e;
}

static int put_small(struct archive *a, int dirfd, const char *name, size_t max, bool required,
		     char *err, size_t errlen)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
	struct archive_entry *e = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	struct stat st;

	if (fd < 0)
		return errno == ENOENT && !required ? 0 : image_err(err, errlen, -errno, "%s: %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || (rc = read_fd(fd, max, &buf, &len)) < 0) {
		rc = image_err(err, errlen, rc ? rc : -errno, "%s: cannot read it (at most %zu bytes)", name, max);
		goto out;
	}
	st.st_size = (off_t)len;
	if (!(e = new_entry(name, &st)))
		rc = image_err(err, errlen, -ENOMEM, "out of memory");
	else if (archive_write_header(a, e) != ARCHIVE_OK || archive_write_data(a, buf, len) != (la_ssize_t)len)
		rc = image_err(err, errlen, -EIO, "writing %s: %s", name, archive_error_string(a));
out:
	archive_entry_free(e);
	free(buf);
	close(fd);
	return rc;
}

/* The disk's data regions as sparse entries; *data gets their total. */
static int map_regions(int fd, off_t size, struct archive_entry *e, uint64_t *data)
{
	off_t pos = 0;

	*data = 0;
	while (pos < size) {
		off_t d = lseek(fd, pos, SEEK_DATA), h;
		if (d < 0)
			return errno == ENXIO ? 0 : -errno;
		if ((h = lseek(fd, d, SEEK_HOLE)) < 0)
			return -errno;
		if (h > size)
			h = size;
		archive_entry_sparse_add_entry(e, d, h - d);
		*data += (uint64_t)(h - d);
		pos = h;
	}
	return 0;
}

/* Zeros up to off (the writer drops what falls in a hole), then the region. */
static int put_region(struct archive *a, int fd, uint64_t *pos, uint64_t off, uint64_t end, uint8_t *buf)
{
	while (*pos < off) {
		size_t n = off - *pos < CHUNK ? (size_t)(off - *pos) : CHUNK;
		if (archive_write_data(a, zeros, n) < 0)
			return -EIO;
		*pos += n;
	}
	while (*pos < end) {
		size_t want = end - *pos < CHUNK ? (size_t)(end - *pos) : CHUNK;
		ssize_t n = pread(fd, buf, want, (off_t)*pos);
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		if (archive_write_data(a, buf, (size_t)n) != n)
			return -EIO;
		*pos += (uint64_t)n;
	}
	return 0;
}

static int put_disk_data(struct archive *a, int fd, struct archive_entry *e, uint64_t data,
			 const struct image_progress *p)
{
	uint8_t *buf = malloc(CHUNK);
	uint64_t pos = 0, done = 0, size = (uint64_t)archive_entry_size(e);
	la_int64_t off, len;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	archive_entry_sparse_reset(e);
	while (!rc && archive_entry_sparse_next(e, &off, &len) == ARCHIVE_OK) {
		if (image_cancelled(p))
			rc = -ECANCELED;
		else
			rc = put_region(a, fd, &pos, (uint64_t)off, (uint64_t)(off + len), buf);
		done += (uint64_t)len;
		image_progress_report(p, "archiving the disk", done, data, false);
	}
	if (!rc)
		rc = put_region(a, fd, &pos, size, size, buf);
	free(buf);
	return rc;
}

static int put_disk(struct archive *a, int dirfd, const struct image_progress *p, char *err, size_t errlen)
{
	int fd = openat(dirfd, IMAGE_DISK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc;
	struct archive_entry *e = NULL;
	uint64_t data = 0;
	struct stat st;

	if (fd < 0)
		return image_err(err, errlen, -errno, IMAGE_DISK ": %s", strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = image_err(err, errlen, -EINVAL, IMAGE_DISK ": not a regular file");
		goto out;
	}
	if (!(e = new_entry(IMAGE_DISK, &st))) {
		rc = image_err(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = map_regions(fd, st.st_size, e, &data))) {
		image_err(err, errlen, rc, IMAGE_DISK ": cannot find its data: %s", strerror(-rc));
		goto out;
	}
	if (archive_write_header(a, e) != ARCHIVE_OK) {
		rc = image_err(err, errlen, -EIO, "writing " IMAGE_DISK ": %s", archive_error_string(a));
		goto out;
	}
	rc = put_disk_data(a, fd, e, data, p);
	if (rc == -ECANCELED)
		image_err(err, errlen, rc, "interrupted");
	else if (rc)
		image_err(err, errlen, rc, "writing " IMAGE_DISK ": %s",
		     archive_error_string(a) ? archive_error_string(a) : strerror(-rc));
	image_progress_report(p, "archiving the disk", data, data, true);
out:
	archive_entry_free(e);
	close(fd);
	return rc;
}

int image_archive_write(int dirfd, int outfd, const struct image_progress *p, uint8_t sha[32], char *err,
			size_t errlen)
{
	struct archive *a = archive_write_new();
	struct sink s = {.fd = outfd};
	int rc;

	if (!a)
		return image_err(err, errlen, -ENOMEM, "out of memory");
	sha256_init(&s.sha);
	/* No padding to tar's 10 KiB blocks after compression: zstd(1) would
	 * call the zeros after the frame garbage. */
	if (archive_write_set_format_pax(a) != ARCHIVE_OK || archive_write_add_filter_zstd(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open(a, &s, NULL, sink_write, NULL) != ARCHIVE_OK) {
		rc = image_err(err, errlen, -EIO, "libarchive: %s", archive_error_string(a));
		archive_write_free(a);
		return rc;
	}
	rc = put_small(a, dirfd, IMAGE_MANIFEST, IMAGE_MANIFEST_MAX, true, err, errlen);
	if (!rc)
		rc = put_small(a, dirfd, IMAGE_RECIPE, IMAGE_RECIPE_MAX, false, err, errlen);
	if (!rc)
		rc = put_small(a, dirfd, IMAGE_ID_SIDECAR, IMAGE_ID_SIDECAR_MAX, false, err, errlen);
	if (!rc)
		rc = put_disk(a, dirfd, p, err, errlen);
	if (!rc && archive_write_close(a) != ARCHIVE_OK)
		rc = image_err(err, errlen, s.err ? -s.err : -EIO, "writing the archive: %s", archive_error_string(a));
	archive_write_free(a);
	if (!rc)
		sha256_final(&s.sha, sha);
	return rc;
}

/* ---- reading ---- */

enum member { M_MANIFEST, M_RECIPE, M_ID, M_DISK, M_COUNT };
static const char *const member_names[M_COUNT] = {IMAGE_MANIFEST, IMAGE_RECIPE, IMAGE_ID_SIDECAR, IMAGE_DISK};
static const size_t member_max[M_COUNT] = {IMAGE_MANIFEST_MAX, IMAGE_RECIPE_MAX, IMAGE_ID_SIDECAR_MAX, 0};

struct reader {
	struct archive *a;
	int dirfd;
	uint64_t size; /* of the archive, for progress */
	const struct image_progress *p;
	struct image_unpacked *u;
	char *err;
	size_t errlen;
};

static int refuse(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct reader *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, r->errlen, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

static int lib_error(struct reader *r, const char *what)
{
	const char *s = archive_error_string(r->a);

	return refuse(r, "%s: %s", what, s ? s : "damaged or truncated archive");
}

/* Which member this entry may be, given the last one read; names the
 * reason when it may not. */
static int classify(struct reader *r, struct archive_entry *e, int last)
{
	const char *name = archive_entry_pathname(e);
	int type = (int)archive_entry_filetype(e);

	if (!name || !*name)
		return refuse(r, "a member without a name");
	if (name[0] == '/')
		return refuse(r, "member '%.200s': an absolute path", name);
	if (!strcmp(name, "..") || !strncmp(name, "../", 3) || strstr(name, "/../") ||
	    (strlen(name) >= 3 && !strcmp(name + strlen(name) - 3, "/..")))
		return refuse(r, "member '%.200s': a path with '..'", name);
	if (archive_entry_hardlink(e) || archive_entry_symlink(e) || type == AE_IFLNK)
		return refuse(r, "member '%.200s': a link (an image holds regular files only)", name);
	if (type != AE_IFREG)
		return refuse(r, "member '%.200s': not a regular file", name);
	for (int m = 0; m < M_COUNT; m++) {
		if (strcmp(name, member_names[m]))
			continue;
		if (m <= last)
			return refuse(r, "member '%s' is twice or out of order", name);
		if (last < M_MANIFEST && m != M_MANIFEST)
			return refuse(r, "the first member is '%s', not " IMAGE_MANIFEST, name);
		return m;
	}
	return refuse(r, "member '%.200s': not part of an image (expected " IMAGE_MANIFEST ", " IMAGE_RECIPE
		      ", " IMAGE_ID_SIDECAR ", " IMAGE_DISK ")", name);
}

/* A small member, whole, into buf (NUL-terminated for the parsers). */
static int read_small(struct reader *r, struct archive_entry *e, int m, char **buf, size_t *len)
{
	la_int64_t size = archive_entry_size(e);
	la_ssize_t n;

	if (!archive_entry_size_is_set(e) || size < 0 || (uint64_t)size > member_max[m])
		return refuse(r, "member '%s' is larger than %zu bytes", member_names[m], member_max[m]);
	if (!(*buf = malloc((size_t)size + 1)))
		return -ENOMEM;
	*len = 0;
	while ((n = archive_read_data(r->a, *buf + *len, (size_t)size - *len)) > 0)
		*len += (size_t)n;
	if (n < 0 || *len != (size_t)size) {
		free(*buf);
		*buf = NULL;
		return lib_error(r, member_names[m]);
	}
	(*buf)[*len] = 0;
	return 0;
}

static int create(struct reader *r, const char *name)
{
	int fd = openat(r->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);

	if (fd < 0)
		return image_err(r->err, r->errlen, -errno, "cannot create %s: %s", name, strerror(errno));
	return fd;
}

static int write_small(struct reader *r, const char *name, const char *buf, size_t len)
{
	int fd = create(r, name), rc = 0;

	if (fd < 0)
		return fd;
	if (write_all(fd, buf, len) < 0 || fsync(fd) < 0)
		rc = image_err(r->err, r->errlen, -errno, "writing %s: %s", name, strerror(errno));
	close(fd);
	return rc;
}

static int take_small(struct reader *r, struct archive_entry *e, int m)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = read_small(r, e, m, &buf, &len);

	if (rc)
		return rc;
	if (m == M_MANIFEST) {
		rc = image_manifest_parse(buf, len, &r->u->m, r->err, r->errlen);
		if (!rc)
			rc = write_small(r, IMAGE_MANIFEST, buf, len);
	} else if (m == M_RECIPE) {
		r->u->has_recipe = true;
		rc = write_small(r, IMAGE_RECIPE, buf, len);
	} else if (image_id_sidecar_sha(buf, len, r->u->id_sha)) {
		rc = refuse(r, IMAGE_ID_SIDECAR " is not a disk identity file");
	} else {
		/* Not written: its times are the exporter's; the importer
		 * checks the claim against the disk it unpacked. */
		r->u->has_id = true;
	}
	free(buf);
	return rc;
}

/* Writes a data block, leaving page-sized zero runs as holes: a tar
 * made without a sparse map still unpacks sparse. */
static int put_block(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	size_t i = 0;

	while (i < n) {
		size_t run = n - i < ZERO_RUN ? n - i : ZERO_RUN;
		if (run == ZERO_RUN && !memcmp(p + i, zeros, run)) {
			i += run;
			continue;
		}
		ssize_t w = pwrite(fd, p + i, run, (off_t)(off + i));
		if (w != (ssize_t)run)
			return w < 0 ? -errno : -ENOSPC;
		i += run;
	}
	return 0;
}

static int take_disk_data(struct reader *r, int fd, uint64_t size)
{
	uint64_t data = 0;
	const void *buf;
	size_t n;
	la_int64_t off;
	int st, rc;

	while ((st = archive_read_data_block(r->a, &buf, &n, &off)) == ARCHIVE_OK) {
		if (image_cancelled(r->p))
			return image_err(r->err, r->errlen, -ECANCELED, "interrupted");
		if (off < 0 || (uint64_t)off > size || n > size - (uint64_t)off || (data += n) > size)
			return refuse(r, IMAGE_DISK ": a data block outside its %llu bytes",
				      (unsigned long long)size);
		if ((rc = put_block(fd, buf, n, (uint64_t)off)))
			return image_err(r->err, r->errlen, rc, "writing " IMAGE_DISK ": %s", strerror(-rc));
		image_progress_report(r->p, "unpacking", (uint64_t)archive_filter_bytes(r->a, -1), r->size, false);
	}
	if (st != ARCHIVE_EOF)
		return lib_error(r, IMAGE_DISK);
	if (ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0)
		return image_err(r->err, r->errlen, -errno, "writing " IMAGE_DISK ": %s", strerror(errno));
	return 0;
}

static int take_disk(struct reader *r, struct archive_entry *e)
{
	la_int64_t size = archive_entry_size(e);
	int fd, rc;

	if (!archive_entry_size_is_set(e) || size < 0 || (uint64_t)size != r->u->m.virtual_size)
		return refuse(r, IMAGE_DISK " is %lld bytes, the manifest says %llu", (long long)size,
			      (unsigned long long)r->u->m.virtual_size);
	if ((fd = create(r, IMAGE_DISK)) < 0)
		return fd;
	rc = take_disk_data(r, fd, (uint64_t)size);
	close(fd);
	return rc;
}

static int unpack(struct reader *r)
{
	struct archive_entry *e;
	int last = -1, m, st, rc;

	memset(r->u, 0, sizeof(*r->u));
	while (last != M_DISK) {
		if ((st = archive_read_next_header(r->a, &e)) == ARCHIVE_EOF)
			return refuse(r, last < 0 ? "an empty archive" : "the archive ends before " IMAGE_DISK);
		if (st != ARCHIVE_OK)
			return lib_error(r, "reading the archive");
		if ((m = classify(r, e, last)) < 0)
			return m;
		rc = m == M_DISK ? take_disk(r, e) : take_small(r, e, m);
		if (rc)
			return rc;
		last = m;
	}
	/* The disk is last: anything after it is refused, a damaged end too. */
	st = archive_read_next_header(r->a, &e);
	if (st == ARCHIVE_OK)
		return refuse(r, "member '%.200s' after " IMAGE_DISK, archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
	if (st != ARCHIVE_EOF)
		return lib_error(r, "reading the end of the archive");
	image_progress_report(r->p, "unpacking", r->size, r->size, true);
	return 0;
}

static struct archive *reader_new(void)
{
	struct archive *a = archive_read_new();

	/* Named filters only: _all would include ones that run programs. */
	if (a && (archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
		  archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
		  archive_read_support_filter_xz(a) != ARCHIVE_OK ||
		  archive_read_support_format_tar(a) != ARCHIVE_OK)) {
		archive_read_free(a);
		return NULL;
	}
	return a;
}

int image_archive_unpack(int fd, uint64_t size, int dirfd, const struct image_progress *p,
			 struct image_unpacked *u, char *err, size_t errlen)
{
	struct reader r = {.a = reader_new(), .dirfd = dirfd, .size = size, .p = p, .u = u, .err = err, .errlen = errlen};
	int rc;

	if (!r.a)
		return image_err(err, errlen, -ENOMEM, "libarchive: cannot set up a reader");
	if (archive_read_open_fd(r.a, fd, 1 << 16) != ARCHIVE_OK)
		rc = lib_error(&r, "not an image archive");
	else
		rc = unpack(&r);
	archive_read_free(r.a);
	return rc;
}

int image_archive_unpack_mem(const void *buf, size_t len, int dirfd, struct image_unpacked *u, char *err,
			     size_t errlen)
{
	struct reader r = {.a = reader_new(), .dirfd = dirfd, .size = len, .u = u, .err = err, .errlen = errlen};
	int rc;

	if (!r.a)
		return image_err(err, errlen, -ENOMEM, "libarchive: cannot set up a reader");
	if (archive_read_open_memory(r.a, buf, len) != ARCHIVE_OK)
		rc = lib_error(&r, "not an image archive");
	else
		rc = unpack(&r);
	archive_read_free(r.a);
	return rc;
}
