/* The VMM's control socket (vm_control.h; the messages are in
 * docs/control-protocol.md).
 *
 * Whoever can connect controls the VM, so the socket is created mode 0600
 * and its directory is the caller's to protect (the supervisor keeps it in
 * the sandbox's private state directory).  One client is served at a time;
 * others wait in the listen backlog.  A request that is too long, not JSON
 * of this version or not a known request is answered with an error; one
 * longer than VM_CONTROL_MAX_LINE also ends the connection. */
#include "vmm/vm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/jsonl.h"
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


/* ---- messages ---- */

static const char *const op_names[] = {
	[VMCTL_PAUSE] = "pause",   [VMCTL_RESUME] = "resume",
	[VMCTL_STATUS] = "status", [VMCTL_STOP] = "stop",
	[VMCTL_CHECKPOINT] = "checkpoint",
};

/* Whether every field of msg is one of the names in keys (a NULL-ended
 * list), "v" always allowed: a field the receiver does not know is a
 * message of another version, not something to skip. */
static bool only_fields(const cJSON *msg, const char *const *keys)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, msg) {
		bool known = !strcmp(it->string, "v");
		for (const char *const *k = keys; *k && !known; k++)
			known = !strcmp(it->string, *k);
		if (!known)
			return false;
	}
	return true;
}

/* A string field into buf: 1 when copied, 0 when absent, -EPROTO when of
 * another type or as long as buf. */
static int str_field(const cJSON *msg, const char *key, char *buf, size_t len)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(msg, key);

	if (!f)
		return 0;
	if (!cJSON_IsString(f) || strlen(f->valuestring) >= len)
		return -EPROTO;
	memcpy(buf, f->valuestring, strlen(f->valuestring) + 1);
	return 1;
}

/* A boolean field: 0 (absent: false) or -EPROTO. */
static int bool_field(const cJSON *msg, const char *key, bool *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(msg, key);

	*out = cJSON_IsTrue(f);
	return !f || cJSON_IsBool(f) ? 0 : -EPROTO;
}

/* A number field in [0, max]: 0 (absent: 0) or -EPROTO. */
static int num_field(const cJSON *msg, const char *key, double max, double *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(msg, key);

	*out = 0;
	if (!f)
		return 0;
	if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0 && f->valuedouble <= max))
		return -EPROTO;
	*out = f->valuedouble;
	return 0;
}

int vm_control_req_decode(const cJSON *msg, struct vm_control_req *req, const char **why)
{
	static const char *const simple[] = {"op", NULL};
	static const char *const ckpt[] = {"op", "dir", "top", "live", NULL};
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(msg, "op");
	size_t i;

	memset(req, 0, sizeof(*req));
	for (i = 0; cJSON_IsString(op) && i < ARRAY_SIZE(op_names); i++)
		if (!strcmp(op->valuestring, op_names[i]))
			break;
	if (!cJSON_IsString(op) || i == ARRAY_SIZE(op_names)) {
		*why = "unknown op (pause, resume, status, stop, checkpoint)";
		return -EPROTO;
	}
	req->op = (enum vm_control_op)i;
	if (!only_fields(msg, req->op == VMCTL_CHECKPOINT ? ckpt : simple)) {
		*why = "a field this op does not take";
		return -EPROTO;
	}
	if (req->op != VMCTL_CHECKPOINT)
		return 0;
	if (str_field(msg, "dir", req->dir, sizeof(req->dir)) != 1 || !req->dir[0] ||
	    str_field(msg, "top", req->top, sizeof(req->top)) < 0 ||
	    bool_field(msg, "live", &req->live)) {
		*why = "checkpoint needs a dir, and takes a top and live (paths shorter than 4096 bytes)";
		return -EPROTO;
	}
	return 0;
}

cJSON *vm_control_req_encode(const struct vm_control_req *req)
{
	cJSON *m = cJSON_CreateObject();

	if (!m || !cJSON_AddStringToObject(m, "op", op_names[req->op]))
		goto fail;
	if (req->op == VMCTL_CHECKPOINT &&
	    (!cJSON_AddStringToObject(m, "dir", req->dir) ||
	     (req->top[0] && !cJSON_AddStringToObject(m, "top", req->top)) ||
	     (req->live && !cJSON_AddTrueToObject(m, "live"))))
		goto fail;
	return m;
fail:
	cJSON_Delete(m);
	return NULL;
}

/* Replies carry no number above 2^53: cJSON keeps them exact below. */
#define EXACT_MAX 9007199254740992.0

int vm_control_reply_decode(const cJSON *msg, struct vm_control_reply *rep, const char **why)
{
	static const char *const keys[] = {"ok", "message", "error", "state", "memory_bytes",
					   "paused_ms", "layer", "live", NULL};
	const cJSON *ok = cJSON_GetObjectItemCaseSensitive(msg, "ok");
	const cJSON *text;
	double bytes;

	memset(rep, 0, sizeof(*rep));
	rep->ok = cJSON_IsTrue(ok);
	text = cJSON_GetObjectItemCaseSensitive(msg, rep->ok ? "message" : "error");
	if (!cJSON_IsBool(ok) || !cJSON_IsString(text) || !only_fields(msg, keys) ||
	    str_field(msg, "state", rep->state, sizeof(rep->state)) < 0 ||
	    (rep->state[0] && strcmp(rep->state, "running") && strcmp(rep->state, "paused")) ||
	    num_field(msg, "memory_bytes", EXACT_MAX, &bytes) ||
	    num_field(msg, "paused_ms", EXACT_MAX, &rep->paused_ms) ||
	    bool_field(msg, "layer", &rep->layer) || bool_field(msg, "live", &rep->live)) {
		memset(rep, 0, sizeof(*rep));
		*why = "the VMM's reply is not one this kosa8 knows";
		return -EPROTO;
	}
	/* The text is for the user only: a long one is cut, not refused. */
	snprintf(rep->text, sizeof(rep->text), "%s", text->valuestring);
	rep->memory_bytes = (uint64_t)bytes;
	return 0;
}

cJSON *vm_control_reply_encode(const struct vm_control_reply *rep)
{
	cJSON *m = cJSON_CreateObject();
	bool fail = !m;

	fail = fail || !cJSON_AddBoolToObject(m, "ok", rep->ok);
	fail = fail || !cJSON_AddStringToObject(m, rep->ok ? "message" : "error", rep->text);
	if (rep->state[0])
		fail = fail || !cJSON_AddStringToObject(m, "state", rep->state);
	if (rep->memory_bytes || rep->paused_ms > 0) {
		fail = fail || !cJSON_AddNumberToObject(m, "memory_bytes", (double)rep->memory_bytes);
		fail = fail || !cJSON_AddNumberToObject(m, "paused_ms", rep->paused_ms);
	}
	if (rep->layer)
		fail = fail || !cJSON_AddTrueToObject(m, "layer");
	if (rep->live)
		fail = fail || !cJSON_AddTrueToObject(m, "live");
	if (fail) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

/* ---- server ---- */

/* A client that does not read its replies is its own problem: the socket
 * is blocking only for this one line. */
static void reply(struct vm *vm, const struct vm_control_reply *rep, int fd)
{
	cJSON *m = vm_control_reply_encode(rep);

	if (!m || jsonl_send(vm->control_client, m, fd) < 0)
		log_warn("control: could not answer the client");
	cJSON_Delete(m);
}

static void reply_text(struct vm *vm, bool ok, const char *state, const char *text)
{
	struct vm_control_reply rep = {.ok = ok};

	snprintf(rep.state, sizeof(rep.state), "%s", state ? state : "");
	snprintf(rep.text, sizeof(rep.text), "%s", text);
	reply(vm, &rep, -1);
}

static void do_checkpoint(struct vm *vm, const struct vm_control_req *req)
{
	struct vm_control_reply rep = {0};
	struct vm_ckpt_info info = {0};
	const char *top = req->top[0] ? req->top : NULL;
	int memfd = -1, err;

	err = req->live ? vm_checkpoint_live(vm, req->dir, top, &memfd, &info, rep.text, sizeof(rep.text))
			: vm_checkpoint(vm, req->dir, top, &info, rep.text, sizeof(rep.text));
	if (err) {
		reply(vm, &rep, -1);
		return;
	}
	log_info("%s", rep.text);
	rep.ok = true;
	rep.memory_bytes = info.memory_bytes;
	rep.paused_ms = info.paused_ms;
	rep.layer = info.layer;
	rep.live = memfd >= 0;
	reply(vm, &rep, memfd);
	/* The fork can start now; its memory file is written meanwhile. */
	vm_checkpoint_live_finish(vm);
}

static void do_request(struct vm *vm, const struct vm_control_req *req)
{
	switch (req->op) {
	case VMCTL_PAUSE:
		if (vm->pause_depth > 0) {
			reply_text(vm, true, "paused", "paused (already)");
		} else if (vm_pause(vm) == 0) {
			reply_text(vm, true, "paused", "paused");
		} else {
			vm_resume(vm);
			reply_text(vm, false, NULL, "the VM is stopping");
		}
		break;
	case VMCTL_RESUME:
		if (vm->pause_depth == 0) {
			reply_text(vm, true, "running", "running (was not paused)");
		} else {
			vm_resume(vm);
			reply_text(vm, true, "running", "running");
		}
		break;
	case VMCTL_STATUS:
		reply_text(vm, true, vm->pause_depth ? "paused" : "running",
			   vm->pause_depth ? "paused" : "running");
		break;
	case VMCTL_STOP:
		reply_text(vm, true, NULL, "stopping");
		vm_request_stop(vm, VM_STOP_HOST);
		break;
	case VMCTL_CHECKPOINT:
		do_checkpoint(vm, req);
		break;
	}
}

static void run_line(struct vm *vm, const char *line, size_t len)
{
	static struct vm_control_req req; /* 8 KiB: main thread only */
	const char *why = NULL;
	cJSON *msg = NULL;
	int err = jsonl_parse(line, len, VM_CONTROL_MAX_LINE, &msg, &why);

	if (!err)
		err = vm_control_req_decode(msg, &req, &why);
	cJSON_Delete(msg);
	if (err)
		reply_text(vm, false, NULL, why);
	else
		do_request(vm, &req);
}

static void drop_client(struct vm *vm)
{
	close(vm->control_client);
	vm->control_client = -1;
	vm->control_len = 0;
}

static void read_client(struct vm *vm)
{
	char *buf = vm->control_buf, *nl;
	/* read, not recvmsg: no request carries a descriptor, and one sent
	 * anyway is closed by the kernel with the bytes it came with (the
	 * seccomp filter allows no recvmsg either). */
	ssize_t n = read(vm->control_client, buf + vm->control_len,
			 sizeof(vm->control_buf) - vm->control_len);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		drop_client(vm);
		return;
	}
	vm->control_len += (size_t)n;
	while ((nl = memchr(buf, '\n', vm->control_len))) {
		size_t used = (size_t)(nl - buf) + 1;
		run_line(vm, buf, used - 1);
		if (vm->control_client < 0)
			return;
		memmove(buf, buf + used, vm->control_len - used);
		vm->control_len -= used;
	}
	if (vm->control_len == sizeof(vm->control_buf)) {
		reply_text(vm, false, NULL, "the request is longer than the protocol allows");
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
	/* A VMM whose backlog is full, or that stopped reading, must not hang
	 * the caller for ever: the send timeout bounds connect and the
	 * request; jsonl_recv bounds the wait for the reply. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(fd);
		return err == -EAGAIN ? -ETIMEDOUT : err;
	}
	return fd;
}

int vm_control_call(const char *path, const struct vm_control_req *req,
		    struct vm_control_reply *rep, int *fd_out, int timeout_ms)
{
	const char *why = NULL;
	cJSON *m = vm_control_req_encode(req), *msg = NULL;
	int fd = -1, err = m ? 0 : -ENOMEM;

	memset(rep, 0, sizeof(*rep));
	if (fd_out)
		*fd_out = -1;
	if (!err && (fd = err = call_connect(path, timeout_ms)) >= 0 &&
	    !(err = jsonl_send(fd, m, -1)) &&
	    !(err = jsonl_recv(fd, VM_CONTROL_MAX_LINE, timeout_ms, &msg, fd_out, &why)) &&
	    !(err = vm_control_reply_decode(msg, rep, &why)) && !rep->ok)
		err = -EREMOTEIO;
	if (err && err != -EREMOTEIO)
		snprintf(rep->text, sizeof(rep->text), "%s", why ? why : strerror(-err));
	if (err && fd_out && *fd_out >= 0) {
		close(*fd_out);
		*fd_out = -1;
	}
	if (fd >= 0)
		close(fd);
	cJSON_Delete(msg);
	cJSON_Delete(m);
	return err;
}
