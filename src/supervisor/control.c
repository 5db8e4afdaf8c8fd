#include "supervisor/control.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/jsonl.h"
#include "common/log.h"
#include "common/util.h"
#include "supervisor/approvals.h"

static int fill_addr(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path, path, strlen(path) + 1);
	return 0;
}

int control_listen(const char *path)
{
	struct sockaddr_un a;
	int fd, err;

	if ((err = fill_addr(&a, path)))
		return err;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path); /* a stale socket from a supervisor that died */
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 16) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int control_accept(int listen_fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* A request that cannot be read is answered with why, so that the client
 * says what went wrong instead of "connection reset". */
int control_recv(int fd, cJSON **msg, int timeout_ms)
{
	const char *why = NULL;
	int err = jsonl_recv(fd, CONTROL_MAX_LINE, timeout_ms, msg, NULL, &why);

	if (err == -EPROTO || err == -EPROTONOSUPPORT) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddBoolToObject(r, "ok", false);
		cJSON_AddStringToObject(r, "error", why);
		jsonl_send(fd, r, -1);
		cJSON_Delete(r);
	}
	return err;
}

int control_send(int fd, const cJSON *msg, int pass_fd)
{
	return jsonl_send(fd, msg, pass_fd);
}

/* The client's side of the check control_accept makes: a socket served by
 * another user (one who made the run directory first, or swapped the
 * socket) is refused, loudly, before a request or a descriptor goes. */
static int peer_is_me(int fd, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	if (cred.uid == geteuid())
		return 0;
	log_err("%s is served by uid %u, not by you (uid %u): refusing to talk to it", path,
		(unsigned)cred.uid, (unsigned)geteuid());
	return -EPERM;
}

int control_call(const char *path, const cJSON *req, cJSON **reply, int *fd_out, int timeout_ms)
{
	return control_call_progress(path, req, reply, fd_out, timeout_ms, NULL, NULL);
}

int control_call_progress(const char *path, const cJSON *req, cJSON **reply, int *fd_out,
			  int timeout_ms, void (*progress)(const cJSON *line, void *arg), void *arg)
{
	struct sockaddr_un a;
	const char *why;
	int fd, err;

	if (fd_out)
		*fd_out = -1;
	if ((err = fill_addr(&a, path)))
		return err;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		err = -errno;
		goto out;
	}
	if ((err = peer_is_me(fd, path)))
		goto out;
	/* A server that refuses this client (too many at once) answers and
	 * hangs up before reading: the send then fails, but its answer is
	 * still there to read, and it says more than "Broken pipe". */
	if ((err = control_send(fd, req, -1)) && err != -EPIPE && err != -ECONNRESET)
		goto out;
	/* Progress lines come before the reply (a long operation's). */
	while (!(err = jsonl_recv(fd, CONTROL_MAX_LINE, timeout_ms, reply, fd_out, &why)) &&
	       cJSON_HasObjectItem(*reply, "progress")) {
		if (progress)
			progress(*reply, arg);
		cJSON_Delete(*reply);
		*reply = NULL;
	}
	if (err == -EPROTO || err == -EPROTONOSUPPORT)
		log_err("%s: %s", path, why);
out:
	close(fd);
	return err;
}

/* ---- approvals ---- */

static void send_result(int fd, cJSON *r, const char *error)
{
	if (!r)
		r = cJSON_CreateObject();
	cJSON_AddBoolToObject(r, "ok", error == NULL);
	if (error)
		cJSON_AddStringToObject(r, "error", error);
	control_send(fd, r, -1);
	cJSON_Delete(r);
}

/* The user at the other end of fd: control_accept already made sure it is
 * this process's user, but the name is what the audit log should say. */
static void peer_name(int fd, char *buf, size_t len)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct passwd pw, *res = NULL;
	char pwbuf[1024];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		snprintf(buf, len, "unknown");
		return;
	}
	if (getpwuid_r(cred.uid, &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res)
		snprintf(buf, len, "%s", res->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)cred.uid);
}

static void answer_approval(struct approvals *a, int fd, const cJSON *req)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
	const cJSON *ans = cJSON_GetObjectItemCaseSensitive(req, "answer");
	enum approval_answer aa;
	char who[64];
	int err;

	if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 9007199254740992.0 ||
	    !cJSON_IsString(ans) || approval_answer_parse(ans->valuestring, &aa)) {
		send_result(fd, NULL, "approvals.answer needs an id and an answer (allow, always or deny)");
		return;
	}
	peer_name(fd, who, sizeof(who));
	err = approvals_answer(a, (uint64_t)id->valuedouble, aa, who);
	send_result(fd, NULL, err == -ENOENT ? "no such request waiting (answered already, or timed out)" :
			      err ? "the answer could not be recorded" : NULL);
}

int control_serve_approvals(struct approvals *a, int fd, const cJSON *req)
{
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(req, "op");
	cJSON *r;

	if (!cJSON_IsString(op) || strncmp(op->valuestring, "approvals.", 10))
		return 0;
	if (!a) {
		send_result(fd, NULL, "this sandbox has no approvals queue (egress is off)");
	} else if (!strcmp(op->valuestring, "approvals.list")) {
		r = cJSON_CreateObject();
		cJSON_AddItemToObject(r, "requests", approvals_list(a));
		send_result(fd, r, NULL);
	} else if (!strcmp(op->valuestring, "approvals.answer")) {
		answer_approval(a, fd, req);
	} else {
		send_result(fd, NULL, "unknown approvals op (approvals.list, approvals.answer)");
	}
	return 1;
}
