/* File helpers on plain libc (see fileio.h). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ssize_t read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int fd_regular_size(int fd, uint64_t max, size_t *size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > max || (uint64_t)st.st_size > SIZE_MAX / 2)
		return -EFBIG;
	*size = (size_t)st.st_size;
	return 0;
}

int read_fd(int fd, size_t max, uint8_t **buf, size_t *len)
{
	size_t size;
	uint8_t *p;
	ssize_t n;
	int err;

	if ((err = fd_regular_size(fd, max, &size)))
		return err;
	p = malloc(size ? size : 1);
	if (!p)
		return -ENOMEM;
	n = read_full(fd, p, size);
	if (n < 0) {
		free(p);
		return (int)n;
	}
	*buf = p;
	*len = (size_t)n;
	return 0;
}

int read_file(const char *path, size_t max, uint8_t **buf, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), err;

	if (fd < 0)
		return -errno;
	err = read_fd(fd, max, buf, len);
	close(fd);
	return err;
}

int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int write_text_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int err = 0;

	if (fd < 0)
		return -errno;
	if (write_all(fd, text, strlen(text)) < 0)
		err = -errno;
	close(fd);
	return err;
}

int write_file_replace(const char *path, const char *text, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd, err;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	err = write_all(fd, text, strlen(text));
	close(fd);
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	return err;
}

int mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
