/* Opening one layer: header, map, and for the writable top the list of free
 * clusters.  Everything read from the file is validated here, once, so that
 * the I/O paths can trust the in-memory map. */
#include "disk/layer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define LOAD_CHUNK (64u * 1024)
/* Far below what off_t holds; ext4 stops at 16 TiB anyway. */
#define MAX_FILE_OFFSET (1ULL << 46)

int disk_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file shrank under us */
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int disk_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int offlist_push(struct disk_offlist *l, uint64_t v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		uint64_t *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

uint64_t disk_layer_get(const struct disk_layer *l, uint64_t cluster)
{
	uint64_t s = cluster / DISK_MAP_PER_SECTOR;
	struct disk_map_sec **g = l->dir[s / DISK_GROUP_SECTORS];
	struct disk_map_sec *sec;

	if (!g)
		return DISK_ENT_ABSENT;
	sec = g[s % DISK_GROUP_SECTORS];
	return sec ? sec->e[cluster % DISK_MAP_PER_SECTOR] : DISK_ENT_ABSENT;
}

static struct disk_map_sec *sector_get(struct disk_layer *l, uint64_t s)
{
	struct disk_map_sec ***g = &l->dir[s / DISK_GROUP_SECTORS];
	struct disk_map_sec **sec;

	if (!*g && !(*g = calloc(DISK_GROUP_SECTORS, sizeof(**g))))
		return NULL;
	sec = &(*g)[s % DISK_GROUP_SECTORS];
	if (!*sec)
		*sec = calloc(1, sizeof(**sec));
	return *sec;
}

int disk_layer_set(struct disk_layer *l, uint64_t cluster, uint64_t ent)
{
	uint64_t s = cluster / DISK_MAP_PER_SECTOR;
	struct disk_map_sec *sec = sector_get(l, s);

	if (!sec)
		return -ENOMEM;
	if (!sec->dirty) {
		if (offlist_push(&l->dirty, s) < 0)
			return -ENOMEM;
		sec->dirty = true;
	}
	sec->e[cluster % DISK_MAP_PER_SECTOR] = ent;
	return 0;
}

int disk_layer_alloc(struct disk_layer *l, uint64_t *off)
{
	uint64_t csz = disk_layer_csz(l);

	if (l->free.n) {
		*off = l->free.v[--l->free.n];
		return 0;
	}
	if (l->next_alloc > MAX_FILE_OFFSET - csz)
		return -EFBIG;
	*off = l->next_alloc;
	l->next_alloc += csz;
	return 0;
}

int disk_layer_release(struct disk_layer *l, uint64_t off, bool now)
{
	if (!now)
		return offlist_push(&l->pending, off);
	/* Undo of the last append: keep the file dense and runs contiguous. */
	if (off + disk_layer_csz(l) == l->next_alloc) {
		l->next_alloc = off;
		return 0;
	}
	return offlist_push(&l->free, off);
}

int disk_layer_commit_frees(struct disk_layer *l)
{
	while (l->pending.n) {
		int rc = offlist_push(&l->free, l->pending.v[l->pending.n - 1]);
		if (rc)
			return rc;
		l->pending.n--;
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Adjacent dirty sectors go out in one pwrite. */
int disk_layer_write_map(struct disk_layer *l, struct disk_stats *st)
{
	uint8_t buf[16 * DISK_MAP_SECTOR];
	size_t i = 0;
	int rc = 0;

	qsort(l->dirty.v, l->dirty.n, sizeof(uint64_t), cmp_u64);
	while (i < l->dirty.n) {
		uint64_t first = l->dirty.v[i];
		size_t k = 0;
		while (i < l->dirty.n && k < 16 && l->dirty.v[i] == first + k) {
			uint64_t s = l->dirty.v[i];
			struct disk_map_sec *sec = l->dir[s / DISK_GROUP_SECTORS][s % DISK_GROUP_SECTORS];
			disk_map_encode(&l->h, s, sec->e, buf + k * DISK_MAP_SECTOR);
			k++;
			i++;
		}
		rc = disk_pwrite_full(l->fd, buf, k * DISK_MAP_SECTOR,
				      DISK_MAP_OFFSET + first * DISK_MAP_SECTOR);
		if (rc)
			return rc;
		st->map_writes++;
		st->map_bytes += k * DISK_MAP_SECTOR;
	}
	for (i = 0; i < l->dirty.n; i++) {
		uint64_t s = l->dirty.v[i];
		l->dir[s / DISK_GROUP_SECTORS][s % DISK_GROUP_SECTORS]->dirty = false;
	}
	l->dirty.n = 0;
	return 0;
}

static int store_sector(struct disk_layer *l, uint64_t s, const uint64_t *ents)
{
	struct disk_map_sec *sec;
	unsigned i;

	for (i = 0; i < DISK_MAP_PER_SECTOR && ents[i] == DISK_ENT_ABSENT; i++)
		;
	if (i == DISK_MAP_PER_SECTOR)
		return 0;
	sec = sector_get(l, s);
	if (!sec)
		return -ENOMEM;
	memcpy(sec->e, ents, sizeof(sec->e));
	return 0;
}

static int load_range(struct disk_layer *l, uint8_t *buf, uint64_t a, uint64_t b,
		      struct disk_stats *st, char *err, size_t errlen)
{
	uint64_t ents[DISK_MAP_PER_SECTOR];
	int rc;

	while (a < b) {
		size_t n = b - a < LOAD_CHUNK ? (size_t)(b - a) : LOAD_CHUNK;
		rc = disk_pread_full(l->fd, buf, n, a);
		if (rc) {
			disk_seterr(err, errlen, "%s: reading the map: %s", l->path, strerror(-rc));
			return rc;
		}
		st->map_bytes_loaded += n;
		for (size_t o = 0; o < n; o += DISK_MAP_SECTOR) {
			uint64_t s = (a + o - DISK_MAP_OFFSET) / DISK_MAP_SECTOR;
			rc = disk_map_decode(&l->h, s, buf + o, l->file_size, ents, err, errlen);
			if (rc == 1)
				rc = store_sector(l, s, ents);
			if (rc < 0)
				return rc;
		}
		a += n;
	}
	return 0;
}

/* Only the parts of the map region that hold data are read (SEEK_DATA), so
 * opening an empty delta over a huge disk reads nothing. */
static int load_map(struct disk_layer *l, struct disk_stats *st, char *err, size_t errlen)
{
	uint64_t end = DISK_MAP_OFFSET + l->h.map_sectors * DISK_MAP_SECTOR;
	uint64_t pos = DISK_MAP_OFFSET;
	uint8_t *buf = malloc(LOAD_CHUNK);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	while (pos < end) {
		off_t d = lseek(l->fd, (off_t)pos, SEEK_DATA), h;
		if (d < 0 && errno == ENXIO)
			break;
		if (d < 0) {
			rc = -errno;
			disk_seterr(err, errlen, "%s: %s", l->path, strerror(errno));
			break;
		}
		if ((uint64_t)d >= end)
			break;
		h = lseek(l->fd, d, SEEK_HOLE);
		uint64_t a = (uint64_t)d & ~(uint64_t)(DISK_MAP_SECTOR - 1);
		uint64_t b = h < 0 || (uint64_t)h > end ? end
			     : ((uint64_t)h + DISK_MAP_SECTOR - 1) & ~(uint64_t)(DISK_MAP_SECTOR - 1);
		if (b > end)
			b = end;
		if (b <= a)
			b = a + DISK_MAP_SECTOR; /* a confused SEEK_HOLE must not stall us */
		rc = load_range(l, buf, a, b, st, err, errlen);
		if (rc)
			break;
		pos = b;
	}
	free(buf);
	return rc;
}

/* Every present cluster must have its own file offset: two entries sharing
 * one would make a write to one cluster change the other. */
static int collect_offsets(struct disk_layer *l, struct disk_offlist *used)
{
	for (uint64_t g = 0; g < l->ngroups; g++) {
		if (!l->dir[g])
			continue;
		for (unsigned s = 0; s < DISK_GROUP_SECTORS; s++) {
			struct disk_map_sec *sec = l->dir[g][s];
			for (unsigned i = 0; sec && i < DISK_MAP_PER_SECTOR; i++) {
				if (DISK_ENT_IS_PRESENT(sec->e[i]) &&
				    offlist_push(used, DISK_ENT_OFFSET(sec->e[i])) < 0)
					return -ENOMEM;
			}
		}
	}
	return 0;
}

/* Clusters of the file that no map entry references are left-overs of
 * writes that were never flushed (or of discards): punch them, reuse them,
 * and cut the file after the last referenced cluster. */
static int punch(int fd, uint64_t off, uint64_t len)
{
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0 &&
	    errno != EOPNOTSUPP)
		return -errno;
	return 0;
}

static int build_free_list(struct disk_layer *l, char *err, size_t errlen)
{
	struct disk_offlist used = {0};
	uint64_t csz = disk_layer_csz(l), expect = l->h.data_offset;
	int rc = collect_offsets(l, &used);

	if (rc)
		goto out;
	if (used.n)
		qsort(used.v, used.n, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i <= used.n && !rc; i++) {
		uint64_t next = i < used.n ? used.v[i] : expect;
		if (next < expect) {
			disk_seterr(err, errlen, "%s: two clusters share file offset %llu", l->path,
				    (unsigned long long)next);
			rc = -EUCLEAN;
			break;
		}
		if (next > expect)
			rc = punch(l->fd, expect, next - expect);
		expect = next + csz;
	}
	l->next_alloc = used.n ? used.v[used.n - 1] + csz : l->h.data_offset;
	/* Pushed highest first, so that the lowest offsets are reused first. */
	for (size_t i = used.n; i-- > 0 && !rc;) {
		uint64_t lo = i ? used.v[i - 1] + csz : l->h.data_offset;
		for (uint64_t o = used.v[i]; o > lo && !rc;)
			rc = offlist_push(&l->free, o -= csz);
	}
	if (!rc && l->file_size > l->next_alloc && ftruncate(l->fd, (off_t)l->next_alloc) < 0)
		rc = -errno;
	if (rc && rc != -EUCLEAN)
		disk_seterr(err, errlen, "%s: %s", l->path, strerror(-rc));
out:
	free(used.v);
	return rc;
}

static int open_delta(struct disk_layer *l, const uint8_t *hdr, size_t got,
		      struct disk_stats *st, char *err, size_t errlen)
{
	char why[DISK_ERR_LEN];
	int rc = disk_header_decode(hdr, got, &l->h, why, sizeof(why));

	if (rc) {
		disk_seterr(err, errlen, "%s: %s", l->path, why);
		return rc;
	}
	if (l->file_size < l->h.data_offset) {
		disk_seterr(err, errlen, "%s: truncated (%llu bytes, map ends at %llu)", l->path,
			    (unsigned long long)l->file_size, (unsigned long long)l->h.data_offset);
		return -EUCLEAN;
	}
	if (l->writable && (l->h.flags & DISK_FLAG_FROZEN)) {
		disk_seterr(err, errlen, "%s: delta is frozen (a checkpoint layer); create a new delta over it",
			    l->path);
		return -EROFS;
	}
	l->ngroups = (l->h.map_sectors + DISK_GROUP_SECTORS - 1) / DISK_GROUP_SECTORS;
	l->dir = calloc(l->ngroups, sizeof(*l->dir));
	if (!l->dir)
		return -ENOMEM;
	rc = load_map(l, st, why, sizeof(why));
	if (rc) {
		disk_seterr(err, errlen, "%s: %s", l->path, why);
		return rc;
	}
	if (!l->writable)
		return 0;
	/* A process killed inside a flush may have left map sectors in the
	 * page cache only.  Space is about to be reused on the strength of
	 * that map, so make it durable first. */
	st->syncs++;
	if (fdatasync(l->fd) < 0) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", l->path, strerror(errno));
		return rc;
	}
	return build_free_list(l, err, errlen);
}

int disk_layer_open_fd(struct disk_layer **out, int fd, const char *name, bool writable,
		       bool allow_raw, struct disk_stats *st, char *err, size_t errlen)
{
	uint8_t hdr[DISK_HDR_SIZE];
	struct disk_layer *l = calloc(1, sizeof(*l));
	struct stat sb;
	size_t got;
	int rc;

	if (!l || !(l->path = strdup(name))) {
		free(l);
		return -ENOMEM;
	}
	l->fd = fd;
	l->writable = writable;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		disk_seterr(err, errlen, "%s: not a regular file", name);
		rc = -EINVAL;
		goto fail;
	}
	l->file_size = (uint64_t)sb.st_size;
	got = l->file_size < DISK_HDR_SIZE ? (size_t)l->file_size : DISK_HDR_SIZE;
	rc = disk_pread_full(fd, hdr, got, 0);
	if (rc) {
		disk_seterr(err, errlen, "%s: %s", name, strerror(-rc));
		goto fail;
	}
	if (!disk_is_delta(hdr, got) && allow_raw && !writable) {
		l->raw = true;
		*out = l;
		return 0;
	}
	rc = open_delta(l, hdr, got, st, err, errlen);
	if (rc)
		goto fail;
	*out = l;
	return 0;
fail:
	l->fd = -1; /* the caller still owns fd */
	disk_layer_free(l);
	return rc;
}

/* Only for a clearer message when a frozen layer is opened for writing. */
static bool is_frozen(int fd)
{
	uint8_t hdr[DISK_HDR_SIZE];
	struct disk_header h;

	return pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
	       disk_header_decode(hdr, sizeof(hdr), &h, NULL, 0) == 0 && (h.flags & DISK_FLAG_FROZEN);
}

int disk_layer_open(struct disk_layer **out, const char *path, bool writable, bool allow_raw,
		    struct disk_stats *st, char *err, size_t errlen)
{
	char real[PATH_MAX];
	int fd, rc;

	if (!realpath(path, real)) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	fd = open(real, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", real, strerror(errno));
		return rc;
	}
	/* Keeps a second writer off the top, and any writer off a layer that
	 * some chain reads.  Locks go with the open file, so they vanish with
	 * a killed process. */
	if (flock(fd, (writable ? LOCK_EX : LOCK_SH) | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (writable && rc == -EBUSY && is_frozen(fd)) {
			disk_seterr(err, errlen, "%s: delta is frozen (a checkpoint layer); "
				    "create a new delta over it", real);
			rc = -EROFS;
		} else {
			disk_seterr(err, errlen, "%s: in use by another disk (%s)", real,
				    writable ? "it is open" : "it is open for writing");
		}
		close(fd);
		return rc;
	}
	rc = disk_layer_open_fd(out, fd, real, writable, allow_raw, st, err, errlen);
	if (rc)
		close(fd);
	return rc;
}

void disk_layer_free(struct disk_layer *l)
{
	if (!l)
		return;
	for (uint64_t g = 0; l->dir && g < l->ngroups; g++) {
		for (unsigned s = 0; l->dir[g] && s < DISK_GROUP_SECTORS; s++)
			free(l->dir[g][s]);
		free(l->dir[g]);
	}
	free(l->dir);
	free(l->dirty.v);
	free(l->free.v);
	free(l->pending.v);
	if (l->fd >= 0)
		close(l->fd);
	free(l->path);
	free(l);
}
