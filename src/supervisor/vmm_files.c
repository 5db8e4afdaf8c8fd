#include "supervisor/vmm_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/jail.h"

/* Whose files the VMM may be given: root's (the supervisor's, the CLI's, an
 * older kosa8's VMM) and other VMM uids' (kosa8's own range).  A user's or
 * a system account's file is never taken, whatever led to it. */
static bool takeable(const struct stat *st, const struct vmm_files *f)
{
	return st->st_uid == 0 || (jail_is_vmm_id((uint32_t)st->st_uid) && st->st_uid != f->uid);
}

/* fd is an O_PATH descriptor of the very inode checked (opened without
 * following a link), so a name swapped meanwhile changes nothing else. */
static int take(int fd, const struct stat *st, const struct vmm_files *f)
{
	mode_t mode = st->st_mode & 07777;
	char proc[40];

	if (fchownat(fd, "", f->uid, f->gid, AT_EMPTY_PATH) < 0)
		return -errno;
	if (S_ISREG(st->st_mode))
		mode |= S_IRGRP;
	else if (S_ISDIR(st->st_mode))
		mode |= S_IRGRP | S_IXGRP | S_ISGID;
	else
		return 0; /* a socket: its owner may connect */
	/* fchmodat cannot take an O_PATH descriptor before Linux 6.6. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return chmod(proc, mode) < 0 ? -errno : 0;
}

static int walk(int dirfd, const char *name, const struct vmm_files *f, int depth, char *why,
		size_t whylen);

static int walk_entries(int fd, const struct vmm_files *f, int depth, char *why, size_t whylen)
{
	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
	struct dirent *e;
	DIR *d;

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		rc = -errno;
		if (dfd >= 0)
			close(dfd);
		return rc;
	}
	while (!rc && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = walk(dirfd(d), e->d_name, f, depth, why, whylen);
	closedir(d);
	return rc;
}

/* name below dirfd, then (depth > 0) what a directory holds. */
static int walk(int dirfd, const char *name, const struct vmm_files *f, int depth, char *why,
		size_t whylen)
{
	int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC), rc = 0;
	struct stat st;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (S_ISLNK(st.st_mode))
		goto out;
	else if (takeable(&st, f))
		rc = take(fd, &st, f);
	if (!rc && depth > 0 && S_ISDIR(st.st_mode))
		rc = walk_entries(fd, f, depth - 1, why, whylen);
out:
	if (rc && !why[0])
		snprintf(why, whylen, "cannot hand %.300s over to the VMM's user: %s", name,
			 strerror(-rc));
	close(fd);
	return rc;
}

int vmm_files_hand_over(const struct vmm_files *f, char *why, size_t whylen)
{
	const struct {
		const char *path;
		int depth;
	} list[] = {
		{f->vm_dir, 1},   /* its sockets */
		{f->ckpt_dir, 2}, /* checkpoints, deltas, and a checkpoint's files */
		{f->first_disk, 0},
		{f->top, 0},
	};
	int rc = 0;

	why[0] = 0;
	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]) && !rc; i++)
		if (list[i].path)
			rc = walk(AT_FDCWD, list[i].path, f, list[i].depth, why, whylen);
	return rc;
}
