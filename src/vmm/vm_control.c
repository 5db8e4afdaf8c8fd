/* The VMM's control socket: a unix stream socket that takes one command per
 * line and answers one line, "ok ..." or "error ...":
 *
 *   pause                     stop the vCPUs and devices
 *   resume                    let them run again
 *   checkpoint DIR [NEWTOP]   write a checkpoint (vm_checkpoint)
 *   checkpoint-live DIR [NEWTOP]
 *                             the same for a live fork (vm_checkpoint_live):
 *                             the answer carries the frozen memory's fd
 *                             (SCM_RIGHTS) when there is one ("live=1")
 *   status                    "ok running" or "ok paused"
 *   stop                      end the VM as if stopped from the host
 *
 * Whoever can connect controls the VM, so the socket is created mode 0600
 * and its directory is the caller's to protect (the supervisor keeps it in
 * the sandbox's private state directory).  One client is served at a time;
 * others wait in the listen backlog.  Lines are bounded: a longer one is
 * answered with an error and the client dropped. */
#include "vmm/vm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

int vm_control_open(struct vm *vm, const char *path, const char **why)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	mode_t old;
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		*why = "--control path is too long for a unix socket (108 bytes)";
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*why = "cannot create the control socket";
		return -errno;
	}
	old = umask(0077);
	err = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old);
	if (!err && listen(fd, 4) < 0)
		err = -errno;
	if (err) {
		close(fd);
		snprintf(vm->err_buf, sizeof(vm->err_buf), "cannot listen on the control socket %.300s: %s",
			 path, strerror(-err));
		*why = vm->err_buf;
		return err;
	}
	vm->control_fd = fd;
	memcpy(vm->control_path, path, strlen(path) + 1);
	return 0;
}

void vm_control_close(struct vm *vm)
{
	if (vm->control_client >= 0)
		close(vm->control_client);
	vm->control_client = -1;
	if (vm->control_fd >= 0) {
		if (vm->control_path[0])
			unlink(vm->control_path);
		close(vm->control_fd);
	}
	vm->control_fd = -1;
}

int vm_control_pollfds(struct vm *vm, struct pollfd *pfd)
{
	if (vm->control_client >= 0) {
		pfd[0] = (struct pollfd){.fd = vm->control_client, .events = POLLIN};
		return 1;
	}
	if (vm->control_fd >= 0) {
		pfd[0] = (struct pollfd){.fd = vm->control_fd, .events = POLLIN};
		return 1;
	}
	return 0;
}

/* Sends line with fd attached to its first byte, then the rest. */
static int send_with_fd(int sock, const char *line, size_t len, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = (void *)line, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c;
	ssize_t n;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	return write_all(sock, line + n, len - (size_t)n);
}

/* One answer line: "ok TEXT" or "error TEXT", with fd passed when >= 0. */
static void reply_fd(struct vm *vm, const char *status, const char *text, int fd)
{
	char line[1024];
	int n = snprintf(line, sizeof(line) - 1, "%s %s", status, text);

	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* A client that does not read its answers is its own problem: the
	 * socket is blocking only for this short line. */
	if ((fd >= 0 ? send_with_fd(vm->control_client, line, (size_t)n, fd)
		     : write_all(vm->control_client, line, (size_t)n)) < 0)
		log_warn("control: could not answer the client");
}

static void reply(struct vm *vm, const char *status, const char *text)
{
	reply_fd(vm, status, text, -1);
}

static void cmd_checkpoint(struct vm *vm, char *args, bool live)
{
	char msg[900];
	char *dir = strtok(args, " "), *top = strtok(NULL, " ");
	int memfd = -1, err;

	if (!dir || strtok(NULL, " ")) {
		reply(vm, "error", live ? "usage: checkpoint-live DIR [NEWTOP]"
					: "usage: checkpoint DIR [NEWTOP]");
		return;
	}
	err = live ? vm_checkpoint_live(vm, dir, top, &memfd, msg, sizeof(msg))
		   : vm_checkpoint(vm, dir, top, msg, sizeof(msg));
	if (err) {
		reply(vm, "error", msg);
		return;
	}
	log_info("%s", msg);
	reply_fd(vm, "ok", msg, memfd);
	/* The fork can start now; its memory file is written meanwhile. */
	vm_checkpoint_live_finish(vm);
}

static void run_command(struct vm *vm, char *line)
{
	size_t n = strlen(line);

	if (n && line[n - 1] == '\r')
		line[--n] = '\0';
	if (!strcmp(line, "pause")) {
		if (vm->pause_depth > 0)
			reply(vm, "ok", "paused (already)");
		else if (vm_pause(vm) == 0)
			reply(vm, "ok", "paused");
		else {
			vm_resume(vm);
			reply(vm, "error", "the VM is stopping");
		}
	} else if (!strcmp(line, "resume")) {
		if (vm->pause_depth == 0) {
			reply(vm, "ok", "running (was not paused)");
		} else {
			vm_resume(vm);
			reply(vm, "ok", "running");
		}
	} else if (!strncmp(line, "checkpoint ", 11)) {
		cmd_checkpoint(vm, line + 11, false);
	} else if (!strncmp(line, "checkpoint-live ", 16)) {
		cmd_checkpoint(vm, line + 16, true);
	} else if (!strcmp(line, "status")) {
		reply(vm, "ok", vm->pause_depth ? "paused" : "running");
	} else if (!strcmp(line, "stop")) {
		reply(vm, "ok", "stopping");
		vm_request_stop(vm, VM_STOP_HOST);
	} else {
		reply(vm, "error", "unknown command (pause, resume, checkpoint DIR [NEWTOP], checkpoint-live DIR [NEWTOP], status, stop)");
	}
}

static void drop_client(struct vm *vm)
{
	close(vm->control_client);
	vm->control_client = -1;
	vm->control_len = 0;
}

static void read_client(struct vm *vm)
{
	ssize_t n;
	char *nl;

	n = read(vm->control_client, vm->control_buf + vm->control_len,
		 sizeof(vm->control_buf) - 1 - vm->control_len);
	if (n <= 0) {
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			return;
		drop_client(vm);
		return;
	}
	vm->control_len += (size_t)n;
	vm->control_buf[vm->control_len] = '\0';
	while ((nl = memchr(vm->control_buf, '\n', vm->control_len))) {
		size_t used = (size_t)(nl - vm->control_buf) + 1;
		*nl = '\0';
		run_command(vm, vm->control_buf);
		if (vm->control_client < 0)
			return;
		memmove(vm->control_buf, vm->control_buf + used, vm->control_len - used);
		vm->control_len -= used;
		vm->control_buf[vm->control_len] = '\0';
	}
	if (vm->control_len == sizeof(vm->control_buf) - 1) {
		reply(vm, "error", "line too long");
		drop_client(vm);
	}
}

void vm_control_serve(struct vm *vm, const struct pollfd *pfd, int n)
{
	if (n < 1 || !pfd[0].revents)
		return;
	if (pfd[0].fd == vm->control_client) {
		read_client(vm);
		return;
	}
	if (pfd[0].fd == vm->control_fd) {
		int c = accept4(vm->control_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c >= 0) {
			vm->control_client = c;
			vm->control_len = 0;
		}
	}
}

/* ---- client ---- */

static int call_connect(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A VMM that stopped answering must not hang the caller for ever. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* One byte of the answer; the first may carry a descriptor (*fd_out). */
static ssize_t read_byte(int fd, char *b, int *fd_out)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = b, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	ssize_t r;

	if (!fd_out)
		return read(fd, b, 1);
	r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); r > 0 && c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)) && *fd_out < 0)
			memcpy(fd_out, CMSG_DATA(c), sizeof(int));
	return r;
}

/* Reads the answer up to its newline (the VMM sends exactly one line). */
static int call_read_line(int fd, char *buf, size_t len, int *fd_out)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read_byte(fd, buf + n, n ? NULL : fd_out);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (r == 0)
			return n ? 0 : -EPIPE;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 0;
}

int vm_control_call_fd(const char *path, const char *cmd, char *answer, size_t len,
		      int timeout_ms, int *fd_out)
{
	int fd = call_connect(path, timeout_ms), err;

	if (fd_out)
		*fd_out = -1;
	if (fd < 0)
		return fd;
	err = write_all(fd, cmd, strlen(cmd));
	if (!err)
		err = write_all(fd, "\n", 1);
	if (!err)
		err = call_read_line(fd, answer, len, fd_out);
	close(fd);
	if (!err && !(strncmp(answer, "ok", 2) == 0 && (answer[2] == ' ' || !answer[2])))
		err = -EREMOTEIO;
	if (err && fd_out && *fd_out >= 0) {
		close(*fd_out);
		*fd_out = -1;
	}
	return err;
}

int vm_control_call(const char *path, const char *cmd, char *answer, size_t len, int timeout_ms)
{
	return vm_control_call_fd(path, cmd, answer, len, timeout_ms, NULL);
}
