/* AP_EXEC: run a command as a user, with pipes or a pseudo-terminal, and
 * stream its stdio over the session with credit-based flow control.
 *
 * Memory stays bounded both ways: stdout/stderr are read from the child only
 * while the host has granted credit (AP_WINDOW) and little output is queued,
 * and stdin from the host is accepted only up to the window this side
 * granted, which it re-grants as the child consumes it. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

#define OUT_CHUNK AP_MAX_PAYLOAD
#define OUT_QUEUE_MAX (256 * 1024)
/* How long a pty may stay silent after its command exited before the agent
 * stops waiting for output (a background job may hold it open forever). */
#define PTY_LINGER_MS 250

enum stage { ST_SETUP = 1, ST_USER, ST_CWD, ST_EXEC };

struct xs {
	struct ap_conn *c;
	uint32_t chan;
	pid_t pid;
	bool pty, exited;
	int status;
	int in_fd, out_fd, err_fd, sfd;
	uint8_t *inbuf;
	size_t in_len;
	bool in_eof;
	uint32_t grant;          /* stdin bytes consumed, not yet re-granted */
	uint64_t credit;         /* stdout+stderr bytes the host will accept */
};

/* ---- the child ---- */

static void child_fail(int errfd, enum stage st)
{
	int msg[2] = { st, errno };
	if (write(errfd, msg, sizeof(msg)) < 0) {
		/* nothing left to tell anyone */
	}
	_exit(127);
}

static void child(const struct ap_exec_req *q, const struct agent_user *u, char **env,
		  const char *cwd, const char *slave, int pin[2], int pout[2], int perr[2], int errfd)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (setsid() < 0)
		child_fail(errfd, ST_SETUP);
	if (slave) {
		int fd = open(slave, O_RDWR);
		if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) < 0)
			child_fail(errfd, ST_SETUP);
		if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			child_fail(errfd, ST_SETUP);
		if (fd > 2)
			close(fd);
	} else if (dup2(pin[0], 0) < 0 || dup2(pout[1], 1) < 0 || dup2(perr[1], 2) < 0) {
		child_fail(errfd, ST_SETUP);
	}
	if (geteuid() == 0) {
		if (setgroups((size_t)u->ngroups, u->groups) < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0)
			child_fail(errfd, ST_USER);
	} else if (u->uid != geteuid()) {
		errno = EPERM;
		child_fail(errfd, ST_USER);
	}
	if (chdir(cwd) < 0)
		child_fail(errfd, ST_CWD);
	environ = env;   /* execvp searches this environment's PATH */
	execvp(q->argv[0], q->argv);
	child_fail(errfd, ST_EXEC);
}

/* ---- environment ---- */

static int env_add(char ***env, size_t *n, const char *kv)
{
	size_t klen = strcspn(kv, "=");
	for (size_t i = 0; i < *n; i++) {
		if (!strncmp((*env)[i], kv, klen) && (*env)[i][klen] == '=') {
			(*env)[i] = (char *)kv;
			return 0;
		}
	}
	char **v = realloc(*env, (*n + 2) * sizeof(char *));
	if (!v)
		return -ENOMEM;
	v[(*n)++] = (char *)kv;
	v[*n] = NULL;
	*env = v;
	return 0;
}

/* A clean environment: the basics for the user, then the request's vars.
 * The strings live in `store` (freed by the caller) or in the request. */
static int build_env(const struct ap_exec_req *q, const struct agent_user *u, char ***env, char store[5][600])
{
	size_t n = 0;
	int rc = 0;
	*env = NULL;
	snprintf(store[0], 600, "HOME=%s", u->home);
	snprintf(store[1], 600, "USER=%s", u->name[0] ? u->name : "nobody");
	snprintf(store[2], 600, "LOGNAME=%s", u->name[0] ? u->name : "nobody");
	snprintf(store[3], 600, "SHELL=%s", u->shell);
	snprintf(store[4], 600, "TERM=%s", q->term ? q->term : "xterm-256color");
	rc = env_add(env, &n, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	for (int i = 0; rc == 0 && i < 4; i++)
		rc = env_add(env, &n, store[i]);
	if (rc == 0 && (q->pty || q->term))
		rc = env_add(env, &n, store[4]);
	for (size_t i = 0; rc == 0 && i < q->envc; i++)
		rc = env_add(env, &n, q->env[i]);
	return rc;
}

/* ---- starting ---- */

static int open_pty(const struct ap_exec_req *q, int *master, char *slave, size_t n)
{
	int fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct winsize ws = { .ws_row = q->rows, .ws_col = q->cols };
	if (grantpt(fd) < 0 || unlockpt(fd) < 0 || ptsname_r(fd, slave, n) != 0 ||
	    ioctl(fd, TIOCSWINSZ, &ws) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	*master = fd;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static const char *stage_name(int st)
{
	switch (st) {
	case ST_SETUP: return "setting up stdio";
	case ST_USER: return "switching user";
	case ST_CWD: return "changing to the working directory";
	default: return "executing";
	}
}

/* Forks the child; on failure answers the host with AP_ERROR and returns 1. */
static int spawn(struct xs *x, const struct ap_exec_req *q, const struct agent_user *u, char **env, const char *cwd)
{
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, ep[2] = { -1, -1 };
	int master = -1, rc = 0;
	char slave[128];

	if (q->pty)
		rc = open_pty(q, &master, slave, sizeof(slave));
	else if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
		rc = -errno;
	if (rc == 0 && pipe2(ep, O_CLOEXEC) < 0)
		rc = -errno;
	if (rc == 0 && (x->pid = fork()) < 0)
		rc = -errno;
	if (rc == 0 && x->pid == 0)
		child(q, u, env, cwd, q->pty ? slave : NULL, pin, pout, perr, ep[1]);
	close_fd(&ep[1]);
	close_fd(&pin[0]);
	close_fd(&pout[1]);
	close_fd(&perr[1]);
	if (rc) {
		close_fd(&pin[1]); close_fd(&pout[0]); close_fd(&perr[0]); close_fd(&ep[0]); close_fd(&master);
		ap_conn_send_error(x->c, x->chan, rc, "cannot start: %s", strerror(-rc));
		return 1;
	}
	int msg[2];
	ssize_t n;
	while ((n = read(ep[0], msg, sizeof(msg))) < 0 && errno == EINTR)
		;
	close_fd(&ep[0]);
	if (n == sizeof(msg)) {
		waitpid(x->pid, NULL, 0);
		close_fd(&pin[1]); close_fd(&pout[0]); close_fd(&perr[0]); close_fd(&master);
		const char *what = msg[0] == ST_CWD ? cwd : msg[0] == ST_EXEC ? q->argv[0] : u->name;
		ap_conn_send_error(x->c, x->chan, msg[1], "%s %s: %s", stage_name(msg[0]), what, strerror(msg[1]));
		return 1;
	}
	x->pty = q->pty;
	if (q->pty) {
		x->out_fd = master;
		x->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 0);
	} else {
		x->in_fd = pin[1];
		x->out_fd = pout[0];
		x->err_fd = perr[0];
	}
	int fds[3] = { x->in_fd, x->out_fd, x->err_fd };
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
	return 0;
}

/* ---- streaming ---- */

static int send_u32(struct xs *x, uint16_t type, uint32_t v)
{
	uint8_t b[4] = { v, v >> 8, v >> 16, v >> 24 };
	return ap_conn_send(x->c, type, x->chan, b, 4);
}

static void stdin_eof(struct xs *x)
{
	if (x->in_fd < 0)
		return;
	if (x->pty) {
		/* A terminal has no end of file: its line discipline turns VEOF
		 * at the start of a line into one for the reader. */
		struct termios t;
		char eof = tcgetattr(x->in_fd, &t) == 0 ? (char)t.c_cc[VEOF] : 4;
		if (write(x->in_fd, &eof, 1) < 0) {
			/* the reader is gone: nothing to end */
		}
	}
	close_fd(&x->in_fd);
}

static int pump_stdin(struct xs *x)
{
	while (x->in_len > 0 && x->in_fd >= 0) {
		ssize_t n = write(x->in_fd, x->inbuf, x->in_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0) {
			/* The child closed stdin (EPIPE): what is left is dropped. */
			n = (ssize_t)x->in_len;
			close_fd(&x->in_fd);
		}
		memmove(x->inbuf, x->inbuf + n, x->in_len - (size_t)n);
		x->in_len -= (size_t)n;
		x->grant += (uint32_t)n;
	}
	if (x->in_fd < 0 && x->in_len) {
		x->grant += (uint32_t)x->in_len;
		x->in_len = 0;
	}
	if (x->in_eof && x->in_len == 0)
		stdin_eof(x);
	if (x->grant >= 16 * 1024 || (x->grant && x->in_len == 0)) {
		int rc = send_u32(x, AP_WINDOW, x->grant);
		x->grant = 0;
		return rc;
	}
	return 0;
}

/* Reads one chunk of output if there is room; closes *fd at its end.
 * 0, or -errno if the frame could not be queued. */
static int pump_out(struct xs *x, int *fd, uint16_t type)
{
	uint8_t buf[OUT_CHUNK];
	size_t want = x->credit < sizeof(buf) ? (size_t)x->credit : sizeof(buf);
	if (*fd < 0 || want == 0 || ap_conn_pending(x->c) >= OUT_QUEUE_MAX)
		return 0;
	ssize_t n = read(*fd, buf, want);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		/* Pipes: the child's writes are all in the pipe by the time it
		 * is reaped, so empty then means drained. */
		if (x->exited && !x->pty)
			close_fd(fd);
		return 0;
	}
	if (n <= 0) {   /* EOF, or EIO from a pty whose slave side is all closed */
		close_fd(fd);
		return 0;
	}
	x->credit -= (uint64_t)n;
	return ap_conn_send(x->c, type, x->chan, buf, (size_t)n);
}

static int on_frame(struct xs *x, const struct ap_frame *f)
{
	struct ap_rd r;
	uint32_t v;
	uint16_t rows, cols;
	ap_rd_init(&r, f->p, f->h.len);
	if (f->h.chan != x->chan)
		return -EBADMSG;
	switch (f->h.type) {
	case AP_STDIN:
		if (x->in_eof || f->h.len > AP_INITIAL_WINDOW - x->in_len)
			return -EBADMSG;   /* past EOF, or past the granted window */
		memcpy(x->inbuf + x->in_len, f->p, f->h.len);
		x->in_len += f->h.len;
		return 0;
	case AP_STDIN_EOF:
		if (f->h.len)
			return -EBADMSG;
		x->in_eof = true;
		return 0;
	case AP_WINDOW:
		if (f->h.len != 4 || ap_get_u32(&r, &v) || x->credit + v > AP_MAX_WINDOW)
			return -EBADMSG;
		x->credit += v;
		return 0;
	case AP_RESIZE:
		if (f->h.len != 4 || ap_get_u16(&r, &rows) || ap_get_u16(&r, &cols))
			return -EBADMSG;
		if (x->pty && x->out_fd >= 0) {
			struct winsize ws = { .ws_row = rows, .ws_col = cols };
			ioctl(x->out_fd, TIOCSWINSZ, &ws);
		}
		return 0;
	case AP_SIGNAL:
		if (f->h.len != 4 || ap_get_u32(&r, &v) || v < 1 || v > 64)
			return -EBADMSG;
		if (!x->exited)
			kill(-x->pid, (int)v);
		return 0;
	default:
		return -EBADMSG;
	}
}

static int read_socket(struct xs *x)
{
	struct ap_frame f;
	int rc = ap_conn_fill(x->c);
	if (rc < 0)
		return rc;
	while ((rc = ap_conn_next(x->c, &f)) == 1) {
		rc = on_frame(x, &f);
		if (rc == -EBADMSG)
			ap_conn_send_error(x->c, 0, EBADMSG, "unexpected frame type %u on channel %u during exec",
					   f.h.type, f.h.chan);
		if (rc)
			return rc;
	}
	if (rc == -EBADMSG)
		ap_conn_send_error(x->c, 0, EBADMSG, "malformed frame header");
	return rc;
}

static void reap(struct xs *x)
{
	struct signalfd_siginfo si;
	while (read(x->sfd, &si, sizeof(si)) > 0)
		;
	if (!x->exited && waitpid(x->pid, &x->status, WNOHANG) == x->pid)
		x->exited = true;
}

static int send_exit(struct xs *x)
{
	uint8_t b[8] = { 0 };
	int code;
	if (WIFSIGNALED(x->status)) {
		b[0] = AP_KILLED;
		b[1] = WCOREDUMP(x->status) ? 1 : 0;
		code = WTERMSIG(x->status);
	} else {
		code = WEXITSTATUS(x->status);
	}
	b[4] = (uint8_t)code;
	int rc = ap_conn_send(x->c, AP_EXIT, x->chan, b, sizeof(b));
	return rc ? rc : ap_conn_flush_all(x->c);
}

static int stream(struct xs *x)
{
	int rc = send_u32(x, AP_STARTED, (uint32_t)x->pid);
	while (rc == 0 && !(x->exited && x->out_fd < 0 && x->err_fd < 0)) {
		struct pollfd p[5] = {
			{ .fd = x->c->fd, .events = POLLIN | (ap_conn_pending(x->c) ? POLLOUT : 0) },
			{ .fd = x->sfd, .events = POLLIN },
			{ .fd = x->in_len ? x->in_fd : -1, .events = POLLOUT },
		};
		bool room = x->credit > 0 && ap_conn_pending(x->c) < OUT_QUEUE_MAX;
		p[3] = (struct pollfd){ .fd = room ? x->out_fd : -1, .events = POLLIN };
		p[4] = (struct pollfd){ .fd = room ? x->err_fd : -1, .events = POLLIN };
		int timeout = x->exited && x->pty ? PTY_LINGER_MS : -1;
		int n = poll(p, 5, timeout);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n == 0 && x->exited && x->pty && room) {
			close_fd(&x->out_fd);
			break;
		}
		if (p[1].revents)
			reap(x);
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
			rc = read_socket(x);
		if (rc == 0)
			rc = pump_stdin(x);
		/* After the exit, read even without POLLIN, to see "drained". */
		if (rc == 0 && (p[3].revents || (x->exited && room)))
			rc = pump_out(x, &x->out_fd, AP_STDOUT);
		if (rc == 0 && (p[4].revents || (x->exited && room)))
			rc = pump_out(x, &x->err_fd, AP_STDERR);
		if (rc == 0)
			rc = ap_conn_flush(x->c);
	}
	if (rc == 0) {
		while (!x->exited) {   /* the pty closed first: wait for the status */
			if (waitpid(x->pid, &x->status, 0) == x->pid)
				x->exited = true;
		}
		rc = send_exit(x);
	}
	return rc;
}

static int setup_sigchld(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGCHLD);
	sigprocmask(SIG_BLOCK, &s, NULL);
	int fd = signalfd(-1, &s, SFD_NONBLOCK | SFD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int exec_run(struct ap_conn *c, uint32_t chan, const uint8_t *p, size_t len)
{
	struct ap_exec_req q;
	struct agent_user u;
	char err[256], store[5][600];
	char **env = NULL;
	struct xs x = { .c = c, .chan = chan, .in_fd = -1, .out_fd = -1, .err_fd = -1, .sfd = -1,
			.credit = AP_INITIAL_WINDOW };
	struct stat sb;
	int rc = ap_exec_req_decode(p, len, &q);

	if (rc)
		return ap_conn_send_error(c, chan, rc, "malformed exec request: %s", strerror(-rc)) ?: 0;
	if (user_lookup(q.user, &u, err, sizeof(err))) {
		rc = ap_conn_send_error(c, chan, ENOENT, "%s", err);
		goto out;
	}
	const char *cwd = q.cwd ? q.cwd : (stat(u.home, &sb) == 0 && S_ISDIR(sb.st_mode)) ? u.home : "/";
	x.inbuf = malloc(AP_INITIAL_WINDOW);
	rc = x.inbuf ? build_env(&q, &u, &env, store) : -ENOMEM;
	if (rc == 0)
		rc = x.sfd = setup_sigchld();
	if (rc < 0)
		rc = ap_conn_send_error(c, chan, rc, "cannot start: %s", strerror(-rc)) ?: 1;
	else
		rc = spawn(&x, &q, &u, env, cwd);
	if (rc == 0) {
		rc = stream(&x);
		if (rc && !x.exited) {
			/* The host went away or broke the protocol: end the command. */
			kill(-x.pid, SIGKILL);
			kill(x.pid, SIGKILL);
			waitpid(x.pid, NULL, 0);
		}
	} else if (rc == 1) {
		rc = 0;   /* answered with AP_ERROR */
	}
out:
	close_fd(&x.in_fd);
	close_fd(&x.out_fd);
	close_fd(&x.err_fd);
	close_fd(&x.sfd);
	free(x.inbuf);
	free(env);
	ap_exec_req_free(&q);
	return rc;
}
