/* File helpers on plain libc, with the tree's error convention (0 or a
 * count, else -errno).  Apart from util.c so that the static guest agent
 * links them too: util.c also looks up home directories, which a static
 * binary cannot do through NSS.  util.h includes this header. */
#ifndef KOSA8_COMMON_FILEIO_H
#define KOSA8_COMMON_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The size of the regular file open at fd into *size: -EINVAL if it is
 * something else (a FIFO, a device, a directory: their sizes mean nothing
 * and reading them may block or never end), -EFBIG if it is over max
 * bytes or does not fit in memory's address range. */
int fd_regular_size(int fd, uint64_t max, size_t *size);

/* Reads a whole file into a malloc'd buffer, refusing files over max bytes
 * and anything but a regular file (opened without blocking: a FIFO is
 * refused, not waited on). */
int read_file(const char *path, size_t max, uint8_t **buf, size_t *len);
/* The same from an open descriptor of a regular file (not closed):
 * -EINVAL if it is no regular file, -EFBIG if it is over max bytes. */
int read_fd(int fd, size_t max, uint8_t **buf, size_t *len);

/* write()/read() loops that retry on EINTR and short transfers. */
int write_all(int fd, const void *buf, size_t len);
ssize_t read_full(int fd, void *buf, size_t len);
/* Writes text into the existing file path (a /proc or cgroup knob): one
 * open, write_all, close; 0 or -errno. */
int write_text_file(const char *path, const char *text);

/* Replaces path with text at once: written to "PATH.tmp" (a link there is
 * not followed) and renamed over path, so a reader sees the old file or
 * the whole new one, never half.  0 or -errno. */
int write_file_replace(const char *path, const char *text, mode_t mode);

/* mkdir -p with the given mode for each created component. */
int mkdir_p(const char *path, mode_t mode);

#endif
