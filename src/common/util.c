#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (end == s)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mult = KiB; end++; break;
	case 'm': case 'M': mult = MiB; end++; break;
	case 'g': case 'G': mult = GiB; end++; break;
	case 't': case 'T': mult = 1024 * GiB; end++; break;
	default: return -EINVAL;
	}
	/* Accept the "MiB"/"MB"-style spellings people type, nothing else. */
	if (mult != 1 && (*end == 'i' || *end == 'I'))
		end++;
	if (mult != 1 && (*end == 'b' || *end == 'B'))
		end++;
	if (*end != '\0')
		return -EINVAL;
	if (v > UINT64_MAX / mult)
		return -ERANGE;
	*out = (uint64_t)v * mult;
	return 0;
}

int eventfd_ring(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) == sizeof(one) || errno == EAGAIN)
		return 0;
	return -errno;
}

int userns_map_one(const char *proc, unsigned uid, unsigned gid)
{
	char path[64], line[32];
	int err;

	snprintf(path, sizeof(path), "%s/setgroups", proc);
	if ((err = write_text_file(path, "deny")))
		return err;
	snprintf(path, sizeof(path), "%s/uid_map", proc);
	snprintf(line, sizeof(line), "%u %u 1\n", uid, uid);
	if ((err = write_text_file(path, line)))
		return err;
	snprintf(path, sizeof(path), "%s/gid_map", proc);
	snprintf(line, sizeof(line), "%u %u 1\n", gid, gid);
	return write_text_file(path, line);
}

static const char *home_dir(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;

	if (h && *h)
		return h;
	pw = getpwuid(getuid());
	return pw ? pw->pw_dir : "/";
}

static int xdg_dir(char *buf, size_t len, const char *own_env,
		   const char *xdg_env, const char *fallback)
{
	const char *v = getenv(own_env);
	int n;

	if (v && *v)
		n = snprintf(buf, len, "%s", v);
	else if ((v = getenv(xdg_env)) && *v == '/')
		n = snprintf(buf, len, "%s/kosa8", v);
	else
		n = snprintf(buf, len, "%s/%s/kosa8", home_dir(), fallback);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

int kosa8_cache_dir(char *buf, size_t len)
{
	return xdg_dir(buf, len, "KOSA8_CACHE_DIR", "XDG_CACHE_HOME", ".cache");
}

int kosa8_config_dir(char *buf, size_t len)
{
	return xdg_dir(buf, len, "KOSA8_CONFIG_DIR", "XDG_CONFIG_HOME", ".config");
}

int kosa8_state_dir(char *buf, size_t len)
{
	return xdg_dir(buf, len, "KOSA8_STATE_DIR", "XDG_STATE_HOME", ".local/state");
}

int process_hold_secrets(void)
{
	return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ? -errno : 0;
}

int private_dir(const char *path, bool create, char *why, size_t len)
{
	struct stat st;

	if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
		return snprintf(why, len, "cannot create %s: %s", path, strerror(errno)), -errno;
	if (lstat(path, &st) < 0)
		return snprintf(why, len, "%s: %s", path, strerror(errno)), -errno;
	if (S_ISLNK(st.st_mode))
		return snprintf(why, len, "%s is a symbolic link: kosa8 uses only a real directory there", path), -ELOOP;
	if (!S_ISDIR(st.st_mode))
		return snprintf(why, len, "%s is not a directory", path), -ENOTDIR;
	if (st.st_uid != geteuid())
		return snprintf(why, len, "%s belongs to uid %u, not to you (uid %u): another user may have made it; remove it",
				path, (unsigned)st.st_uid, (unsigned)geteuid()), -EPERM;
	if (st.st_mode & 077)
		return snprintf(why, len, "%s is open to other users (mode %03o): chmod 700 it", path,
				(unsigned)(st.st_mode & 0777)), -EPERM;
	return 0;
}

int rename_noreplace(const char *from, const char *to)
{
	struct stat st;

	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (fstatat(AT_FDCWD, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (errno != ENOENT)
		return -errno;
	/* The system call itself: glibc makes renameat2 with no flags a
	 * renameat, which the VMM's seccomp filter does not allow. */
	return syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 0) < 0 ? -errno : 0;
}

int kosa8_data_path(const char *rel, char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n < 0)
		return -errno;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	if (snprintf(buf, len, "%.*s/../%s", PATH_MAX / 2, exe, rel) < (int)len &&
	    access(buf, F_OK) == 0)
		return 0;
	if (snprintf(buf, len, "%.*s/../lib/kosa8/%s", PATH_MAX / 2, exe, rel) < (int)len &&
	    access(buf, F_OK) == 0)
		return 0;
	return -ENOENT;
}

int kosa8_helper_path(const char *exe, const char *file, char *buf, size_t len)
{
	const char *slash = strrchr(exe, '/');
	int dir = slash ? (int)(slash - exe) : 1;
	const char *at = slash ? exe : ".";

	if (snprintf(buf, len, "%.*s/%s", dir, at, file) < (int)len && access(buf, X_OK) == 0)
		return 0;
	if (snprintf(buf, len, "%.*s/../lib/kosa8/%s", dir, at, file) < (int)len && access(buf, X_OK) == 0)
		return 0;
	return -ENOENT;
}

int kosa8_vmm_path(const char *exe, char *buf, size_t len)
{
	return kosa8_helper_path(exe, KOSA8_VMM_FILE, buf, len);
}

int kosa8_guest_kernel(char *buf, size_t len)
{
	char script[PATH_MAX], found[PATH_MAX];
	const char *argv[5] = {script, "--arch", KOSA8_ARCH, "--path", NULL};

	if (kosa8_data_path(KOSA8_KERNEL_FILE, script, sizeof(script)) == 0 && realpath(script, found))
		return snprintf(buf, len, "%s", found) < (int)len ? 0 : -ENAMETOOLONG;
	if (kosa8_data_path("guest/kernel/build.sh", script, sizeof(script)))
		return -ENOENT;
	return run_for_last_line(argv, buf, len) < 0 ? -ENOENT : 0;
}

void kosa8_use_installed_agent(void)
{
	char agent[PATH_MAX];
	const char *env = getenv("KOSA8_AGENT");

	if ((!env || !*env) && kosa8_data_path("kosa8-agent", agent, sizeof(agent)) == 0)
		setenv("KOSA8_AGENT", agent, 1);
}

/* argv running with its stdout into *rfd, its stderr silenced unless
 * shown: its pid. */
static pid_t spawn_for_stdout(const char *const argv[], bool show_err, int *rfd)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (pid == 0) {
		/* Only the answer matters; the script's own messages would
		 * duplicate the one line the caller prints. */
		int null = show_err ? -1 : open("/dev/null", O_WRONLY);
		dup2(p[1], 1);
		if (null >= 0)
			dup2(null, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	*rfd = p[0];
	return pid;
}

static int reap_ok(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;
	return 0;
}

static int last_line_of(const char *const argv[], bool show_err, char *buf, size_t len)
{
	char line[PATH_MAX];
	size_t got = 0;
	ssize_t n;
	int fd;
	pid_t pid = spawn_for_stdout(argv, show_err, &fd);

	if (pid < 0)
		return (int)pid;
	buf[0] = '\0';
	while ((n = read(fd, line + got, sizeof(line) - 1 - got)) > 0) {
		got += (size_t)n;
		line[got] = '\0';
		/* Keep only what follows the last complete newline. */
		char *nl;
		while ((nl = strchr(line, '\n')) && nl[1] != '\0') {
			memmove(line, nl + 1, strlen(nl + 1) + 1);
			got = strlen(line);
		}
		if (got == sizeof(line) - 1)
			got = 0;
	}
	close(fd);
	if (reap_ok(pid))
		return -EIO;
	line[got] = '\0';
	char *nl = strchr(line, '\n');
	if (nl)
		*nl = '\0';
	if (!line[0] || strlen(line) >= len)
		return -EIO;
	memcpy(buf, line, strlen(line) + 1);
	return 0;
}

int run_for_last_line(const char *const argv[], char *buf, size_t len)
{
	return last_line_of(argv, false, buf, len);
}

int run_for_last_line_shown(const char *const argv[], char *buf, size_t len)
{
	return last_line_of(argv, true, buf, len);
}

int run_for_output(const char *const argv[], char *buf, size_t len)
{
	size_t got = 0;
	ssize_t n = 1;
	int fd, rc = 0;
	pid_t pid = spawn_for_stdout(argv, false, &fd);

	if (pid < 0)
		return (int)pid;
	while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) != 0) {
		if (n < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		got += n > 0 ? (size_t)n : 0;
	}
	buf[got] = '\0';
	/* Full: more than fits is an answer cut short. */
	if (!rc && got + 1 == len && (n = read(fd, &(char){0}, 1)) > 0)
		rc = -E2BIG;
	close(fd);
	if (reap_ok(pid) && !rc)
		rc = -EIO;
	return rc;
}

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t mono_ms(void)
{
	return mono_ns() / 1000000u;
}

int wait_child_ms(pid_t pid, int *status, int timeout_ms)
{
	uint64_t end = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), rc;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		uint64_t now = mono_ms();

		if (r == pid) {
			rc = 0;
			break;
		}
		if (r < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (now >= end) {
			rc = -ETIMEDOUT;
			break;
		}
		/* Before Linux 5.3 there is no pidfd: short naps instead. */
		if (fd >= 0) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			poll(&p, 1, (int)(end - now));
		} else {
			usleep((useconds_t)(end - now < 20 ? end - now : 20) * 1000);
		}
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

int wait_created_ms(const char *path, pid_t pid, int timeout_ms)
{
	struct pollfd p[2] = {{.fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK), .events = POLLIN},
			      {.fd = (int)syscall(SYS_pidfd_open, pid, 0), .events = POLLIN}};
	uint64_t end = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	char dir[PATH_MAX];
	int rc = -ETIMEDOUT;

	snprintf(dir, sizeof(dir), "%s", path);
	/* Watched before the look: a file made in between still wakes us. */
	if (p[0].fd < 0 || inotify_add_watch(p[0].fd, dirname(dir), IN_CREATE | IN_MOVED_TO) < 0) {
		usleep((useconds_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000);
		rc = access(path, F_OK) == 0 ? 0 : -ETIMEDOUT;
		goto out;
	}
	for (;;) {
		uint64_t now = mono_ms();
		char ev[4096];

		if (access(path, F_OK) == 0) {
			rc = 0;
			break;
		}
		if (now >= end || poll(p, p[1].fd >= 0 ? 2 : 1, (int)(end - now)) < 0 ||
		    (p[1].revents & POLLIN))
			break;
		while (read(p[0].fd, ev, sizeof(ev)) > 0)
			;
	}
out:
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	return rc;
}

int sync_dir_of(const char *path)
{
	char c[PATH_MAX];
	int fd, rc = 0;

	if (snprintf(c, sizeof(c), "%s", path) >= (int)sizeof(c))
		return -ENAMETOOLONG;
	fd = open(dirname(c), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}
