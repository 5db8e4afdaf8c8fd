/* See console_log.h. */
#include "supervisor/console_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

struct console_log {
	char path[PATH_MAX], old[PATH_MAX];
	int rfd, fd;
	uint64_t size, max;
	pthread_t thread;
};

static int open_log(const char *path, int flags)
{
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | flags, 0600);
}

/* path -> path.1 (the one before is dropped), and a new path: its
 * descriptor, or -errno. */
static int rotate_file(const char *path, const char *old)
{
	int fd;

	if (rename(path, old) < 0)
		return -errno;
	fd = open_log(path, O_TRUNC);
	return fd < 0 ? -errno : fd;
}

static int rotate(struct console_log *c)
{
	int fd = rotate_file(c->path, c->old);

	if (fd < 0)
		return fd;
	close(c->fd);
	c->fd = fd;
	c->size = 0;
	return 0;
}

static void *copy_thread(void *arg)
{
	struct console_log *c = arg;
	char buf[16384];
	bool failed = false;
	ssize_t n;

	while ((n = read(c->rfd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (c->size + (uint64_t)n > c->max && !failed) {
			int err = rotate(c);
			if (err) {
				/* Keep reading (the VMM must not block), write nothing. */
				log_err("console log: cannot rotate %s: %s; the rest is discarded", c->path,
					strerror(-err));
				failed = true;
			}
		}
		if (failed)
			continue;
		if (write_all(c->fd, buf, (size_t)n) == 0)
			c->size += (uint64_t)n;
	}
	return NULL;
}

int console_log_start(const char *path, uint64_t max, struct console_log **out, int *wfd)
{
	struct console_log *c = calloc(1, sizeof(*c));
	int p[2] = {-1, -1}, err;
	struct stat st;

	if (!c)
		return -ENOMEM;
	c->fd = c->rfd = -1;
	c->max = max ? max : CONSOLE_LOG_MAX;
	if ((size_t)snprintf(c->path, sizeof(c->path), "%s", path) >= sizeof(c->path) ||
	    (size_t)snprintf(c->old, sizeof(c->old), "%s" CONSOLE_LOG_OLD_SUFFIX, path) >= sizeof(c->old)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	if ((c->fd = open_log(path, 0)) < 0 || fstat(c->fd, &st) < 0 || pipe2(p, O_CLOEXEC) < 0) {
		err = -errno;
		goto fail;
	}
	c->size = (uint64_t)st.st_size;
	c->rfd = p[0];
	if ((err = -pthread_create(&c->thread, NULL, copy_thread, c)))
		goto fail;
	*wfd = p[1];
	*out = c;
	return 0;
fail:
	if (p[1] >= 0)
		close(p[1]);
	if (c->rfd >= 0)
		close(c->rfd);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	return err;
}

void console_log_stop(struct console_log *c)
{
	if (!c)
		return;
	pthread_join(c->thread, NULL);
	close(c->rfd);
	close(c->fd);
	free(c);
}

int console_log_bound_stderr(const char *path, uint64_t max)
{
	char old[PATH_MAX];
	struct stat st, at;
	int fd, err;

	if (!max)
		max = CONSOLE_LOG_MAX;
	/* Only the file at path, as this process's stderr (else: not ours). */
	if (fstat(STDERR_FILENO, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size <= max)
		return 0;
	if (lstat(path, &at) < 0 || at.st_dev != st.st_dev || at.st_ino != st.st_ino)
		return 0;
	if ((size_t)snprintf(old, sizeof(old), "%s" CONSOLE_LOG_OLD_SUFFIX, path) >= sizeof(old))
		return -ENAMETOOLONG;
	fflush(stdout);
	fflush(stderr);
	if ((fd = rotate_file(path, old)) < 0)
		return fd;
	err = dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0 ? -errno : 1;
	close(fd);
	return err;
}
