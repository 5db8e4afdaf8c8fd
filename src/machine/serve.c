/* The machine's side (machine.h): `kosa8 machine __serve` polls the
 * requests directory and runs each request's command as the host user,
 * copying the request's "in" to its stdin and its stdout and stderr to
 * "out" and "err", then writes "status". */
#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "common/util.h"
#include "machine/machine.h"

#define FAILED 125
/* A host that has not touched "alive" for this long has gone (killed
 * without a word): its command gets SIGHUP, as a closed terminal would. */
#define HOST_GONE_MS 15000
/* After the command exits, how long processes it left behind may hold
 * its output open. */
#define DRAIN_MS 2000

struct job {
	char dir[PATH_MAX];
	int out_fd, err_fd, in_fd;
	int rd_out, rd_err; /* the command's stdout and stderr (one pty master if tty) */
	int wr_in;          /* its stdin, or the same master */
	bool tty;
	char inbuf[65536];
	size_t inlen, inoff;
	uint64_t in_taken, in_told; /* bytes of "in" the command took; said in in.pos */
};

static int jpath(const struct job *j, const char *name, char *buf, size_t len)
{
	return snprintf(buf, len, "%s/%s", j->dir, name) >= (int)len ? -ENAMETOOLONG : 0;
}

static int jopen(const struct job *j, const char *name, int flags)
{
	char path[PATH_MAX];

	if (jpath(j, name, path, sizeof(path)))
		return -ENAMETOOLONG;
	return open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* A small file of the request's ("winsize", "signal"), NUL-terminated. */
static int jread(const struct job *j, const char *name, char *buf, size_t len)
{
	int fd = jopen(j, name, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n > 0 ? 0 : -1;
}

/* Replaces the request's file name with text at once (rename): the host
 * never reads half of it. */
static void put_small(const struct job *j, const char *name, const char *text, bool sync)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	int fd;

	if (jpath(j, name, path, sizeof(path)) || snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	write_all(fd, text, strlen(text));
	if (sync)
		fsync(fd);
	close(fd);
	rename(tmp, path);
}

static void put_status(const struct job *j, int st)
{
	char num[16];

	snprintf(num, sizeof(num), "%d\n", st);
	put_small(j, "status", num, true);
}

/* Tells the host how much of "in" the command took, so that it reads
 * more of its stdin (it stops MACHINE_IN_MAX bytes ahead). */
static void tell_taken(struct job *j, bool now)
{
	char num[24];

	/* Every 256 KiB, or when the host has nothing more in "in" yet. */
	if (j->in_taken == j->in_told || (!now && j->in_taken - j->in_told < MACHINE_IN_MAX / 4))
		return;
	snprintf(num, sizeof(num), "%llu\n", (unsigned long long)j->in_taken);
	put_small(j, "in.pos", num, false);
	j->in_told = j->in_taken;
}

/* The request's environment with this machine's run directory (sockets
 * cannot live on the 9p share) and the mark that stops kosa8 from
 * forwarding again.  xdg is the malloc'd entry to free. */
static char **job_env(const struct machine_req *r, const char *rundir, char **xdg)
{
	char **env = calloc((size_t)r->envc + 3, sizeof(char *));
	int n = 0;

	if (!env || asprintf(xdg, "XDG_RUNTIME_DIR=%s", rundir) < 0) {
		free(env);
		return NULL;
	}
	for (int i = 0; i < r->envc; i++)
		if (strncmp(r->env[i], "XDG_RUNTIME_DIR=", 16) && strncmp(r->env[i], "KOSA8_IN_MACHINE=", 17))
			env[n++] = r->env[i];
	env[n++] = *xdg;
	env[n++] = "KOSA8_IN_MACHINE=1";
	return env;
}

/* Removes what a copy directory holds (files, links, one level of
 * folders). */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* Links every entry of the binary's grandparent (a checkout, or /usr)
 * into dir, so that the copy finds kosa8's scripts where it would
 * (kosa8_data_path: <exe>/../REL, <exe>/../lib/kosa8/REL). */
static int link_data(const char *exe, const char *dir)
{
	char top[PATH_MAX], from[PATH_MAX * 2], to[PATH_MAX * 2];
	struct dirent *e;
	DIR *d;
	int err = 0;

	snprintf(top, sizeof(top), "%s", exe);
	for (int i = 0; i < 2; i++)
		*strrchr(top, '/') = 0;
	if (!(d = opendir(top[0] ? top : "/")))
		return -errno;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "x"))
			continue;
		snprintf(from, sizeof(from), "%s/%s", top, e->d_name);
		snprintf(to, sizeof(to), "%s/%s", dir, e->d_name);
		if (symlink(from, to) < 0 && errno != EEXIST)
			err = -errno;
	}
	closedir(d);
	return err;
}

/* Removes the copies of older binaries (running processes keep theirs). */
static void remove_old_copies(const char *rundir, const char *keep)
{
	char path[PATH_MAX * 2];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%s/exe", rundir);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strcmp(e->d_name, keep)) {
			snprintf(path, sizeof(path), "%s/exe/%s", rundir, e->d_name);
			nftw(path, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
		}
	closedir(d);
}

/* Copies from to a new executable file, to. */
static int copy_exe(const char *from, const char *to)
{
	uint8_t *data = NULL;
	size_t n;
	int fd, err;

	if ((err = read_file(from, 1024 * MiB, &data, &n)))
		return err;
	fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
	err = fd < 0 ? -errno : write_all(fd, data, n);
	if (fd >= 0)
		close(fd);
	free(data);
	return err;
}

/* The kosa8 binary a request names, as a copy on this machine's own
 * tmpfs (out), with the VMM it runs (kosa8_vmm_path) and kosa8-tools
 * (src/cli/tools.c) next to it.
 * Executing the host's file itself over 9p is not safe once it was
 * replaced: v9fs without a cache never looks a name up again while a
 * running process (a sandbox's supervisor) holds its inode, so a rebuilt
 * binary would be mapped from the old file's cached pages mixed with the
 * new one's.  A copy per size and time of both is a new inode each time. */
static int exe_copy(const char *exe, const char *rundir, char *out, size_t len)
{
	char dir[PATH_MAX], tmp[PATH_MAX], x[PATH_MAX * 2], vmm[PATH_MAX], tools[PATH_MAX];
	const char *base = strrchr(exe, '/') + 1;
	struct stat st, vst = {0}, tst = {0};
	bool has_vmm, has_tools;
	int err;

	if (stat(exe, &st) < 0)
		return -errno;
	has_vmm = kosa8_vmm_path(exe, vmm, sizeof(vmm)) == 0 && stat(vmm, &vst) == 0;
	has_tools = kosa8_helper_path(exe, KOSA8_TOOLS_FILE, tools, sizeof(tools)) == 0 && stat(tools, &tst) == 0;
	if (snprintf(dir, sizeof(dir), "%s/exe/%llx-%llx-%lx-%llx-%llx-%lx-%llx-%llx-%lx", rundir,
		     (unsigned long long)st.st_size, (unsigned long long)st.st_mtim.tv_sec,
		     (long)st.st_mtim.tv_nsec, (unsigned long long)vst.st_size,
		     (unsigned long long)vst.st_mtim.tv_sec, (long)vst.st_mtim.tv_nsec,
		     (unsigned long long)tst.st_size, (unsigned long long)tst.st_mtim.tv_sec,
		     (long)tst.st_mtim.tv_nsec) >= (int)sizeof(dir) ||
	    snprintf(out, len, "%s/x/%s", dir, base) >= (int)len ||
	    snprintf(tmp, sizeof(tmp), "%s/exe/.new-%d", rundir, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if (access(out, X_OK) == 0)
		return 0;
	snprintf(x, sizeof(x), "%s/x", tmp);
	if ((err = mkdir_p(x, 0700)) == 0) {
		snprintf(x, sizeof(x), "%s/x/%s", tmp, base);
		err = copy_exe(exe, x);
	}
	if (!err && has_vmm) {
		snprintf(x, sizeof(x), "%s/x/" KOSA8_VMM_FILE, tmp);
		err = copy_exe(vmm, x);
	}
	if (!err && has_tools && strcmp(base, KOSA8_TOOLS_FILE)) {
		snprintf(x, sizeof(x), "%s/x/" KOSA8_TOOLS_FILE, tmp);
		err = copy_exe(tools, x);
	}
	if (!err)
		err = link_data(exe, tmp);
	if (!err && rename(tmp, dir) < 0 && errno != EEXIST && errno != ENOTEMPTY)
		err = -errno;
	nftw(tmp, remove_entry, 8, FTW_DEPTH | FTW_PHYS); /* left when another job won */
	if (!err)
		remove_old_copies(rundir, strrchr(dir, '/') + 1);
	return err;
}

/* In the child: the command's session, terminal or pipes, directory. */
static void exec_command(const struct machine_req *r, const char *exe, char **env, int in, int out, int err,
			 int pts)
{
	setsid();
	if (pts >= 0) {
		ioctl(pts, TIOCSCTTY, 0);
		in = out = err = pts;
	}
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(FAILED);
	signal(SIGPIPE, SIG_DFL);
	if (chdir(r->cwd) < 0) {
		fprintf(stderr, "kosa8: cannot enter %s in the helper machine: %s\n", r->cwd, strerror(errno));
		_exit(FAILED);
	}
	execve(exe, r->argv, env);
	fprintf(stderr, "kosa8: cannot run %s in the helper machine: %s\n", r->exe, strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

static void close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* A pty of the request's size: its master in j, its other side in *pts. */
static int open_pty(struct job *j, const struct machine_req *r, int *pts)
{
	struct winsize ws = {.ws_row = (unsigned short)r->rows, .ws_col = (unsigned short)r->cols};
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (m < 0 || grantpt(m) || unlockpt(m) || (*pts = open(ptsname(m), O_RDWR | O_NOCTTY)) < 0) {
		if (m >= 0)
			close(m);
		return -1;
	}
	ioctl(m, TIOCSWINSZ, &ws);
	j->rd_out = j->wr_in = m;
	return 0;
}

/* Starts the command with a terminal or pipes: its pid, or -1. */
static pid_t start(struct job *j, const struct machine_req *r, const char *rundir)
{
	int fds[7] = {-1, -1, -1, -1, -1, -1, -1}; /* in, out, err pipes; pts */
	char *xdg = NULL, **env = job_env(r, rundir, &xdg), exe[PATH_MAX];
	pid_t pid = -1;
	int err;

	if (!env)
		return -1;
	if ((err = exe_copy(r->exe, rundir, exe, sizeof(exe)))) {
		dprintf(j->err_fd, "kosa8: the helper machine cannot copy %s: %s\n", r->exe, strerror(-err));
		goto out;
	}
	if (r->tty ? open_pty(j, r, &fds[6]) < 0
		   : pipe2(fds, O_CLOEXEC) || pipe2(fds + 2, O_CLOEXEC) || pipe2(fds + 4, O_CLOEXEC))
		goto out;
	if (!r->tty) {
		j->wr_in = fds[1];
		j->rd_out = fds[2];
		j->rd_err = fds[4];
		fds[1] = fds[2] = fds[4] = -1; /* kept */
	}
	pid = fork();
	if (pid == 0)
		exec_command(r, exe, env, fds[0], fds[3], fds[5], fds[6]);
	fcntl(j->wr_in, F_SETFL, O_NONBLOCK);
	fcntl(j->rd_out, F_SETFL, O_NONBLOCK);
	if (j->rd_err >= 0)
		fcntl(j->rd_err, F_SETFL, O_NONBLOCK);
out:
	close_fds(fds, ARRAY_SIZE(fds));
	free(xdg);
	free(env);
	return pid;
}

/* Copies what the command wrote on fd (non-blocking) into the request's
 * file, until it has no more for now; at its end, closes fd. */
static void drain(int *fd, int to)
{
	char buf[65536];
	ssize_t n;

	while (*fd >= 0) {
		n = read(*fd, buf, sizeof(buf));
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) { /* EIO: a pty whose other side is closed */
			close(*fd);
			*fd = -1;
			return;
		}
		write_all(to, buf, (size_t)n);
	}
}

/* Passes "in" to the command's stdin, as far as it takes it now. */
static void feed(struct job *j)
{
	char path[PATH_MAX];
	ssize_t n;

	if (j->wr_in < 0 || j->in_fd < 0)
		return;
	if (j->inoff == j->inlen) {
		/* The mark first: "in" is whole once it is there. */
		bool eof = !jpath(j, "in.eof", path, sizeof(path)) && access(path, F_OK) == 0;
		n = read(j->in_fd, j->inbuf, sizeof(j->inbuf));
		if (n > 0) {
			j->inlen = (size_t)n;
			j->inoff = 0;
		} else if (eof && !j->tty) {
			close(j->wr_in);
			j->wr_in = -1;
			return;
		} else {
			tell_taken(j, true);
			return;
		}
	}
	n = write(j->wr_in, j->inbuf + j->inoff, j->inlen - j->inoff);
	if (n > 0)
		j->inoff += (size_t)n;
	else if (n < 0 && errno != EAGAIN && errno != EINTR)
		j->inoff = j->inlen; /* the command closed its stdin: the rest is lost, as with a pipe */
	if (j->inoff == j->inlen) {
		j->in_taken += j->inlen;
		j->inlen = j->inoff = 0;
		tell_taken(j, false);
	}
}

/* A new terminal size or a signal from the host. */
static void host_events(struct job *j, pid_t pid, unsigned *rows, unsigned *cols)
{
	char buf[32], path[PATH_MAX];
	unsigned r, c;

	if (j->tty && !jread(j, "winsize", buf, sizeof(buf)) && sscanf(buf, "%u %u", &r, &c) == 2 &&
	    (r != *rows || c != *cols) && r && c && r <= 10000 && c <= 10000) {
		struct winsize ws = {.ws_row = (unsigned short)r, .ws_col = (unsigned short)c};
		*rows = r;
		*cols = c;
		ioctl(j->rd_out, TIOCSWINSZ, &ws);
	}
	if (!jread(j, "signal", buf, sizeof(buf)) && !jpath(j, "signal", path, sizeof(path))) {
		int sig = atoi(buf);
		unlink(path);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT)
			kill(-pid, sig);
	}
}

/* Whether the host still touches "alive" (checked once a second). */
static bool host_alive(const struct job *j, struct timespec *seen, uint64_t *since)
{
	char path[PATH_MAX];
	struct stat st;
	uint64_t now = mono_ms();

	/* Its directory removed: the host's next command found it gone. */
	if (stat(j->dir, &st) < 0 && errno == ENOENT)
		return false;
	if (jpath(j, "alive", path, sizeof(path)) || stat(path, &st) < 0)
		return now - *since < HOST_GONE_MS;
	if (st.st_mtim.tv_sec != seen->tv_sec || st.st_mtim.tv_nsec != seen->tv_nsec) {
		*seen = st.st_mtim;
		*since = now;
	}
	return now - *since < HOST_GONE_MS;
}

static int run_job(struct job *j, const char *rundir)
{
	struct machine_req r;
	uint8_t *data = NULL;
	size_t len;
	char path[PATH_MAX], why[160];
	pid_t pid;
	int st = FAILED, wst, err;
	unsigned rows, cols;
	uint64_t exited = 0, last_events = 0, since = mono_ms();
	struct timespec seen = {0};
	bool hup = false;

	if ((err = jpath(j, "request", path, sizeof(path))) || (err = read_file(path, MACHINE_REQ_MAX, &data, &len))) {
		dprintf(j->err_fd, "kosa8: the helper machine cannot read the request: %s\n", strerror(-err));
		return FAILED;
	}
	if ((err = machine_req_parse((char *)data, len, &r, why, sizeof(why)))) {
		dprintf(j->err_fd, "kosa8: bad request to the helper machine: %s\n", why);
		free(data);
		return FAILED;
	}
	j->tty = r.tty;
	rows = r.rows;
	cols = r.cols;
	j->in_fd = jopen(j, "in", O_RDONLY);
	put_small(j, "in.pos", "0\n", false); /* this server bounds "in" (machine.h) */
	pid = start(j, &r, rundir);
	if (pid < 0) {
		dprintf(j->err_fd, "kosa8: the helper machine cannot start the command: %s\n", strerror(errno));
		goto out;
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = j->rd_out, .events = POLLIN}, {.fd = j->rd_err, .events = POLLIN}};
		uint64_t now = mono_ms();

		poll(p, 2, 20);
		drain(&j->rd_out, j->out_fd);
		drain(&j->rd_err, j->err_fd);
		if (j->tty && j->rd_out < 0)
			j->wr_in = -1; /* the same master, closed */
		feed(j);
		if (!exited && waitpid(pid, &wst, WNOHANG) == pid) {
			st = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
			exited = now;
		}
		if (exited && ((j->rd_out < 0 && j->rd_err < 0) || now - exited > DRAIN_MS))
			break;
		if (!exited && now - last_events >= 200) {
			last_events = now;
			host_events(j, pid, &rows, &cols);
			if (!hup && !host_alive(j, &seen, &since)) {
				hup = true;
				kill(-pid, SIGHUP);
			}
		}
	}
out:
	machine_req_free(&r);
	free(data);
	return st;
}

static void job_main(const char *dir, const char *rundir)
{
	struct job j = {.in_fd = -1, .rd_out = -1, .rd_err = -1, .wr_in = -1};
	int st;

	snprintf(j.dir, sizeof(j.dir), "%s", dir);
	j.out_fd = jopen(&j, "out", O_WRONLY | O_CREAT | O_APPEND);
	j.err_fd = jopen(&j, "err", O_WRONLY | O_CREAT | O_APPEND);
	st = j.out_fd < 0 || j.err_fd < 0 ? FAILED : run_job(&j, rundir);
	if (j.out_fd >= 0)
		fsync(j.out_fd);
	if (j.err_fd >= 0)
		fsync(j.err_fd);
	put_status(&j, st);
	_exit(0);
}

/* Starts a job for each request not yet taken: true if there was one. */
static bool take_requests(const char *reqs, const char *rundir)
{
	char path[PATH_MAX];
	bool took = false;
	struct dirent *e;
	DIR *d = opendir(reqs);
	int fd;

	if (!d)
		return false;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "r-", 2) ||
		    snprintf(path, sizeof(path), "%s/%s/started", reqs, e->d_name) >= (int)sizeof(path))
			continue;
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			continue;
		close(fd);
		took = true;
		*strrchr(path, '/') = 0;
		if (fork() == 0) {
			closedir(d);
			job_main(path, rundir);
		}
	}
	closedir(d);
	return took;
}

static int drop_to(unsigned uid, unsigned gid, const char *rundir)
{
	if (mkdir(rundir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (uid == 0)
		return 0;
	if (chown(rundir, uid, gid) < 0 || setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
		return -errno;
	return 0;
}

int machine_serve(const char *dir, unsigned uid, unsigned gid, const char *rundir)
{
	char reqs[PATH_MAX], ready[PATH_MAX], stop[PATH_MAX];
	int err, idle = 0, fd;

	if (snprintf(reqs, sizeof(reqs), "%s/requests", dir) >= (int)sizeof(reqs) ||
	    snprintf(ready, sizeof(ready), "%s/ready", dir) >= (int)sizeof(ready) ||
	    snprintf(stop, sizeof(stop), "%s/stop", dir) >= (int)sizeof(stop))
		return -ENAMETOOLONG;
	if ((err = drop_to(uid, gid, rundir)))
		return err;
	signal(SIGPIPE, SIG_IGN);
	mkdir(reqs, 0700);
	fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	dprintf(fd, "%d\n", (int)getpid());
	close(fd);
	while (access(stop, F_OK) != 0) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		idle = take_requests(reqs, rundir) ? 0 : idle + 1;
		/* Quick after a request (commands come in bursts), 10 Hz idle. */
		usleep(idle < 50 ? 20000 : 100000);
	}
	unlink(ready);
	return 0;
}
