#include "common/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


/* Room for a few descriptors: a peer that sends more than one is refused,
 * and those that fit here are closed rather than left open in the
 * receiver (the kernel closes the ones that did not fit). */
#define FDPASS_ROOM 8

int fdpass_send(int sock, const void *buf, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (!len)
		return -EINVAL;
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	/* sendmsg to the end, not write: MSG_NOSIGNAL keeps a peer that went
	 * away from killing this process with SIGPIPE. */
	while (iov.iov_len) {
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
		mh.msg_control = NULL; /* the descriptor went with the first byte */
		mh.msg_controllen = 0;
	}
	return 0;
}

/* Closes every descriptor in the SCM_RIGHTS messages of mh. */
static void close_passed(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			close(fd);
		}
	}
}

/* The one descriptor mh carries: 1 and *fd set, 0 when there is none,
 * -EPROTO for anything else (the caller then closes them all). */
static int one_passed(struct msghdr *mh, int *fd)
{
	int found = 0;

	if (mh->msg_flags & MSG_CTRUNC)
		return -EPROTO;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len != CMSG_LEN(sizeof(int)) || found++)
			return -EPROTO;
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
	return found;
}

ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd_out)
{
	union {
		char buf[CMSG_SPACE(FDPASS_ROOM * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	int fd = -1, got;

	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	got = one_passed(&mh, &fd);
	if (got < 0 || (got && (!fd_out || *fd_out >= 0))) {
		close_passed(&mh);
		return -EPROTO;
	}
	if (got)
		*fd_out = fd;
	return n;
}
