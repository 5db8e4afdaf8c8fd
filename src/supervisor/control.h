/* The supervisor's control socket: one JSON object per line each way
 * (common/jsonl.h, docs/control-protocol.md), and
 * optionally one file descriptor passed with the reply (SCM_RIGHTS), e.g. a
 * connection to the guest agent.  Only processes of the same user are
 * served (SO_PEERCRED), on top of the socket's 0700 directory. */
#ifndef KOSA8_CONTROL_H
#define KOSA8_CONTROL_H

#include <cjson/cJSON.h>

#define CONTROL_MAX_LINE (64 * 1024)

int control_listen(const char *path);
/* Accepts one client; -EPERM (and the connection closed) for another user. */
int control_accept(int listen_fd);
/* Reads one request line; -EPROTO for a line that is too long or not JSON. */
int control_recv(int fd, cJSON **msg, int timeout_ms);
/* Sends one message, with pass_fd attached when it is >= 0. */
int control_send(int fd, const cJSON *msg, int pass_fd);

struct approvals;
/* The approvals requests, for the supervisor's dispatcher to offer every
 * request it reads: returns 1 when req's op is one of these (the reply is
 * sent on fd), 0 when it is not (nothing sent).
 *   {"op":"approvals.list"}
 *     -> {"ok":true,"requests":[{"id","kind","name","port","waiting_ms","waiters"},...]}
 *   {"op":"approvals.answer","id":N,"answer":"allow"|"always"|"deny"}
 *     -> {"ok":true}, or {"ok":false,"error":...} (e.g. no longer waiting)
 * Who answered is the peer's user name (SO_PEERCRED), for the audit log.
 * With a NULL queue (a sandbox without egress) both reply with an error. */
int control_serve_approvals(struct approvals *a, int fd, const cJSON *req);

/* Client side: sends req to the socket at path and waits for the reply;
 * *fd_out (optional) gets a passed descriptor or -1.  -ECONNREFUSED/-ENOENT
 * when no supervisor listens there. */
int control_call(const char *path, const cJSON *req, cJSON **reply, int *fd_out, int timeout_ms);
/* The same for a long operation's request sent with "progress":true:
 * each progress line ({"progress":STEP,"what":..,"running_ms":N}) before
 * the reply goes to progress(line, arg) (NULL: skipped); timeout_ms is the
 * longest wait for any one line. */
int control_call_progress(const char *path, const cJSON *req, cJSON **reply, int *fd_out,
			  int timeout_ms, void (*progress)(const cJSON *line, void *arg), void *arg);

#endif
