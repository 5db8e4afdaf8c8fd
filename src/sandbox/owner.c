#include "sandbox/owner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"

/* How long a taker steps around probes (each holds the lock shared for
 * microseconds) before it gives up: far above any probe, far below a user's
 * patience. */
#define TAKE_RETRY_MS 1000

static int lock_path(const char *dir, const char *file, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s", dir, file);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The file's "PID ROLE": written by the owner, read for messages only, so
 * whatever it holds is bounded and checked. */
static void read_owner(int fd, struct sandbox_owner *who)
{
	char buf[48], *end;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long pid;
	size_t i = 0;

	memset(who, 0, sizeof(*who));
	if (n <= 0)
		return;
	buf[n] = 0;
	pid = strtol(buf, &end, 10);
	if (end == buf || pid <= 0 || pid > INT_MAX)
		return;
	who->pid = (pid_t)pid;
	if (*end++ != ' ')
		return;
	for (; i + 1 < sizeof(who->role) && end[i] >= 'a' && end[i] <= 'z'; i++)
		who->role[i] = end[i];
	who->role[i] = 0;
}

static void write_owner(const char *path, const char *role)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return;
	/* Only for messages: a failure here loses no ownership. */
	if (ftruncate(fd, 0) == 0)
		dprintf(fd, "%d %s\n", (int)getpid(), role);
	close(fd);
}

/* The lock file, opened so that whoever could write the folder cannot make
 * us hang or misread: never through a link, never blocking on a FIFO, and
 * only a regular file (a directory or FIFO there is -EINVAL, not "free"). */
static int open_lock(const char *path, int flags)
{
	struct stat st;
	int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);

	if (fd < 0)
		return errno == EISDIR ? -EINVAL : -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* One attempt: the descriptor, -EBUSY when owned, -EAGAIN when only
 * probes were in the way or the file was removed under us. */
static int try_take(const char *path, struct sandbox_owner *who)
{
	struct stat a, b;
	int fd = open_lock(path, O_RDONLY | O_CREAT), e;

	if (fd < 0)
		return fd;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		/* `rm` unlinks the file it held: a lock on that one owns nothing. */
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			return fd;
		close(fd);
		return -EAGAIN;
	}
	e = errno;
	if (e != EWOULDBLOCK) {
		close(fd);
		return -e;
	}
	/* Shared holders are probes, an exclusive one is an owner. */
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		close(fd);
		return -EAGAIN;
	}
	read_owner(fd, who);
	close(fd);
	return -EBUSY;
}

/* Between two tries for a held lock: until the owner the file names ends
 * (its pidfd, the end of `rm -f`'s wait for a stopping supervisor, without
 * a poll's delay), at most BUSY_RETRY_MS.  The name is a hint only: the
 * file may name a process long gone, or another one (*waited: one seen
 * ending already), and the caller tries the lock again either way. */
#define BUSY_RETRY_MS 50

static void wait_owner(pid_t pid, pid_t *waited)
{
	int fd = pid > 0 && pid != *waited ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (fd < 0) {
		usleep(BUSY_RETRY_MS * 1000);
		return;
	}
	/* Ended: its VMM may hold the lock a little longer; not again. */
	if (poll(&p, 1, BUSY_RETRY_MS) > 0)
		*waited = pid;
	close(fd);
}

static int take_until(const char *state_dir, const char *role, uint64_t busy_deadline,
		      struct sandbox_owner *who)
{
	uint64_t probe_deadline = mono_ms() + TAKE_RETRY_MS;
	char path[PATH_MAX];
	pid_t waited = 0;
	int rc;

	if ((rc = lock_path(state_dir, SANDBOX_OWNER_FILE, path, sizeof(path))))
		return rc;
	for (;;) {
		rc = try_take(path, who);
		if (rc >= 0) {
			write_owner(path, role);
			return rc;
		}
		if (rc == -EAGAIN && mono_ms() < probe_deadline) {
			usleep(2000);
			continue;
		}
		if (rc == -EBUSY && mono_ms() < busy_deadline) {
			wait_owner(who->pid, &waited);
			continue;
		}
		return rc == -EAGAIN ? -EBUSY : rc;
	}
}

int sandbox_owner_take(const char *state_dir, const char *role, struct sandbox_owner *who)
{
	return take_until(state_dir, role, 0, who);
}

int sandbox_owner_wait(const char *state_dir, const char *role, int timeout_ms,
		       struct sandbox_owner *who)
{
	int rc = take_until(state_dir, role, mono_ms() + (uint64_t)timeout_ms, who);

	return rc == -EBUSY ? -ETIMEDOUT : rc;
}

int sandbox_owner_probe(const char *state_dir, struct sandbox_owner *who)
{
	char path[PATH_MAX];
	int fd, rc;

	memset(who, 0, sizeof(*who));
	if ((rc = lock_path(state_dir, SANDBOX_OWNER_FILE, path, sizeof(path))))
		return rc;
	fd = open_lock(path, O_RDONLY);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		close(fd);
		return 0;
	}
	rc = errno == EWOULDBLOCK ? 1 : -errno;
	if (rc == 1)
		read_owner(fd, who);
	close(fd);
	return rc;
}

void sandbox_owner_describe(const char *name, const struct sandbox_owner *who, char *buf,
			    size_t len)
{
	const char *role = who->role[0] ? who->role : "owner";

	if (!strcmp(role, "rm"))
		snprintf(buf, len, "sandbox '%s' is being removed (pid %d)", name, (int)who->pid);
	else if (who->pid)
		snprintf(buf, len, "sandbox '%s' is running (%s pid %d)", name, role, (int)who->pid);
	else
		snprintf(buf, len, "sandbox '%s' is running", name);
}

int sandbox_create_lock(void)
{
	uint64_t deadline = mono_ms() + SANDBOX_CREATE_WAIT_MS;
	char base[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
	int fd, rc;

	if ((rc = kosa8_state_dir(base, sizeof(base))) ||
	    (rc = lock_path(base, "sandboxes", dir, sizeof(dir))) ||
	    (rc = lock_path(dir, SANDBOX_CREATE_LOCK, path, sizeof(path))) || (rc = mkdir_p(dir, 0700)))
		return rc;
	fd = open_lock(path, O_RDONLY | O_CREAT);
	if (fd < 0)
		return fd;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? (mono_ms() < deadline ? 0 : -ETIMEDOUT) : -errno;
		if (rc) {
			close(fd);
			return rc;
		}
		usleep(5000);
	}
	return fd;
}
