#include "audit/upgrade.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/* What the new log's first record says of the old one.  The counts and the
 * newest head are as the old files hold them (nothing here verifies them);
 * the SHA-256 of both files binds their exact bytes into the new chain. */
struct v1_facts {
	uint64_t records, bytes;
	bool whole;   /* the records end exactly at the end of the file */
	uint8_t log_sha[32], heads_sha[32];
	bool heads, head; /* a heads file; a parsable newest head line in it */
	unsigned long long head_size;
	char head_root[65];
};

/* SHA-256 of a whole file by fd (mapped: read-only, a few pages at a time
 * by the kernel); *len its size. */
static int hash_fd(int fd, uint8_t out[32], uint8_t **map, size_t *len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	*len = (size_t)st.st_size;
	*map = NULL;
	if (*len) {
		*map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (*map == MAP_FAILED)
			return -errno;
	}
	if (!EVP_Digest(*len ? *map : (const uint8_t *)"", *len, out, NULL, EVP_sha256(), NULL)) {
		if (*len)
			munmap(*map, *len);
		return -EIO;
	}
	return 0;
}

static void count_records(const uint8_t *m, size_t len, struct v1_facts *f)
{
	struct audit_record r;
	size_t off = AUDIT_HDR_LEN;
	int n;

	while (off < len && (n = audit_record_parse(m + off, len - off, &r)) > 0) {
		off += (size_t)n;
		f->records++;
	}
	f->bytes = len;
	f->whole = off == len;
}

/* Version 1 head line: "K8AH1 <log id> <size> <time> <root> <pub> <sig>". */
static void newest_head(const uint8_t *m, size_t len, struct v1_facts *f)
{
	char line[400];
	size_t end = len, start;

	if (!len)
		return;
	while (end && m[end - 1] == '\n')
		end--;
	start = end;
	while (start && m[start - 1] != '\n')
		start--;
	if (end - start >= sizeof(line))
		return;
	memcpy(line, m + start, end - start);
	line[end - start] = 0;
	f->head = sscanf(line, "K8AH1 %*32[0-9a-f] %llu %*u %64[0-9a-f]", &f->head_size,
			 f->head_root) == 2 && strlen(f->head_root) == 64;
}

/* Hashes the file at fd and hands its bytes to use. */
static int take(int fd, uint8_t sha[32], void (*use)(const uint8_t *, size_t, struct v1_facts *),
		struct v1_facts *f)
{
	uint8_t *m = NULL;
	size_t len = 0;
	int err = hash_fd(fd, sha, &m, &len);

	if (err)
		return err;
	use(m, len, f);
	if (len)
		munmap(m, len);
	return 0;
}

static int gather(int fd, const char *heads_path, struct v1_facts *f)
{
	int hfd, err = take(fd, f->log_sha, count_records, f);

	if (err)
		return err;
	hfd = open(heads_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (hfd < 0)
		return errno == ENOENT ? 0 : -errno;
	err = take(hfd, f->heads_sha, newest_head, f);
	close(hfd);
	f->heads = !err;
	return err;
}

/* A u64 exactly (a JSON number through a double loses nanoseconds). */
static void add_u64(cJSON *o, const char *name, uint64_t v)
{
	char num[24];

	snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
	cJSON_AddRawToObject(o, name, num);
}

static char *details(const struct v1_facts *f, const struct audit_header *old, const char *alog,
		     const char *aheads, const char *astate)
{
	char id[2 * AUDIT_LOG_ID_LEN + 1], hex[65];
	cJSON *o = cJSON_CreateObject(), *h;
	char *s;

	audit_hex(old->log_id, AUDIT_LOG_ID_LEN, id);
	cJSON_AddNumberToObject(o, "format", 1);
	cJSON_AddStringToObject(o, "log", alog);
	cJSON_AddStringToObject(o, "log_id", id);
	add_u64(o, "created", old->created_ns);
	add_u64(o, "records", f->records);
	cJSON_AddBoolToObject(o, "records_whole", f->whole);
	add_u64(o, "bytes", f->bytes);
	audit_hex(f->log_sha, 32, hex);
	cJSON_AddStringToObject(o, "log_sha256", hex);
	if (f->heads) {
		cJSON_AddStringToObject(o, "heads", aheads);
		audit_hex(f->heads_sha, 32, hex);
		cJSON_AddStringToObject(o, "heads_sha256", hex);
	}
	if (astate)
		cJSON_AddStringToObject(o, "state", astate);
	if (f->head) {
		h = cJSON_AddObjectToObject(o, "newest_head");
		add_u64(h, "size", f->head_size);
		cJSON_AddStringToObject(h, "root", f->head_root);
	}
	s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

int audit_new_file(const char *path, char *tmp, size_t cap, struct audit_header *h)
{
	char dir[PATH_MAX];
	uint8_t buf[AUDIT_HDR_LEN];
	struct timespec ts;
	int fd, err;

	snprintf(dir, sizeof(dir), "%s", path);
	if ((size_t)snprintf(tmp, cap, "%s/.audit-new-XXXXXX", dirname(dir)) >= cap)
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_APPEND | O_CLOEXEC); /* mode 0600 */
	if (fd < 0)
		return -errno;
	clock_gettime(CLOCK_REALTIME, &ts);
	h->created_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	err = RAND_bytes(h->log_id, AUDIT_LOG_ID_LEN) == 1 ? 0 : -EIO;
	audit_header_encode(h, buf);
	if (!err)
		err = write_all(fd, buf, sizeof(buf));
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (err) {
		close(fd);
		unlink(tmp);
		return err;
	}
	return fd;
}

/* The new log, whole (header only) and locked before it takes the name:
 * a writer that opens it waits until its first record is in. */
static int new_log(const char *path, char *tmp, size_t cap, struct audit_header *h)
{
	int fd = audit_new_file(path, tmp, cap, h), err;

	if (fd >= 0 && flock(fd, LOCK_EX) < 0) {
		err = -errno;
		close(fd);
		unlink(tmp);
		return err;
	}
	return fd;
}

static bool taken(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0 || errno != ENOENT;
}

int audit_v1_archive(const char *path, int fd, int *new_fd, char **det)
{
	char alog[PATH_MAX], aheads[PATH_MAX], astate[PATH_MAX], heads[PATH_MAX], state[PATH_MAX];
	char tmp[PATH_MAX], id[2 * AUDIT_LOG_ID_LEN + 1];
	uint8_t hb[AUDIT_HDR_LEN];
	struct audit_header old, fresh;
	struct v1_facts f = {0};
	struct stat a, b;
	struct audit_event ev = {"", "kosa8", AUDIT_ARCHIVED_TYPE, NULL};
	bool moved_heads = false, moved_state = false, has_state;
	int nfd, err;

	if (pread(fd, hb, sizeof(hb), 0) != (ssize_t)sizeof(hb) ||
	    audit_header_version(hb, sizeof(hb)) != 1)
		return -EPROTONOSUPPORT; /* refused as before: never "repaired" */
	audit_header_parse(hb, sizeof(hb), &old); /* -EPROTONOSUPPORT, old filled */
	/* another writer archived it while this one waited for the lock */
	if (fstat(fd, &a) < 0 || stat(path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		return -ESTALE;
	audit_hex(old.log_id, AUDIT_LOG_ID_LEN, id);
	if ((size_t)snprintf(alog, sizeof(alog), "%s.v1-%s", path, id) >= sizeof(alog) ||
	    (size_t)snprintf(aheads, sizeof(aheads), "%s.heads", alog) >= sizeof(aheads) ||
	    (size_t)snprintf(astate, sizeof(astate), "%s.state", alog) >= sizeof(astate) ||
	    (size_t)snprintf(heads, sizeof(heads), "%s.heads", path) >= sizeof(heads) ||
	    (size_t)snprintf(state, sizeof(state), "%s.state", path) >= sizeof(state))
		return -ENAMETOOLONG;
	if (taken(alog) || taken(aheads) || taken(astate)) {
		log_err("audit: %s is a format-1 log, but %s (or its .heads or .state) already "
			"exists; refusing to move the log over it (move that file away, then retry)",
			path, alog);
		return -EEXIST;
	}
	err = gather(fd, heads, &f);
	if (err)
		return err;
	/* The record is checked before anything moves: a path that is not
	 * UTF-8 text must not leave the archive unnamed. */
	has_state = stat(state, &b) == 0 && b.st_size > 0;
	*det = details(&f, &old, alog, aheads, has_state ? astate : NULL);
	if (!*det)
		return -ENOMEM;
	ev.details = *det;
	if (audit_event_check(&ev) < 0) {
		log_err("audit: %s is a format-1 log, but its path is not UTF-8 text, which the "
			"record naming its archive must be; refusing to move it", path);
		free(*det);
		*det = NULL;
		return -EINVAL;
	}
	nfd = new_log(path, tmp, sizeof(tmp), &fresh);
	if (nfd < 0) {
		free(*det);
		*det = NULL;
		return nfd;
	}
	/* Companions first, so that a writer never pairs the new log with
	 * the old heads; RENAME_NOREPLACE and link() never overwrite. */
	err = renameat2(AT_FDCWD, heads, AT_FDCWD, aheads, RENAME_NOREPLACE) < 0 && errno != ENOENT
		      ? -errno : 0;
	moved_heads = !err && f.heads;
	/* an empty cache holds nothing (this writer's open may have made it) */
	if (!err && stat(state, &b) == 0 && b.st_size == 0)
		unlink(state);
	if (!err && renameat2(AT_FDCWD, state, AT_FDCWD, astate, RENAME_NOREPLACE) == 0)
		moved_state = true;
	else if (!err && errno != ENOENT)
		err = -errno;
	if (!err && link(path, alog) < 0)
		err = -errno;
	if (!err && rename(tmp, path) < 0) {
		err = -errno;
		unlink(alog);
	}
	if (err) {
		if (moved_state)
			renameat2(AT_FDCWD, astate, AT_FDCWD, state, RENAME_NOREPLACE);
		if (moved_heads)
			renameat2(AT_FDCWD, aheads, AT_FDCWD, heads, RENAME_NOREPLACE);
		unlink(tmp);
		close(nfd);
		free(*det);
		*det = NULL;
		log_err("audit: %s is a format-1 log; moving it aside failed: %s (nothing was changed)",
			path, strerror(-err));
		return err;
	}
	sync_dir_of(path);
	log_warn("audit: %s was a format-1 log (%llu records, written by an older kosa8); moved it "
		 "to %s%s%s and started a format-2 log whose first record (audit.archived) names "
		 "them ('kosa8 audit show' prints it)", path, (unsigned long long)f.records, alog,
		 f.heads ? " and " : "", f.heads ? aheads : "");
	*new_fd = nfd;
	return 0;
}
