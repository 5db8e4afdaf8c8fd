/* Identity of a raw base image.
 *
 * A delta must refuse a base that is not the one it was made over, even when
 * the base was copied (a fork moved to another machine, a restored backup):
 * so the identity is the content itself, SHA-256 of every byte, truncated to
 * 16 bytes.  Hashing a multi-GiB image takes seconds, so the result is cached
 * in a sidecar file "<base>.kosa8-id" together with the file's size, mtime
 * and ctime (nanoseconds); any difference (a copy, a rewrite) means the cache
 * is ignored and the hash recomputed once.  ctime cannot be set from user
 * space, so restoring an old mtime does not fool the cache.  Inode and device
 * are left out on purpose: the same file seen through 9p or an overlay (the
 * test bed's view of the host) has other ones, and hashing 4 GiB there took
 * minutes, while its times are the same to the nanosecond.  What inode
 * numbers used to catch, a file replaced within one clock tick, is caught by
 * caching only files whose times are some seconds old (cache_store()).  If the sidecar
 * cannot be written (read-only folder), the hash is computed on every open. */
#include "disk/disk.h"
#include "disk/format.h"
#include "disk/layer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sha256.h"
#include "common/util.h"

#define ID_SUFFIX DISK_BASE_ID_SUFFIX
#define ID_TAG "kosa8-base-id 2"
#define HASH_CHUNK (1u << 20)

struct id_cache {
	uint64_t size, ino, dev;
	int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
	uint8_t sha[32];
};

static void cache_from_stat(struct id_cache *c, const struct stat *st)
{
	c->size = (uint64_t)st->st_size;
	c->ino = (uint64_t)st->st_ino;
	c->dev = (uint64_t)st->st_dev;
	c->mtime_s = st->st_mtim.tv_sec;
	c->mtime_ns = st->st_mtim.tv_nsec;
	c->ctime_s = st->st_ctim.tv_sec;
	c->ctime_ns = st->st_ctim.tv_nsec;
}

static int hash_fd(int fd, uint64_t size, uint8_t sha[32], const struct disk_hash_progress *p)
{
	uint8_t *buf = malloc(HASH_CHUNK);
	uint64_t off = 0;
	struct sha256 c;
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	sha256_init(&c);
	while (off < size) {
		size_t want = size - off < HASH_CHUNK ? (size_t)(size - off) : HASH_CHUNK;
		ssize_t n = pread(fd, buf, want, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO; /* shorter than fstat said: changing under us */
			break;
		}
		sha256_update(&c, buf, (size_t)n);
		off += (uint64_t)n;
		if (p && p->fn && p->fn(p->ctx, off, size)) {
			rc = -ECANCELED;
			break;
		}
	}
	if (!rc)
		sha256_final(&c, sha);
	free(buf);
	return rc;
}

static int format_cache(const struct id_cache *c, char *out, size_t len)
{
	char hex[65];
	int n;

	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", c->sha[i]);
	n = snprintf(out, len,
		     ID_TAG "\nsize %" PRIu64
		     "\nmtime %" PRId64 ".%09" PRId64 "\nctime %" PRId64 ".%09" PRId64
		     "\nsha256 %s\n",
		     c->size, c->mtime_s, c->mtime_ns, c->ctime_s, c->ctime_ns, hex);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

/* The cache is valid only if it is byte for byte what we would write for
 * this stat and its hash: a strict compare instead of a lenient parser. */
static bool cache_matches(const char *path, const struct id_cache *now, uint8_t sha[32])
{
	char want[512], hex[3] = {0};
	uint8_t *buf = NULL;
	size_t len = 0;
	const char *h;
	struct id_cache c = *now;
	bool ok = false;

	if (read_file(path, 1024, &buf, &len) < 0)
		return false;
	h = memmem(buf, len, "\nsha256 ", 8);
	if (!h || (size_t)(h - (char *)buf) + 8 + 65 != len)
		goto out;
	h += 8;
	for (int i = 0; i < 32; i++) {
		char *end;
		memcpy(hex, h + 2 * i, 2);
		c.sha[i] = (uint8_t)strtoul(hex, &end, 16);
		if (*end)
			goto out;
	}
	if (format_cache(&c, want, sizeof(want)) < 0 || strlen(want) != len || memcmp(want, buf, len))
		goto out;
	memcpy(sha, c.sha, 32);
	ok = true;
out:
	free(buf);
	return ok;
}

/* File times have a coarse tick: a base replaced within the same tick as
 * the original would show the same times.  So a result is cached only for a
 * file whose ctime is some seconds old: a replacement made after the cache
 * was written then necessarily has a later ctime, and is hashed again. */
#define CACHE_MIN_AGE_S 2

static void cache_store(const char *path, const struct id_cache *c)
{
	char text[512], tmp[PATH_MAX];
	int n = format_cache(c, text, sizeof(text)), fd;
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	if (now.tv_sec - c->ctime_s < CACHE_MIN_AGE_S)
		return;
	if (n < 0 || snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp))
		return;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_once(0xd15c1d, 0, "cannot cache the base image identity in %s: %s (hashing it on every open)",
			 path, strerror(errno));
		return;
	}
	/* Write then rename: a reader sees the old cache or the new one. */
	if (write_all(fd, text, (size_t)n) < 0 || fsync(fd) < 0 || rename(tmp, path) < 0)
		unlink(tmp);
	close(fd);
}

static int base_id_fd(int fd, const char *path, const struct stat *st, uint8_t id[16],
		      const struct disk_hash_progress *p, char *err, size_t errlen)
{
	char side[PATH_MAX];
	struct id_cache c;
	int rc;

	if (snprintf(side, sizeof(side), "%s" ID_SUFFIX, path) >= (int)sizeof(side)) {
		disk_seterr(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	cache_from_stat(&c, st);
	if (cache_matches(side, &c, c.sha)) {
		memcpy(id, c.sha, 16);
		return 0;
	}
	log_info("hashing base image %s (%" PRIu64 " MiB) once to identify it", path, c.size >> 20);
	rc = hash_fd(fd, c.size, c.sha, p);
	if (rc == -ECANCELED) {
		disk_seterr(err, errlen, "interrupted");
		return rc;
	}
	if (rc) {
		disk_seterr(err, errlen, "%s: cannot read base image: %s", path, strerror(-rc));
		return rc;
	}
	memcpy(id, c.sha, 16);
	cache_store(side, &c);
	return 0;
}

/* fd is the open base; st its fstat. */
int disk_base_id_fd(int fd, const char *path, const struct stat *st, uint8_t id[16],
		    char *err, size_t errlen)
{
	return base_id_fd(fd, path, st, id, NULL, err, errlen);
}

int disk_base_id_progress(const char *path, uint8_t id[16], const struct disk_hash_progress *p,
			  char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		disk_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		disk_seterr(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	rc = base_id_fd(fd, path, &st, id, p, err, errlen);
	close(fd);
	return rc;
}

int disk_base_id(const char *path, uint8_t id[16], char *err, size_t errlen)
{
	return disk_base_id_progress(path, id, NULL, err, errlen);
}
