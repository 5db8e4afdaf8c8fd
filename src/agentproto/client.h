/* Host-side client of kosa8-agent: what `kosa8 exec/run/cp` use.
 *
 *   struct agent_client *c;
 *   agent_client_connect_vsock_uds("/run/.../vsock.sock", AGENT_VSOCK_PORT, &c);
 *   struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
 *   o.argv = (const char *[]){ "bash", "-l", NULL };
 *   o.pty = isatty(0); o.stdin_fd = 0; o.stdout_fd = 1; o.stderr_fd = 2;
 *   struct agent_exit x;
 *   if (agent_exec(c, &o, &x) == 0) exit(x.signaled ? 128 + x.code : x.code);
 *   else fprintf(stderr, "%s\n", agent_client_error(c));
 *
 * A client is one session: one request at a time (use one client per
 * concurrent command).  Every function returns 0 or -errno; when the agent
 * answered with an error, agent_client_error() has its message.  Not
 * thread-safe per client; separate clients are independent. */
#ifndef KOSA8_AGENTPROTO_CLIENT_H
#define KOSA8_AGENTPROTO_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentproto/tree.h"

struct agent_client;

/* Connects to an agent listening on a unix socket (tests, or a guest port
 * already proxied) and exchanges versions.  If the connection was made but
 * the exchange failed, *out is still set: read agent_client_error() (e.g.
 * the agent's version-mismatch message), then agent_client_close() it. */
int agent_client_connect_unix(const char *path, struct agent_client **out);
/* Connects through the VMM's vsock device socket: "CONNECT <port>\n" must be
 * answered "OK <n>\n" before the agent protocol starts. */
int agent_client_connect_vsock_uds(const char *uds_path, uint32_t port, struct agent_client **out);
/* Just the handshake: a stream socket to guest port `port`, or -errno
 * (-ECONNREFUSED when nothing listens there).  For a caller that hands the
 * connection on, as the supervisor passes it to the CLI. */
int agent_vsock_uds_connect(const char *uds_path, uint32_t port);
/* Same over an already connected stream socket (taken over, closed later). */
int agent_client_from_fd(int fd, struct agent_client **out);
void agent_client_close(struct agent_client *c);
/* The last error: the agent's message, or a local description. */
const char *agent_client_error(const struct agent_client *c);
/* The agent's software version from its hello. */
const char *agent_client_agent_version(const struct agent_client *c);

struct agent_ping {
	uint64_t uptime_ms;        /* guest uptime (CLOCK_BOOTTIME) */
	uint64_t agent_uptime_ms;  /* since the agent started */
	char version[64];
};
int agent_ping(struct agent_client *c, struct agent_ping *p);

struct agent_exec_opts {
	const char *const *argv;   /* required, NULL-terminated; argv[0] searched in PATH */
	const char *const *env;    /* NAME=value added to the clean default, or NULL */
	const char *cwd;           /* NULL: the user's home (or /) */
	const char *user;          /* name or decimal uid; NULL: the agent's default */
	bool pty;                  /* one stream (stdout) for both outputs */
	uint16_t rows, cols;
	const char *term;          /* TERM, default xterm-256color with a pty */
	int stdin_fd;              /* -1: the command's stdin is empty */
	int stdout_fd, stderr_fd;  /* -1: discard */
	int ctl_fd;                /* -1, or the read end of a pipe fed with
	                              agent_ctl_resize()/agent_ctl_signal() */
};
#define AGENT_EXEC_OPTS_INIT { .rows = 24, .cols = 80, .stdin_fd = -1, .stdout_fd = -1, \
			       .stderr_fd = -1, .ctl_fd = -1 }

struct agent_exit {
	bool signaled;   /* killed by signal `code` (core dumped if core) */
	bool core;
	int code;        /* exit status 0..255, or the signal number */
	pid_t pid;       /* in the guest */
};

/* Runs a command and streams its stdio until it ends.  0 with x filled when
 * it ran (whatever its status), -errno when it could not start (unknown
 * user, missing cwd or program, ...) or the session failed. */
int agent_exec(struct agent_client *c, const struct agent_exec_opts *o, struct agent_exit *x);

/* Async-signal-safe: for a SIGWINCH / SIGINT handler writing to ctl_fd's pipe. */
int agent_ctl_resize(int wfd, uint16_t rows, uint16_t cols);
int agent_ctl_signal(int wfd, int sig);

/* Copies local_path (a file, a symlink or a directory's contents) into the
 * guest directory remote_dir (created if missing), owned by user (NULL: the
 * agent's default user).  Modes and symlinks are kept; each file's length and
 * CRC-32 are verified by the agent. */
int agent_put_tree(struct agent_client *c, const char *local_path, const char *remote_dir,
		   const char *user, struct ap_tree_stats *st);
/* Copies guest remote_path (file, symlink or directory contents) into the
 * local directory local_dir through the guarded writer (common/guarded.h):
 * nothing lands outside it or goes through a link, modes are masked and
 * sizes bounded as o says (NULL: defaults, no bound).  st->special_dropped
 * counts the entries whose setuid/setgid/sticky bits were dropped. */
int agent_get_tree(struct agent_client *c, const char *remote_path, const char *local_dir,
		   const struct gw_opts *o, struct ap_tree_stats *st);

/* Hands the agent a CA certificate (PEM) to add to the guest's trust
 * store, which the agent does inside the guest (AP_TRUST).  The host never
 * reads the guest's trust store back. */
int agent_trust_ca(struct agent_client *c, const char *pem);

/* How long any one reply (and a stalled send) may take: REPLY_TIMEOUT_MS
 * (30 s) unless set.  Past it a call fails with -ETIMEDOUT. */
void agent_client_set_timeout(struct agent_client *c, int ms);

/* After a run from a checkpoint: the agent reseeds the guest's RNG with
 * q's seed, sets its clock and, with q->identity, its host name and
 * machine-id, with no guest program (AP_FIXUP).  *done gets the AP_FIX_*
 * bits of what it did. */
int agent_fixup(struct agent_client *c, const struct ap_fixup_req *q, uint32_t *done);

/* Asks the agent to power the guest off / reboot it (a plain agent process
 * exits).  0 once the agent acknowledged. */
int agent_shutdown(struct agent_client *c);
int agent_reboot(struct agent_client *c);

#endif
