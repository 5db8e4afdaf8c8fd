/* Building chains: creating, freezing and opening deltas, and snapshots
 * (freeze the top, stack a new one).  The I/O paths are in io.c.  Format
 * and guarantees: docs/disk-format.md. */
#include "disk/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "disk/format.h"
#include "disk/layer.h"

uint64_t disk_size(const struct disk *d)
{
	return disk_top(d)->h.size;
}

unsigned disk_layer_count(const struct disk *d)
{
	return d->n;
}

const char *disk_layer_path(const struct disk *d, unsigned i)
{
	return i < d->n ? d->layers[i]->path : NULL;
}

void disk_get_stats(const struct disk *d, struct disk_stats *st)
{
	*st = d->st;
}

/* ---- creating and freezing deltas ---- */

/* The parent is recorded by name when it sits in the child's folder (a
 * folder of layers can be moved or copied whole), else by absolute path. */
static int parent_ref(const char *child, const char *parent_real, char *out, size_t len)
{
	char c[PATH_MAX], p[PATH_MAX], cdir[PATH_MAX];
	const char *pdir, *name;
	int n;

	if (snprintf(c, sizeof(c), "%s", child) >= (int)sizeof(c) ||
	    snprintf(p, sizeof(p), "%s", parent_real) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	if (!realpath(dirname(c), cdir))
		return -errno;
	name = basename(p); /* before dirname(), which cuts p at the last slash */
	pdir = dirname(p);
	if (!strcmp(cdir, pdir))
		n = snprintf(out, len, "%s", name);
	else
		n = snprintf(out, len, "%s", parent_real);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Writes a new, empty delta with header h (uuid and layout filled here):
 * header, sparse map, nothing else.  Durable, directory entry included. */
static int write_new_delta(const char *path, struct disk_header *h, struct disk_stats *st,
			   char *err, size_t errlen)
{
	uint8_t buf[DISK_HDR_SIZE];
	int fd, rc = 0;

	if (getrandom(h->uuid, sizeof(h->uuid), 0) != sizeof(h->uuid))
		return -EIO;
	disk_header_layout(h);
	disk_header_encode(h, buf);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	rc = disk_pwrite_full(fd, buf, sizeof(buf), 0);
	if (!rc && ftruncate(fd, (off_t)h->data_offset) < 0)
		rc = -errno;
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (!rc)
		rc = sync_dir_of(path);
	if (st) {
		st->header_writes++;
		st->syncs += 2;
	}
	if (rc) {
		unlink(path);
		disk_seterr(err, errlen, "%s: %s", path, strerror(-rc));
	}
	return rc;
}

/* Only the 512-byte core changes: one sector, written whole, so a crash
 * leaves the old header or the new one. */
static int freeze_fd(int fd, struct disk_header *h, struct disk_stats *st)
{
	uint8_t buf[DISK_HDR_SIZE];
	int rc;

	h->flags |= DISK_FLAG_FROZEN;
	disk_header_encode(h, buf);
	rc = disk_pwrite_full(fd, buf, DISK_HDR_CORE, 0);
	if (st) {
		st->header_writes++;
		st->syncs++;
	}
	if (!rc && fdatasync(fd) < 0)
		rc = -errno;
	return rc;
}

int disk_freeze(const char *path, char *err, size_t errlen)
{
	uint8_t buf[DISK_HDR_SIZE];
	struct disk_header h;
	char why[DISK_ERR_LEN];
	int fd, rc;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	/* Already frozen: done, even while chains read it (shared locks). */
	rc = (int)pread(fd, buf, sizeof(buf), 0);
	rc = disk_header_decode(buf, rc < 0 ? 0 : (size_t)rc, &h, why, sizeof(why));
	if (rc) {
		disk_seterr(err, errlen, "%s: %s", path, why);
		goto out;
	}
	if (h.flags & DISK_FLAG_FROZEN)
		goto out;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		disk_seterr(err, errlen, "%s: in use, cannot freeze it", path);
		goto out;
	}
	/* Read again under the lock: a writer may have changed it meanwhile. */
	rc = (int)pread(fd, buf, sizeof(buf), 0);
	rc = disk_header_decode(buf, rc < 0 ? 0 : (size_t)rc, &h, why, sizeof(why));
	if (rc) {
		disk_seterr(err, errlen, "%s: %s", path, why);
		goto out;
	}
	if (!(h.flags & DISK_FLAG_FROZEN))
		rc = freeze_fd(fd, &h, NULL);
	if (rc)
		disk_seterr(err, errlen, "%s: %s", path, strerror(-rc));
out:
	close(fd);
	return rc;
}

static int parent_header(struct disk_header *h, const char *path, const char *parent,
			 struct disk_stats *st, char *err, size_t errlen)
{
	struct disk_stats unused;
	struct disk_layer *p;
	struct stat sb;
	int rc = disk_layer_open(&p, parent, false, true, st ? st : &unused, err, errlen);

	if (rc)
		return rc;
	if (p->raw) {
		h->parent_kind = DISK_PARENT_RAW;
		h->parent_size = p->file_size;
		rc = fstat(p->fd, &sb) < 0 ? -errno
		     : disk_base_id_fd(p->fd, p->path, &sb, h->parent_id, err, errlen);
	} else if (!(p->h.flags & DISK_FLAG_FROZEN)) {
		disk_seterr(err, errlen, "%s: parent delta is not frozen (snapshot or freeze it first)", parent);
		rc = -EBUSY;
	} else {
		h->parent_kind = DISK_PARENT_DELTA;
		h->parent_size = p->h.size;
		h->cluster_bits = p->h.cluster_bits;
		memcpy(h->parent_id, p->h.uuid, 16);
	}
	if (!rc && (rc = parent_ref(path, p->path, h->parent_path, sizeof(h->parent_path))))
		disk_seterr(err, errlen, "%s: cannot record parent %s: %s", path, p->path, strerror(-rc));
	h->parent_path_len = (uint32_t)strlen(h->parent_path);
	disk_layer_free(p);
	return rc;
}

static int cluster_bits_of(uint32_t csz, uint32_t *bits)
{
	for (uint32_t b = DISK_MIN_CLUSTER_BITS; b <= DISK_MAX_CLUSTER_BITS; b++) {
		if (csz == 1u << b) {
			*bits = b;
			return 0;
		}
	}
	return -EINVAL;
}

int disk_create(const char *path, const char *parent, const struct disk_create_opts *opts,
		char *err, size_t errlen)
{
	struct disk_create_opts o = opts ? *opts : (struct disk_create_opts){0};
	struct disk_header h = {.version = DISK_VERSION, .cluster_bits = 16};
	int rc;

	if (!path)
		return -EINVAL;
	if (parent && (rc = parent_header(&h, path, parent, NULL, err, errlen)))
		return rc;
	if (o.cluster_size && cluster_bits_of(o.cluster_size, &h.cluster_bits)) {
		disk_seterr(err, errlen, "cluster size %u: not a power of two from 4 KiB to 2 MiB",
			    o.cluster_size);
		return -EINVAL;
	}
	h.size = o.size ? o.size : (h.parent_size + 511) & ~511ULL;
	if (!h.size || h.size % 512 || h.size > DISK_MAX_SIZE || h.size < h.parent_size) {
		disk_seterr(err, errlen, "disk size %llu: must be a non-zero multiple of 512, at least the "
			    "parent's %llu bytes and at most 16 TiB", (unsigned long long)h.size,
			    (unsigned long long)h.parent_size);
		return -EINVAL;
	}
	return write_new_delta(path, &h, NULL, err, errlen);
}

/* ---- opening a chain ---- */

static int parent_path_of(const struct disk_layer *l, char *out, size_t len)
{
	char c[PATH_MAX];
	int n;

	if (l->h.parent_path[0] == '/')
		n = snprintf(out, len, "%s", l->h.parent_path);
	else if (snprintf(c, sizeof(c), "%s", l->path) >= (int)sizeof(c))
		return -ENAMETOOLONG;
	else
		n = snprintf(out, len, "%s/%s", dirname(c), l->h.parent_path);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int check_parent(const struct disk_layer *child, const struct disk_layer *p,
			char *err, size_t errlen)
{
	uint8_t id[16];
	struct stat sb;
	int rc;

	if (child->h.parent_kind == DISK_PARENT_RAW) {
		if (!p->raw || p->file_size != child->h.parent_size) {
			disk_seterr(err, errlen, "%s: base image %s is %llu bytes, the delta was made over %llu",
				    child->path, p->path, (unsigned long long)p->file_size,
				    (unsigned long long)child->h.parent_size);
			return -ESTALE;
		}
		rc = fstat(p->fd, &sb) < 0 ? -errno
		     : disk_base_id_fd(p->fd, p->path, &sb, id, err, errlen);
		if (rc)
			return rc;
		if (memcmp(id, child->h.parent_id, 16)) {
			disk_seterr(err, errlen, "%s: base image %s has other contents than the one the delta "
				    "was made over (rebuilt or replaced?)", child->path, p->path);
			return -ESTALE;
		}
		return 0;
	}
	if (p->raw || memcmp(p->h.uuid, child->h.parent_id, 16) || p->h.size != child->h.parent_size) {
		disk_seterr(err, errlen, "%s: parent %s is not the delta it was made over (identity or size differ)",
			    child->path, p->path);
		return -ESTALE;
	}
	if (!(p->h.flags & DISK_FLAG_FROZEN)) {
		disk_seterr(err, errlen, "%s: parent %s is not frozen (an interrupted snapshot?)",
			    child->path, p->path);
		return -EUCLEAN;
	}
	return 0;
}

static int open_parent(struct disk *d, struct disk_layer *child, struct disk_layer **out,
		       char *err, size_t errlen)
{
	char ppath[PATH_MAX], why[DISK_ERR_LEN];
	int rc = parent_path_of(child, ppath, sizeof(ppath));

	if (rc) {
		disk_seterr(err, errlen, "%s: parent path too long", child->path);
		return rc;
	}
	rc = disk_layer_open(out, ppath, false, child->h.parent_kind == DISK_PARENT_RAW, &d->st,
			     why, sizeof(why));
	if (rc) {
		disk_seterr(err, errlen, "%s (parent of %s)", why, child->path);
		return rc;
	}
	rc = check_parent(child, *out, err, errlen);
	if (rc) {
		disk_layer_free(*out);
		*out = NULL;
	}
	return rc;
}

static int open_chain(struct disk *d, const char *top, char *err, size_t errlen)
{
	struct disk_layer *tmp[DISK_MAX_LAYERS], *cur;
	unsigned k = 0;
	int rc = disk_layer_open(&tmp[0], top, d->writable, false, &d->st, err, errlen);

	if (rc)
		return rc;
	for (cur = tmp[k++]; !cur->raw && cur->h.parent_kind != DISK_PARENT_NONE; cur = tmp[k++]) {
		if (k == DISK_MAX_LAYERS) {
			disk_seterr(err, errlen, "%s: chain deeper than %u layers (a loop?)", top,
				    DISK_MAX_LAYERS);
			rc = -ELOOP;
			break;
		}
		rc = open_parent(d, cur, &tmp[k], err, errlen);
		if (rc)
			break;
	}
	if (rc) {
		while (k--)
			disk_layer_free(tmp[k]);
		return rc;
	}
	d->n = k;
	for (unsigned i = 0; i < k; i++)
		d->layers[i] = tmp[k - 1 - i];
	return 0;
}

static void disk_free(struct disk *d)
{
	for (unsigned i = 0; i < d->n; i++)
		disk_layer_free(d->layers[i]);
	free(d->bounce);
	free(d->zeros);
	free(d);
}

int disk_open(struct disk **out, const char *top, unsigned flags, char *err, size_t errlen)
{
	struct disk *d;
	uint64_t csz;
	int rc;

	if (!out || !top || (flags & ~DISK_RDONLY))
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->writable = !(flags & DISK_RDONLY);
	rc = open_chain(d, top, err, errlen);
	if (rc) {
		free(d);
		return rc;
	}
	csz = disk_layer_csz(disk_top(d));
	d->bounce = aligned_alloc(4096, csz);
	d->zeros = calloc(1, csz);
	if (!d->bounce || !d->zeros) {
		disk_free(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

int disk_open_layer_alone(struct disk **out, struct disk_layer *l)
{
	struct disk *d = calloc(1, sizeof(*d));
	uint64_t csz;

	if (!d)
		return -ENOMEM;
	d->writable = l->writable;
	d->layers[d->n++] = l;
	csz = disk_layer_csz(l);
	d->bounce = aligned_alloc(4096, csz);
	d->zeros = calloc(1, csz);
	if (!d->bounce || !d->zeros) {
		d->n = 0; /* the caller keeps l */
		disk_free(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

int disk_close(struct disk *d)
{
	int rc;

	if (!d)
		return 0;
	rc = disk_flush(d);
	disk_free(d);
	return rc;
}

/* ---- headers without locks ---- */

/* 0 and *h, -EINVAL if path is no delta, else -errno. */
static int peek_header(const char *path, struct disk_header *h)
{
	uint8_t hdr[DISK_HDR_SIZE];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), rc;
	size_t size;

	if (fd < 0)
		return -errno;
	if (!(rc = fd_regular_size(fd, UINT64_MAX, &size)))
		rc = size < DISK_HDR_SIZE ? -EINVAL : disk_pread_full(fd, hdr, sizeof(hdr), 0);
	close(fd);
	if (!rc && disk_header_decode(hdr, sizeof(hdr), h, NULL, 0))
		rc = -EINVAL;
	return rc;
}

int disk_is_frozen(const char *path)
{
	struct disk_header h;
	int rc = peek_header(path, &h);

	return rc == -EINVAL ? 0 : rc ? rc : !!(h.flags & DISK_FLAG_FROZEN);
}

int disk_is_over(const char *path, const char *parent)
{
	struct disk_header h, ph;
	int rc = peek_header(path, &h);

	if (!rc)
		rc = peek_header(parent, &ph);
	if (rc)
		return rc == -EINVAL ? 0 : rc;
	return h.parent_kind == DISK_PARENT_DELTA && !memcmp(h.parent_id, ph.uuid, sizeof(ph.uuid));
}

/* ---- snapshot ---- */

static int snapshot_file(struct disk *d, const char *new_top, char *err, size_t errlen)
{
	struct disk_layer *top = disk_top(d);
	struct disk_header h = {
		.version = DISK_VERSION,
		.cluster_bits = top->h.cluster_bits,
		.size = top->h.size,
		.parent_kind = DISK_PARENT_DELTA,
		.parent_size = top->h.size,
	};
	int rc;

	memcpy(h.parent_id, top->h.uuid, 16);
	rc = parent_ref(new_top, top->path, h.parent_path, sizeof(h.parent_path));
	if (rc) {
		disk_seterr(err, errlen, "%s: cannot record parent %s: %s", new_top, top->path,
			    strerror(-rc));
		return rc;
	}
	h.parent_path_len = (uint32_t)strlen(h.parent_path);
	return write_new_delta(new_top, &h, &d->st, err, errlen);
}

/* Order: flush, write the new delta (durable), freeze the old top, open the
 * new one.  A crash before the freeze leaves a new delta whose parent is not
 * frozen, which disk_open refuses: the old top is still the disk. */
int disk_snapshot(struct disk *d, const char *new_top, char *err, size_t errlen)
{
	struct disk_layer *top, *nl;
	int rc;

	if (!d || !new_top)
		return -EINVAL;
	rc = !d->writable ? -EROFS : d->broken ? -EIO : 0;
	if (!rc && d->n >= DISK_MAX_LAYERS)
		rc = -E2BIG;
	if (!rc)
		rc = disk_flush(d);
	if (rc) {
		disk_seterr(err, errlen, "cannot snapshot: %s", strerror(-rc));
		return rc;
	}
	top = disk_top(d);
	rc = snapshot_file(d, new_top, err, errlen);
	if (rc)
		return rc;
	rc = freeze_fd(top->fd, &top->h, &d->st);
	if (rc) {
		d->broken = true;
		unlink(new_top);
		disk_seterr(err, errlen, "%s: cannot freeze: %s", top->path, strerror(-rc));
		return rc;
	}
	rc = disk_layer_open(&nl, new_top, true, false, &d->st, err, errlen);
	if (rc) {
		d->broken = true; /* the old top is frozen: it must not take writes */
		return rc;
	}
	/* Others may now read the frozen layer. */
	if (flock(top->fd, LOCK_SH | LOCK_NB) < 0)
		log_warn("disk %s: cannot downgrade lock: %s", top->path, strerror(errno));
	top->writable = false;
	d->layers[d->n++] = nl;
	return 0;
}
