/* The host's side of a forwarded command (machine.h): writes the request,
 * then copies stdin in and stdout/stderr out through the request's files
 * until the machine writes the exit status. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "machine/machine.h"

#define FAILED 125
/* The server polls every 100 ms when idle; a booted machine that has not
 * taken a request in this long is not serving. */
#define TAKE_TIMEOUT_MS 60000

extern char **environ;

static volatile sig_atomic_t pending_sig, winch;

static void on_signal(int sig)
{
	if (sig == SIGWINCH)
		winch = 1;
	else
		pending_sig = sig;
}

struct fwd {
	char dir[PATH_MAX]; /* the request's directory */
	int in_fd, out_fd, err_fd;
	int lock_fd;        /* "client", locked for this process's life */
	uint64_t out_read, err_read; /* punched up to here in out, err */
	uint64_t in_written, in_punched; /* bytes appended to "in"; punched out of it */
	uint64_t started_ms;
	bool stdin_done, tty, started, in_unbounded;
	struct termios saved;
	bool raw;
};

static int path_in(const struct fwd *f, const char *name, char *buf, size_t len)
{
	return snprintf(buf, len, "%s/%s", f->dir, name) >= (int)len ? -ENAMETOOLONG : 0;
}

/* Writes text into the request's file name at once (rename), so the
 * machine never reads half of it. */
static int put_file(const struct fwd *f, const char *name, const char *text)
{
	char path[PATH_MAX];

	if (path_in(f, name, path, sizeof(path)))
		return -ENAMETOOLONG;
	return write_file_replace(path, text, 0600);
}

static bool exists(const struct fwd *f, const char *name)
{
	char path[PATH_MAX];

	return !path_in(f, name, path, sizeof(path)) && access(path, F_OK) == 0;
}

static void term_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

/* Removes the request directory name in reqs (flat: only files).  Out of
 * the server's sight first (it takes r-*): a directory it took while its
 * files went would get a new "started" and stay. */
static void remove_dir_flat(int reqs, const char *name)
{
	const char *dash = strchr(name, '-');
	char gone[NAME_MAX + 1];
	struct dirent *e;
	DIR *d;
	int fd;

	if (!dash || snprintf(gone, sizeof(gone), ".old%s", dash) >= (int)sizeof(gone) ||
	    (strcmp(name, gone) && renameat(reqs, name, reqs, gone) < 0))
		return;
	fd = openat(reqs, gone, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && (d = fdopendir(fd))) {
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	} else if (fd >= 0) {
		close(fd);
	}
	unlinkat(reqs, gone, AT_REMOVEDIR);
}

/* Whether the request directory name in reqs still has its client: one
 * holds the lock on its "client" file for its whole life, and the kernel
 * drops it when the client dies, however it dies.  A directory without
 * that file is one being made, unless it is older than a minute. */
static bool has_client(int reqs, const char *name)
{
	char path[NAME_MAX + 16];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/client", name);
	fd = openat(reqs, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fstatat(reqs, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		       time(NULL) - st.st_mtime < MACHINE_REQ_ORPHAN_S;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return true;
	}
	close(fd);
	return false;
}

int machine_sweep_requests(const char *dir)
{
	char reqs[PATH_MAX];
	struct dirent *e;
	int fd, live = 0;
	DIR *d;

	if (snprintf(reqs, sizeof(reqs), "%s/requests", dir) >= (int)sizeof(reqs))
		return -ENAMETOOLONG;
	if ((fd = open(reqs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -errno;
	}
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "r-", 2) && strncmp(e->d_name, ".new-", 5) &&
		    strncmp(e->d_name, ".old-", 5))
			continue;
		if (has_client(dirfd(d), e->d_name))
			live++;
		else
			remove_dir_flat(dirfd(d), e->d_name);
	}
	closedir(d);
	return live;
}

/* The request's "client" (locked for this process's life: how the next
 * command tells it has gone) and "alive" (touched by pump), made before
 * it is published. */
static int claim(struct fwd *f)
{
	char path[PATH_MAX];
	int err;

	if ((err = path_in(f, "client", path, sizeof(path))))
		return err;
	f->lock_fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (f->lock_fd < 0 || flock(f->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return -errno;
	if ((err = path_in(f, "alive", path, sizeof(path))))
		return err;
	err = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (err < 0)
		return -errno;
	close(err);
	return 0;
}

/* Makes requests/.new-X, fills it, and publishes it as requests/r-X. */
static int make_request(struct fwd *f, const char *dir, int argc, char **argv, char *why, size_t whylen)
{
	char reqs[PATH_MAX], tmp[PATH_MAX], path[PATH_MAX], exe[PATH_MAX], cwd[PATH_MAX];
	char **args = calloc((size_t)argc + 1, sizeof(char *));
	unsigned rows, cols;
	size_t len;
	char *req = NULL;
	int fd, err;

	if (!args)
		return -ENOMEM;
	memcpy(args, argv, (size_t)argc * sizeof(char *));
	term_size(&rows, &cols);
	if (snprintf(reqs, sizeof(reqs), "%s/requests", dir) >= (int)sizeof(reqs) ||
	    snprintf(tmp, sizeof(tmp), "%s/.new-XXXXXX", reqs) >= (int)sizeof(tmp)) {
		err = -ENAMETOOLONG;
		goto out;
	}
	if ((err = private_dir(reqs, true, why, whylen)))
		goto out;
	/* What killed clients left goes first; the rest are commands running. */
	if ((err = machine_sweep_requests(dir)) >= MACHINE_MAX_REQUESTS) {
		snprintf(why, whylen, "%d commands run in the helper machine already; wait for one to end",
			 err);
		err = -EMFILE;
		goto out;
	}
	if (!realpath("/proc/self/exe", exe) || !getcwd(cwd, sizeof(cwd))) {
		err = -errno;
		snprintf(why, whylen, "cannot name this program or the current directory: %s", strerror(errno));
		goto out;
	}
	if ((err = machine_req_encode(exe, cwd, f->tty, rows, cols, args, environ, &req, &len))) {
		snprintf(why, whylen, "the command line and environment are too large to forward");
		goto out;
	}
	if (!mkdtemp(tmp)) {
		err = -errno;
		snprintf(why, whylen, "cannot create a request in %s: %s", reqs, strerror(errno));
		goto out;
	}
	snprintf(f->dir, sizeof(f->dir), "%s", tmp);
	if ((err = claim(f)) || (err = path_in(f, "request", path, sizeof(path)))) {
		snprintf(why, whylen, "cannot write a request in %s: %s", reqs, strerror(-err));
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	err = fd < 0 ? -errno : write_all(fd, req, len);
	if (fd >= 0)
		close(fd);
	if (!err && (err = path_in(f, "in", path, sizeof(path))) == 0) {
		f->in_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
		err = f->in_fd < 0 ? -errno : 0;
	}
	/* The same suffix, published by rename: the server sees it whole. */
	if (!err && snprintf(path, sizeof(path), "%s/r-%s", reqs, strrchr(tmp, '-') + 1) >= (int)sizeof(path))
		err = -ENAMETOOLONG;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (!err)
		snprintf(f->dir, sizeof(f->dir), "%s", path);
	else
		snprintf(why, whylen, "cannot write a request in %s: %s", reqs, strerror(-err));
out:
	free(req);
	free(args);
	return err;
}

static void remove_request(const struct fwd *f)
{
	char reqs[PATH_MAX];
	char *slash;
	int fd;

	snprintf(reqs, sizeof(reqs), "%s", f->dir);
	if (!(slash = strrchr(reqs, '/')))
		return;
	*slash = '\0';
	if ((fd = open(reqs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	remove_dir_flat(fd, slash + 1);
	close(fd);
}

/* Copies what the machine appended to out or err since last time.  What
 * was copied is punched out of the file, a MiB at a time: the file keeps
 * its size (the machine appends) but takes no more space on the host than
 * what is not copied yet, however much a command prints. */
static bool copy_out(const struct fwd *f, const char *name, int *fd, uint64_t *punched, int to)
{
	char buf[65536], path[PATH_MAX];
	bool moved = false;
	off_t at;
	ssize_t n;

	if (*fd < 0) {
		if (path_in(f, name, path, sizeof(path)))
			return false;
		*fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (*fd < 0)
			return false;
	}
	while ((n = read(*fd, buf, sizeof(buf))) > 0) {
		write_all(to, buf, (size_t)n); /* a closed stdout loses output, not the command */
		moved = true;
	}
	at = lseek(*fd, 0, SEEK_CUR) & ~(off_t)4095;
	if (at > 0 && (uint64_t)at - *punched >= MACHINE_OUT_PUNCH &&
	    fallocate(*fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, at) == 0)
		*punched = (uint64_t)at;
	return moved;
}

/* in.pos: how many bytes of "in" the command took (machine.h); -ENOENT
 * when the server has not written it, -EBADMSG when it is not a count of
 * what was written. */
static int64_t in_taken(const struct fwd *f)
{
	char path[PATH_MAX], buf[24], *end;
	unsigned long long v;
	ssize_t n;
	int fd;

	if (path_in(f, "in.pos", path, sizeof(path)) || (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return -ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EBADMSG;
	buf[n] = 0;
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (buf[0] < '0' || buf[0] > '9' || errno || (*end && strcmp(end, "\n")) || v > f->in_written)
		return -EBADMSG;
	return (int64_t)v;
}

/* Whether MACHINE_IN_MAX bytes of stdin wait in "in" for the command:
 * then no more is read (the writer waits, as on a full pipe).  What the
 * command took is punched out of "in", as copy_out does for output. */
static bool in_full(struct fwd *f)
{
	int64_t taken;
	off_t at;

	if (f->in_unbounded || f->in_written < MACHINE_IN_MAX)
		return false;
	taken = in_taken(f);
	if (taken == -ENOENT) {
		/* A server older than this kosa8 never says: it reads "in" as
		 * before, unbounded. */
		if (f->started && mono_ms() - f->started_ms > 2000) {
			fprintf(stderr, "kosa8: the helper machine was started by an older kosa8 and does not "
					"bound this command's input; 'kosa8 machine stop' starts a new one next time\n");
			f->in_unbounded = true;
			return false;
		}
		return true;
	}
	if (taken < 0)
		return true; /* a count that cannot be: wait for a good one */
	at = (off_t)taken & ~(off_t)4095;
	if (at > 0 && (uint64_t)at - f->in_punched >= MACHINE_OUT_PUNCH &&
	    fallocate(f->in_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, at) == 0)
		f->in_punched = (uint64_t)at;
	return f->in_written - (uint64_t)taken >= MACHINE_IN_MAX;
}

/* Copies what stdin has now into "in" (waiting up to ms for it), while
 * the command keeps up; at its end, makes in.eof. */
static bool copy_in(struct fwd *f, int ms)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	char buf[65536];
	ssize_t n;

	if (f->stdin_done || in_full(f)) {
		poll(NULL, 0, ms);
		return false;
	}
	if (poll(&p, 1, ms) <= 0)
		return false;
	n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n < 0 && errno == EINTR)
		return false;
	if (n > 0 && write_all(f->in_fd, buf, (size_t)n) == 0) {
		f->in_written += (uint64_t)n;
		return true;
	}
	f->stdin_done = true;
	close(f->in_fd);
	f->in_fd = -1;
	put_file(f, "in.eof", "");
	return true;
}

static void term_raw(struct fwd *f)
{
	struct termios t;

	if (!f->tty || tcgetattr(STDIN_FILENO, &f->saved) < 0)
		return;
	t = f->saved;
	cfmakeraw(&t);
	f->raw = tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) == 0;
}

static int read_status(const struct fwd *f)
{
	char path[PATH_MAX], buf[16] = "";
	int fd, st;

	if (path_in(f, "status", path, sizeof(path)) || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	st = atoi(buf);
	return st >= 0 && st <= 255 && buf[0] >= '0' && buf[0] <= '9' ? st : -1;
}

/* The loop: stdin in, output out, signals and size changes passed on. */
static int pump(struct fwd *f, const char *mdir)
{
	uint64_t start = mono_ms(), last_check = start, last_alive = 0;
	int ms = 10, pid;
	char num[16];

	for (;;) {
		bool moved = false;
		uint64_t now = mono_ms();

		if (pending_sig) {
			snprintf(num, sizeof(num), "%d", (int)pending_sig);
			pending_sig = 0;
			put_file(f, "signal", num);
		}
		if (winch && f->tty) {
			unsigned rows, cols;
			winch = 0;
			term_size(&rows, &cols);
			snprintf(num, sizeof(num), "%u %u", rows, cols);
			put_file(f, "winsize", num);
		}
		moved |= copy_in(f, ms);
		moved |= copy_out(f, "out", &f->out_fd, &f->out_read, STDOUT_FILENO);
		moved |= copy_out(f, "err", &f->err_fd, &f->err_read, STDERR_FILENO);
		if (exists(f, "status")) {
			int st = read_status(f);
			/* Everything was written before the status. */
			copy_out(f, "out", &f->out_fd, &f->out_read, STDOUT_FILENO);
			copy_out(f, "err", &f->err_fd, &f->err_read, STDERR_FILENO);
			if (st < 0)
				fprintf(stderr, "kosa8: the helper machine gave no exit status\n");
			return st < 0 ? FAILED : st;
		}
		if (!f->started && (f->started = exists(f, "started")))
			f->started_ms = now;
		if (!f->started && now - start > TAKE_TIMEOUT_MS) {
			fprintf(stderr, "kosa8: the helper machine did not take the command in %d s "
					"(see 'kosa8 machine status')\n", TAKE_TIMEOUT_MS / 1000);
			return FAILED;
		}
		/* The machine's side stops a command whose host has gone quiet. */
		if (now - last_alive >= 1000) {
			char path[PATH_MAX];
			last_alive = now;
			if (!path_in(f, "alive", path, sizeof(path)) &&
			    utimensat(AT_FDCWD, path, NULL, 0) < 0 && errno == ENOENT)
				close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		}
		if (now - last_check >= 1000) {
			last_check = now;
			if (machine_running(mdir, &pid) != 1) {
				fprintf(stderr, "kosa8: the helper machine stopped while the command ran\n");
				return FAILED;
			}
		}
		ms = moved ? 10 : (ms < 50 ? ms + 10 : 50);
	}
}

int machine_forward(const char *dir, int argc, char **argv)
{
	struct fwd f = {.in_fd = -1, .out_fd = -1, .err_fd = -1, .lock_fd = -1};
	struct sigaction sa = {.sa_handler = on_signal};
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
	char why[PATH_MAX + 160];
	int st, err;

	f.tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	if ((err = make_request(&f, dir, argc, argv, why, sizeof(why)))) {
		fprintf(stderr, "kosa8: %s\n", why);
		if (f.dir[0])
			remove_request(&f);
		if (f.lock_fd >= 0)
			close(f.lock_fd);
		return FAILED;
	}
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	term_raw(&f);
	st = pump(&f, dir);
	if (f.raw)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &f.saved);
	if (f.in_fd >= 0)
		close(f.in_fd);
	if (f.out_fd >= 0)
		close(f.out_fd);
	if (f.err_fd >= 0)
		close(f.err_fd);
	remove_request(&f);
	if (f.lock_fd >= 0)
		close(f.lock_fd);
	return st;
}
