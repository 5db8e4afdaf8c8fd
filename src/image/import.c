/* Export and import of images (import.h). */
#include "image/import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "common/fileio.h"
#include "common/sha256.h"
#include "common/util.h"
#include "disk/disk.h"
#include "image/fetch.h"

#define HASH_CHUNK (1u << 20)

static void note(const struct image_import_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const struct image_import_opts *o, const char *fmt, ...)
{
	char line[PATH_MAX + 256];
	va_list ap;

	if (!o->note)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	o->note(o->progress ? o->progress->ctx : NULL, line);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void remove_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Under the lock no import runs: every .import-* folder is a dead one. */
static void remove_stale(const char *root)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d = opendir(root);

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, ".import-", 8) ||
		    snprintf(path, sizeof(path), "%s/%s", root, e->d_name) >= (int)sizeof(path))
			continue;
		remove_tree(path);
	}
	closedir(d);
}

/* The cache's lock, as build.sh takes it: one build or import at a time. */
static int lock_cache(const struct image_import_opts *o, const char *root, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int fd;

	if (snprintf(path, sizeof(path), "%s/.lock", root) >= (int)sizeof(path))
		return image_err(err, errlen, -ENAMETOOLONG, "%s: path too long", root);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644)) < 0)
		return image_err(err, errlen, -errno, "%s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;
	note(o, "another image build or import holds %s; waiting", path);
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR || image_cancelled(o->progress)) {
			close(fd);
			return image_err(err, errlen, errno == EINTR ? -ECANCELED : -errno, "waiting for %s: %s", path,
				    errno == EINTR ? "interrupted" : strerror(errno));
		}
	}
	return fd;
}

/* The last path segment of a path or URL (a URL's query cut off). */
static void base_of(const char *src, char *buf, size_t len)
{
	const char *s = strrchr(src, '/');
	size_t n;

	s = s ? s + 1 : src;
	n = strcspn(s, image_is_url(src) ? "?#" : "");
	snprintf(buf, len, "%.*s", (int)n, s);
}

/* SOURCE.sha256 next to the archive: 0 (sha set), -ENOENT, or an error. */
static int sums_file(const char *src, bool url, uint8_t sha[32], char *err, size_t errlen)
{
	char path[PATH_MAX + 8], base[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (snprintf(path, sizeof(path), "%s.sha256", src) >= (int)sizeof(path))
		return image_err(err, errlen, -ENAMETOOLONG, "%s: too long", src);
	if (url)
		rc = image_fetch_small(path, IMAGE_SUMS_MAX, &text, &len, err, errlen);
	else if ((rc = read_file(path, IMAGE_SUMS_MAX, (uint8_t **)&text, &len)) && rc != -ENOENT)
		image_err(err, errlen, rc, "%s: %s", path, strerror(-rc));
	if (rc)
		return rc;
	base_of(src, base, sizeof(base));
	rc = image_sums_find(text, len, base, sha);
	if (rc == -ENOENT)
		image_err(err, errlen, -EBADMSG, "%s names no file '%s'", path, base);
	else if (rc)
		image_err(err, errlen, rc, "%s is not a SHA-256 checksum file (sha256sum's format)", path);
	free(text);
	return rc ? -EBADMSG : 0;
}

/* What the archive must hash to, and how that is known. */
static int expected_sha(const struct image_import_opts *o, bool url, uint8_t sha[32], enum image_verified *v,
			char *err, size_t errlen)
{
	int rc;

	*v = IMAGE_UNVERIFIED;
	if (o->sha) {
		memcpy(sha, o->sha, 32);
		*v = IMAGE_SHA_GIVEN;
		return 0;
	}
	if (o->no_verify) {
		note(o, "warning: --no-verify: the archive's checksum is not checked");
		return 0;
	}
	rc = sums_file(o->source, url, sha, err, errlen);
	if (rc == 0) {
		*v = IMAGE_SHA_FILE;
		note(o, "checksum from %s.sha256", o->source);
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	if (url)
		return image_err(err, errlen, -EPERM,
			    "no checksum to verify %s against (none given and no %s.sha256); nothing imported",
			    o->source, o->source);
	note(o, "warning: no checksum (none given and no %s.sha256): the archive is NOT verified", o->source);
	return 0;
}

/* SHA-256 of a local archive, read once before it is unpacked. */
static int hash_file(int fd, uint64_t size, const struct image_progress *p, uint8_t sha[32])
{
	uint8_t *buf = malloc(HASH_CHUNK);
	uint64_t done = 0;
	struct sha256 c;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	sha256_init(&c);
	while ((n = read(fd, buf, HASH_CHUNK)) != 0) {
		if (n < 0 && errno == EINTR && !image_cancelled(p))
			continue;
		if (n < 0 || image_cancelled(p)) {
			free(buf);
			return image_cancelled(p) ? -ECANCELED : -errno;
		}
		sha256_update(&c, buf, (size_t)n);
		done += (uint64_t)n;
		image_progress_report(p, "hashing the archive", done, size, false);
	}
	free(buf);
	image_progress_report(p, "hashing the archive", done, size, true);
	sha256_final(&c, sha);
	return lseek(fd, 0, SEEK_SET) < 0 ? -errno : 0;
}

struct job {
	const struct image_import_opts *o;
	struct image_import_result *r;
	char root[PATH_MAX], tmp[PATH_MAX], out[PATH_MAX + 8], dest[PATH_MAX + 96];
	int fd;               /* the archive */
	uint64_t size;
	struct stat st;       /* a local archive's, when it was hashed */
	uint8_t want[32], got[32];
	struct image_unpacked u;
	char *err;
	size_t errlen;
};

/* The archive open in j->fd: downloaded into the temporary folder, or the
 * local file itself; its SHA-256 in j->got. */
static int get_archive(struct job *j, bool url)
{
	char path[PATH_MAX + 16];
	int rc;

	if (url) {
		snprintf(path, sizeof(path), "%s/archive", j->tmp);
		if ((j->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
			return image_err(j->err, j->errlen, -errno, "%s: %s", path, strerror(errno));
		note(j->o, "downloading %s", j->o->source);
		rc = image_fetch(j->o->source, j->fd, IMAGE_ARCHIVE_MAX, j->o->progress, j->got, &j->size, j->err,
				 j->errlen);
		return rc ? rc : lseek(j->fd, 0, SEEK_SET) < 0 ? -errno : 0;
	}
	if ((j->fd = open(j->o->source, O_RDONLY | O_CLOEXEC)) < 0)
		return image_err(j->err, j->errlen, -errno, "%s: %s", j->o->source, strerror(errno));
	if (fstat(j->fd, &j->st) < 0 || !S_ISREG(j->st.st_mode))
		return image_err(j->err, j->errlen, -EINVAL, "%s: not a regular file", j->o->source);
	j->size = (uint64_t)j->st.st_size;
	/* Hashed even unchecked: the user is shown what was imported. */
	rc = hash_file(j->fd, j->size, j->o->progress, j->got);
	return rc ? image_err(j->err, j->errlen, rc, "%s: %s", j->o->source,
			 rc == -ECANCELED ? "interrupted" : strerror(-rc)) : 0;
}

/* A local archive is read twice (hashed, then unpacked): one written to
 * in between has a new ctime, which no one can set back, and is refused. */
static int check_unchanged(struct job *j)
{
	struct stat now;

	if (!j->st.st_ino)
		return 0;
	if (fstat(j->fd, &now) < 0 || now.st_size != j->st.st_size ||
	    now.st_ctim.tv_sec != j->st.st_ctim.tv_sec || now.st_ctim.tv_nsec != j->st.st_ctim.tv_nsec)
		return image_err(j->err, j->errlen, -ESTALE, "%s changed while it was imported; nothing imported",
				 j->o->source);
	return 0;
}

static int check_sha(struct job *j)
{
	char want[65];

	image_sha_hex(j->got, j->r->sha_hex);
	if (j->r->verified == IMAGE_UNVERIFIED || !memcmp(j->want, j->got, 32))
		return 0;
	image_sha_hex(j->want, want);
	return image_err(j->err, j->errlen, -EKEYREJECTED,
		    "%s: checksum mismatch: expected %s, the archive is %s (a damaged or altered download); "
		    "nothing imported", j->o->source, want, j->r->sha_hex);
}

static int unpack(struct job *j)
{
	int dfd, rc;

	snprintf(j->out, sizeof(j->out), "%s/out", j->tmp);
	if (mkdir(j->out, 0700) < 0 || (dfd = open(j->out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return image_err(j->err, j->errlen, -errno, "%s: %s", j->out, strerror(errno));
	rc = image_archive_unpack(j->fd, j->size, dfd, j->o->progress, &j->u, j->err, j->errlen);
	if (rc == -EBADMSG) {
		char why[IMAGE_ERR_LEN];
		snprintf(why, sizeof(why), "%s", j->err);
		image_err(j->err, j->errlen, rc, "%s is refused: %s; nothing imported", j->o->source, why);
	}
	close(dfd);
	return rc;
}

static int on_hash(void *ctx, uint64_t done, uint64_t total)
{
	const struct image_progress *p = ctx;

	image_progress_report(p, "hashing the disk for its identity", done, total, done == total);
	return image_cancelled(p);
}

/* The disk's identity for sandbox disks (disk.h), computed now so that the
 * first sandbox does not, and checked against what the archive claimed. */
static int identify(struct job *j)
{
	struct disk_hash_progress hp = {.fn = on_hash, .ctx = (void *)j->o->progress};
	char disk[PATH_MAX + 32], why[DISK_ERR_LEN];
	uint8_t id[16];
	int rc;

	snprintf(disk, sizeof(disk), "%s/" IMAGE_DISK, j->out);
	if ((rc = disk_base_id_progress(disk, id, &hp, why, sizeof(why))))
		return image_err(j->err, j->errlen, rc, "%s", why);
	if (image_cancelled(j->o->progress))
		return image_err(j->err, j->errlen, -ECANCELED, "interrupted");
	if (j->u.has_id && memcmp(id, j->u.id_sha, sizeof(id)))
		return image_err(j->err, j->errlen, -EBADMSG,
			    "%s is refused: its disk does not hash to the identity its " IMAGE_ID_SIDECAR
			    " claims; nothing imported", j->o->source);
	return 0;
}

static int write_info(struct job *j)
{
	static const char *const how[] = {"no", "--sha256", "SOURCE.sha256"};
	char path[PATH_MAX + 32], when[32], *text;
	time_t now = time(NULL);
	cJSON *o = cJSON_CreateObject();
	int rc;

	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	cJSON_AddStringToObject(o, "source", j->o->source);
	cJSON_AddStringToObject(o, "sha256", j->r->sha_hex);
	cJSON_AddStringToObject(o, "verified", how[j->r->verified]);
	cJSON_AddStringToObject(o, "name", j->r->name);
	cJSON_AddStringToObject(o, "manifest_name", j->u.m.name);
	cJSON_AddStringToObject(o, "key", j->u.m.key);
	cJSON_AddStringToObject(o, "imported", when);
	text = cJSON_Print(o);
	cJSON_Delete(o);
	if (!text)
		return image_err(j->err, j->errlen, -ENOMEM, "out of memory");
	snprintf(path, sizeof(path), "%s/" IMAGE_IMPORT_INFO, j->out);
	rc = write_file_replace(path, text, 0444);
	free(text);
	return rc ? image_err(j->err, j->errlen, rc, "%s: %s", path, strerror(-rc)) : 0;
}

static int exists(struct job *j)
{
	return image_err(j->err, j->errlen, -EEXIST,
		    "image '%s' with key %s is already in the cache (%s); --force replaces it "
		    "(sandboxes on it would no longer start); nothing imported", j->r->name, j->u.m.key, j->dest);
}

/* Where the image goes; refused at once when it is there without force
 * (checked again, atomically, by the rename). */
static int set_dest(struct job *j)
{
	char root[PATH_MAX];
	struct stat st;
	int rc;

	if ((rc = image_root(j->u.m.arch, root, sizeof(root))))
		return image_err(j->err, j->errlen, rc, "cannot find the cache folder");
	if (snprintf(j->dest, sizeof(j->dest), "%s/%s/%s", root, j->r->name, j->u.m.key) >= (int)sizeof(j->dest))
		return image_err(j->err, j->errlen, -ENAMETOOLONG, "%s: path too long", root);
	return !j->o->force && lstat(j->dest, &st) == 0 ? exists(j) : 0;
}

/* out becomes <images>/NAME/KEY: a new name at once, an existing one
 * swapped with it (--force) and the old one removed with the temporary
 * folder. */
static int install(struct job *j)
{
	char *dest = j->dest;
	int rc;

	*strrchr(dest, '/') = 0;
	rc = mkdir_p(dest, 0755);
	dest[strlen(dest)] = '/';
	if (rc)
		return image_err(j->err, j->errlen, rc, "%s: %s", dest, strerror(-rc));
	if (chmod(j->out, 0755) < 0)
		return image_err(j->err, j->errlen, -errno, "%s: %s", j->out, strerror(errno));
	rc = rename_noreplace(j->out, dest);
	if (rc == -EEXIST && j->o->force) {
		if (renameat2(AT_FDCWD, j->out, AT_FDCWD, dest, RENAME_EXCHANGE) < 0)
			return image_err(j->err, j->errlen, -errno, "replacing %s: %s", dest, strerror(errno));
		j->r->replaced = true;
		rc = 0;
	}
	if (rc == -EEXIST)
		return exists(j);
	if (rc)
		return image_err(j->err, j->errlen, rc, "renaming into %s: %s", dest, strerror(-rc));
	sync_dir_of(dest);
	if (snprintf(j->r->path, sizeof(j->r->path), "%s/" IMAGE_DISK, dest) >= (int)sizeof(j->r->path))
		return image_err(j->err, j->errlen, -ENAMETOOLONG, "%s: path too long", dest);
	return 0;
}

static int run_job(struct job *j)
{
	bool url = image_is_url(j->o->source);
	int rc;

	if ((rc = expected_sha(j->o, url, j->want, &j->r->verified, j->err, j->errlen)))
		return rc;
	if ((rc = get_archive(j, url)) || (rc = check_sha(j)) || (rc = unpack(j)) || (rc = check_unchanged(j)))
		return rc;
	snprintf(j->r->name, sizeof(j->r->name), "%s", j->o->name ? j->o->name : j->u.m.name);
	snprintf(j->r->key, sizeof(j->r->key), "%s", j->u.m.key);
	if ((rc = set_dest(j)) || (rc = identify(j)) || (rc = write_info(j)))
		return rc;
	return install(j);
}

int image_import(const struct image_import_opts *o, struct image_import_result *r, char *err, size_t errlen)
{
	struct job j = {.o = o, .r = r, .fd = -1, .err = err, .errlen = errlen};
	int lock, rc;

	memset(r, 0, sizeof(*r));
	if (strstr(o->source, "://") && !image_is_url(o->source))
		return image_err(err, errlen, -EINVAL, "%s: only http://, https:// and file:// URLs are taken (or a path)",
				 o->source);
	if (o->name && !image_valid_name(o->name))
		return image_err(err, errlen, -EINVAL, "'%s' is not an image name (a-z 0-9 . _ -, up to 64)", o->name);
	if ((rc = image_root(NULL, j.root, sizeof(j.root))) || (rc = mkdir_p(j.root, 0755)))
		return image_err(err, errlen, rc, "cannot make the image cache folder: %s", strerror(-rc));
	if ((lock = lock_cache(o, j.root, err, errlen)) < 0)
		return lock;
	remove_stale(j.root);
	if (snprintf(j.tmp, sizeof(j.tmp), "%s/.import-XXXXXX", j.root) >= (int)sizeof(j.tmp) || !mkdtemp(j.tmp)) {
		rc = image_err(err, errlen, -errno, "%s: %s", j.tmp, strerror(errno));
	} else {
		rc = run_job(&j);
		if (j.fd >= 0)
			close(j.fd);
		remove_tree(j.tmp);
	}
	close(lock);
	return rc;
}

/* ---- export ---- */

static int write_sums(const char *file, const uint8_t sha[32])
{
	char path[PATH_MAX + 8], hex[65], text[PATH_MAX + 80], copy[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s.sha256", file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	snprintf(copy, sizeof(copy), "%s", file);
	image_sha_hex(sha, hex);
	snprintf(text, sizeof(text), "%s  %s\n", hex, basename(copy));
	return write_file_replace(path, text, 0644);
}

static int export_to(int dfd, const char *file, const struct image_progress *p, uint8_t sha[32], char *err,
		     size_t errlen)
{
	char tmp[PATH_MAX + 16];
	int fd, rc;

	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", file) >= (int)sizeof(tmp))
		return image_err(err, errlen, -ENAMETOOLONG, "%s: too long", file);
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		return image_err(err, errlen, -errno, "cannot write %s: %s", file, strerror(errno));
	rc = image_archive_write(dfd, fd, p, sha, err, errlen);
	if (!rc && (fchmod(fd, 0644) < 0 || fsync(fd) < 0))
		rc = image_err(err, errlen, -errno, "%s: %s", tmp, strerror(errno));
	close(fd);
	if (!rc && rename(tmp, file) < 0)
		rc = image_err(err, errlen, -errno, "%s: %s", file, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

int image_export(const char *dir, const char *file, bool sums, const struct image_progress *p, uint8_t sha[32],
		 char *err, size_t errlen)
{
	char disk[PATH_MAX + 32], why[DISK_ERR_LEN];
	uint8_t id[16];
	int dfd, rc;

	/* The identity sidecar goes along as it is now: computed if stale. */
	snprintf(disk, sizeof(disk), "%s/" IMAGE_DISK, dir);
	if (disk_base_id(disk, id, why, sizeof(why)) < 0)
		return image_err(err, errlen, -EIO, "%s", why);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return image_err(err, errlen, -errno, "%s: %s", dir, strerror(errno));
	rc = export_to(dfd, file, p, sha, err, errlen);
	close(dfd);
	if (!rc && sums && (rc = write_sums(file, sha)))
		image_err(err, errlen, rc, "%s.sha256: %s", file, strerror(-rc));
	return rc;
}
