/* Remembered answers (lookup.h). */
#include "sandbox/lookup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sha256.h"
#include "common/util.h"

#define TAG "kosa8-lookup 1\n"

struct text {
	char *p;
	size_t len, cap;
	int err;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= t->cap - t->len)
		t->err = -E2BIG;
	else
		t->len += (size_t)n;
}

/* One dependency as it is now, two lines; *newest gets the latest of a
 * file's times. */
static void put_file(struct text *t, const char *path, time_t *newest)
{
	struct stat st;

	put(t, "file %s\n", path);
	if (stat(path, &st) < 0) {
		put(t, " absent\n");
		return;
	}
	put(t, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %lld.%09ld %lld.%09ld\n", (uint64_t)st.st_dev,
	    (uint64_t)st.st_ino, (uint64_t)st.st_size, (long long)st.st_mtim.tv_sec,
	    st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	if (st.st_ctim.tv_sec > *newest)
		*newest = st.st_ctim.tv_sec;
	if (st.st_mtim.tv_sec > *newest)
		*newest = st.st_mtim.tv_sec;
}

static void put_env(struct text *t, const char *name)
{
	const char *v = getenv(name);

	put(t, "env %s\n", name);
	if (v)
		put(t, " =%s\n", v);
	else
		put(t, " unset\n");
}

static bool one_line(const char *s)
{
	return s && *s && !strchr(s, '\n');
}

int lookup_check(const char *text, size_t len, char *answer, size_t alen)
{
	struct text want = {.cap = LOOKUP_FILE_MAX + 1};
	const char *p = text, *end = text + len, *ans = NULL;
	char name[PATH_MAX];
	time_t newest = 0;
	size_t alen_got = 0;
	int rc = -EBADMSG;

	if (len < sizeof(TAG) - 1 || memcmp(text, TAG, sizeof(TAG) - 1) || !(want.p = malloc(want.cap)))
		return len < sizeof(TAG) - 1 || memcmp(text, TAG, sizeof(TAG) - 1) ? -EBADMSG : -ENOMEM;
	put(&want, TAG);
	p += sizeof(TAG) - 1;
	/* Entries: a name line, then (files and variables) their state line,
	 * which is made anew from the name and compared below. */
	while (p < end && !ans) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp = memchr(p, ' ', (size_t)(end - p));
		size_t n;

		if (!nl || !sp || sp > nl)
			goto out;
		n = (size_t)(nl - sp - 1);
		if (n == 0 || n >= sizeof(name))
			goto out;
		memcpy(name, sp + 1, n);
		name[n] = 0;
		if (strlen(name) != n)
			goto out;
		if (sp - p == 4 && !memcmp(p, "file", 4)) {
			put_file(&want, name, &newest);
		} else if (sp - p == 3 && !memcmp(p, "env", 3)) {
			put_env(&want, name);
		} else if (sp - p == 6 && !memcmp(p, "answer", 6)) {
			put(&want, "answer %s\n", name);
			ans = want.err ? NULL : want.p + want.len - n - 1;
			alen_got = n;
		} else {
			goto out;
		}
		/* Skip the state line the file has: it is in want, as it is now. */
		p = nl + 1;
		if (!ans) {
			if (!(nl = memchr(p, '\n', (size_t)(end - p))))
				goto out;
			p = nl + 1;
		}
	}
	if (!ans || p != end)
		goto out;
	if (want.err || want.len != len || memcmp(want.p, text, len)) {
		rc = -ESTALE;
	} else if (alen_got >= alen) {
		rc = -ENAMETOOLONG;
	} else {
		memcpy(answer, ans, alen_got);
		answer[alen_got] = 0;
		rc = 0;
	}
out:
	free(want.p);
	return rc;
}

int lookup_load(const char *path, char *answer, size_t alen)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = read_file(path, LOOKUP_FILE_MAX, &buf, &len);

	if (rc)
		return rc;
	rc = lookup_check((const char *)buf, len, answer, alen);
	free(buf);
	return rc;
}

static int write_whole(const char *path, const struct text *t)
{
	char tmp[PATH_MAX];
	int fd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write_all(fd, t->p, t->len) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	/* A lost answer is looked up again: no fsync. */
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

int lookup_store(const char *path, const struct lookup_deps *d, const char *answer)
{
	struct text t = {.cap = LOOKUP_FILE_MAX};
	time_t newest = 0;
	int rc;

	if (!one_line(answer) || strlen(answer) >= LOOKUP_ANSWER_MAX || d->nfiles > LOOKUP_DEPS_MAX ||
	    d->nenv > LOOKUP_DEPS_MAX)
		return -EINVAL;
	for (size_t i = 0; i < d->nfiles; i++)
		if (!one_line(d->files[i]) || strlen(d->files[i]) >= PATH_MAX)
			return -EINVAL;
	for (size_t i = 0; i < d->nenv; i++)
		if (!one_line(d->env[i]) || strchr(d->env[i], ' '))
			return -EINVAL;
	if (!(t.p = malloc(t.cap)))
		return -ENOMEM;
	put(&t, TAG);
	for (size_t i = 0; i < d->nfiles; i++)
		put_file(&t, d->files[i], &newest);
	for (size_t i = 0; i < d->nenv; i++)
		put_env(&t, d->env[i]);
	put(&t, "answer %s\n", answer);
	if (t.err)
		rc = t.err;
	else if (newest > time(NULL) - LOOKUP_MIN_AGE_S)
		rc = -EAGAIN;
	else
		rc = write_whole(path, &t);
	free(t.p);
	return rc;
}

int lookup_path(const void *question, size_t qlen, char *buf, size_t len)
{
	char dir[PATH_MAX], why[PATH_MAX + 128];
	uint8_t h[SHA256_LEN];
	int rc;

	if ((rc = kosa8_state_dir(dir, sizeof(dir))))
		return rc;
	if (strlen(dir) + sizeof("/cache") > sizeof(dir))
		return -ENAMETOOLONG;
	if ((rc = mkdir_p(dir, 0700)))
		return rc;
	strcat(dir, "/cache");
	if ((rc = private_dir(dir, true, why, sizeof(why))))
		return rc;
	sha256(question, qlen, h);
	if (snprintf(buf, len, "%s/lookup-", dir) >= (int)len || strlen(buf) + 33 > len)
		return -ENAMETOOLONG;
	for (int i = 0; i < 16; i++)
		sprintf(buf + strlen(buf), "%02x", h[i]);
	return 0;
}
