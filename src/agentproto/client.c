/* Host-side client of kosa8-agent (see client.h and docs/agent-protocol.md).
 * Everything the agent sends is checked like any other untrusted input: a
 * frame that does not fit the protocol ends the call with -EPROTO. */
#include "agentproto/client.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define REPLY_TIMEOUT_MS 30000
#define HANDSHAKE_TIMEOUT_MS 10000
/* Output bytes consumed before they are granted back to the agent. */
#define GRANT_BATCH (64 * 1024)

struct agent_client {
	struct ap_conn *conn;
	int timeout_ms;        /* longest wait for one reply frame */
	uint32_t next_chan;
	uint16_t minor;          /* the agent's protocol minor version */
	char version[64];
	char err[512];
};

enum { CTL_RESIZE = 1, CTL_SIGNAL = 2 };
struct agent_ctl {
	uint32_t kind;
	uint32_t a, b;
};

static int fail(struct agent_client *c, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct agent_client *c, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return rc;
}

const char *agent_client_error(const struct agent_client *c)
{
	return c->err;
}

const char *agent_client_agent_version(const struct agent_client *c)
{
	return c->version;
}

/* An AP_ERROR from the agent: its message, and its errno as the result
 * (kept within errno's range whatever the agent claims). */
static int take_error(struct agent_client *c, const struct ap_frame *f)
{
	struct ap_rd r;
	uint32_t code;
	ap_rd_init(&r, f->p, f->h.len);
	if (ap_get_u32(&r, &code))
		return fail(c, -EPROTO, "malformed error frame from the agent");
	ap_text(f->p + 4, f->h.len - 4, c->err, sizeof(c->err));
	return code >= 1 && code < 4096 ? -(int)code : -EPROTO;
}

static int recv_frame(struct agent_client *c, struct ap_frame *f, int timeout)
{
	int rc = ap_conn_recv(c->conn, f, timeout);
	if (rc == -ECONNRESET)
		return fail(c, rc, "the agent closed the connection");
	if (rc == -EBADMSG)
		return fail(c, -EPROTO, "malformed frame header from the agent");
	if (rc)
		return fail(c, rc, "agent connection: %s", strerror(-rc));
	if (f->h.type == AP_ERROR && f->h.chan == 0)
		return take_error(c, f);
	return 0;
}

/* Waits for the reply to a request on chan: AP_OK (or `want`), or AP_ERROR. */
static int expect(struct agent_client *c, uint32_t chan, uint16_t want, struct ap_frame *f)
{
	int rc = recv_frame(c, f, c->timeout_ms);
	if (rc == -ETIMEDOUT)
		return fail(c, rc, "the agent did not answer within %d ms", c->timeout_ms);
	if (rc)
		return rc;
	if (f->h.chan == chan && f->h.type == AP_ERROR)
		return take_error(c, f);
	if (f->h.chan != chan || f->h.type != want)
		return fail(c, -EPROTO, "unexpected frame type %u on channel %u from the agent",
			    f->h.type, f->h.chan);
	return 0;
}

static int hello(struct agent_client *c)
{
	struct ap_wr w;
	struct ap_frame f;
	ap_wr_init(&w);
	ap_put_u16(&w, AP_VERSION_MAJOR);
	ap_put_u16(&w, AP_VERSION_MINOR);
	ap_put_bytes(&w, "kosa8", 5);
	int rc = ap_wr_status(&w) ?: ap_conn_send(c->conn, AP_HELLO, 0, w.p, w.len);
	ap_wr_free(&w);
	if (rc == 0)
		rc = expect(c, 0, AP_HELLO, &f);
	if (rc)
		return rc;
	struct ap_rd r;
	uint16_t major, minor;
	ap_rd_init(&r, f.p, f.h.len);
	if (ap_get_u16(&r, &major) || ap_get_u16(&r, &minor))
		return fail(c, -EPROTO, "malformed hello from the agent");
	if (major != AP_VERSION_MAJOR)
		return fail(c, -EPROTONOSUPPORT, "agent speaks protocol %u.%u, this client %d.%d",
			    major, minor, AP_VERSION_MAJOR, AP_VERSION_MINOR);
	c->minor = minor;
	ap_text(f.p + 4, f.h.len - 4, c->version, sizeof(c->version));
	return 0;
}

static int client_new(int fd, struct agent_client **out)
{
	struct agent_client *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->next_chan = 1;
	c->timeout_ms = REPLY_TIMEOUT_MS;
	int rc = ap_conn_open(&c->conn, fd);
	if (rc) {
		close(fd);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int agent_client_from_fd(int fd, struct agent_client **out)
{
	struct agent_client *c;
	int rc = client_new(fd, &c);
	if (rc)
		return rc;
	/* Even on failure the caller gets the client, to read the agent's
	 * message (a version mismatch says what each side speaks). */
	*out = c;
	return hello(c);
}

static int unix_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int agent_client_connect_unix(const char *path, struct agent_client **out)
{
	*out = NULL;
	int fd = unix_connect(path);
	return fd < 0 ? fd : agent_client_from_fd(fd, out);
}

/* Reads the device's one-line answer byte by byte, so that nothing of the
 * agent's first frame is consumed with it. */
static int read_line(int fd, char *buf, size_t n)
{
	size_t len = 0;
	while (len + 1 < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, HANDSHAKE_TIMEOUT_MS);
		if (pr == 0)
			return -ETIMEDOUT;
		if (pr < 0 && errno != EINTR)
			return -errno;
		ssize_t r = read(fd, buf + len, 1);
		if (r == 0)
			return -ECONNREFUSED;
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (r == 1 && buf[len++] == '\n') {
			buf[len - 1] = 0;
			return 0;
		}
	}
	return -EPROTO;
}

int agent_vsock_uds_connect(const char *uds_path, uint32_t port)
{
	char line[64];
	int fd = unix_connect(uds_path);
	if (fd < 0)
		return fd;
	int n = snprintf(line, sizeof(line), "CONNECT %u\n", port);
	int rc = send(fd, line, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -EIO;
	if (rc == 0)
		rc = read_line(fd, line, sizeof(line));
	if (rc == 0 && strncmp(line, "OK ", 3) != 0)
		rc = -ECONNREFUSED;   /* nobody listens on that guest port */
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int agent_client_connect_vsock_uds(const char *uds_path, uint32_t port, struct agent_client **out)
{
	*out = NULL;
	int fd = agent_vsock_uds_connect(uds_path, port);
	return fd < 0 ? fd : agent_client_from_fd(fd, out);
}

void agent_client_close(struct agent_client *c)
{
	if (!c)
		return;
	ap_conn_close(c->conn);
	free(c);
}

int agent_ping(struct agent_client *c, struct agent_ping *p)
{
	struct ap_frame f;
	struct ap_rd r;
	uint32_t chan = c->next_chan++;
	int rc = ap_conn_send(c->conn, AP_PING, chan, NULL, 0) ?: expect(c, chan, AP_PONG, &f);
	if (rc)
		return rc;
	ap_rd_init(&r, f.p, f.h.len);
	if (ap_get_u64(&r, &p->uptime_ms) || ap_get_u64(&r, &p->agent_uptime_ms))
		return fail(c, -EPROTO, "malformed pong from the agent");
	ap_text(f.p + 16, f.h.len - 16, p->version, sizeof(p->version));
	return 0;
}

static int power(struct agent_client *c, uint16_t type)
{
	struct ap_frame f;
	uint32_t chan = c->next_chan++;
	return ap_conn_send(c->conn, type, chan, NULL, 0) ?: expect(c, chan, AP_OK, &f);
}

int agent_trust_ca(struct agent_client *c, const char *pem)
{
	struct ap_frame f;
	size_t len = strlen(pem);
	uint32_t chan = c->next_chan++;

	if (c->minor < 1)
		return fail(c, -EOPNOTSUPP, "the guest agent (%s) predates protocol 1.1: it cannot "
					    "install a CA certificate", c->version);
	if (len == 0 || len > AP_MAX_PAYLOAD)
		return fail(c, -EINVAL, "a CA certificate of %zu bytes", len);
	return ap_conn_send(c->conn, AP_TRUST, chan, pem, len) ?: expect(c, chan, AP_OK, &f);
}

int agent_shutdown(struct agent_client *c) { return power(c, AP_SHUTDOWN); }

void agent_client_set_timeout(struct agent_client *c, int ms)
{
	c->timeout_ms = ms;
	c->conn->stall_ms = ms;
}

int agent_fixup(struct agent_client *c, const struct ap_fixup_req *q, uint32_t *done)
{
	struct ap_frame f;
	struct ap_rd r;
	struct ap_wr w;
	uint32_t chan = c->next_chan++;
	int rc;

	ap_wr_init(&w);
	ap_fixup_req_encode(&w, q);
	rc = ap_wr_status(&w) ?: ap_conn_send(c->conn, AP_FIXUP, chan, w.p, w.len);
	explicit_bzero(w.p, w.len);
	ap_wr_free(&w);
	if (rc || (rc = expect(c, chan, AP_OK, &f)))
		return rc;
	ap_rd_init(&r, f.p, f.h.len);
	if (ap_get_u32(&r, done))
		return fail(c, -EPROTO, "malformed fixup reply from the agent");
	return 0;
}
int agent_reboot(struct agent_client *c) { return power(c, AP_REBOOT); }

/* ---- exec ---- */

struct run {
	struct agent_client *c;
	const struct agent_exec_opts *o;
	struct agent_exit *x;
	uint32_t chan;
	bool started, done, stdin_open, ctl_open;
	uint64_t stdin_credit;
	uint32_t consumed;
};

static int send_u32(struct run *r, uint16_t type, uint32_t v)
{
	uint8_t b[4] = { v, v >> 8, v >> 16, v >> 24 };
	return ap_conn_send(r->c->conn, type, r->chan, b, 4);
}

/* Blocking write to a caller's fd, even if it happens to be non-blocking. */
static int write_out(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			poll(&pf, 1, -1);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int exec_frame(struct run *r, const struct ap_frame *f)
{
	struct ap_rd rd;
	struct ap_exit ex;
	uint32_t v;
	struct agent_client *c = r->c;
	ap_rd_init(&rd, f->p, f->h.len);
	if (f->h.type == AP_ERROR && f->h.chan == 0)
		return take_error(c, f);   /* the agent ends the session: say why */
	if (f->h.chan != r->chan)
		return fail(c, -EPROTO, "agent sent frame type %u on channel %u", f->h.type, f->h.chan);
	switch (f->h.type) {
	case AP_ERROR:
		return take_error(c, f);
	case AP_STARTED:
		if (r->started || ap_get_u32(&rd, &v))
			return fail(c, -EPROTO, "malformed started frame");
		r->started = true;
		r->x->pid = (pid_t)v;
		return 0;
	case AP_STDOUT:
	case AP_STDERR: {
		int fd = f->h.type == AP_STDOUT ? r->o->stdout_fd : r->o->stderr_fd;
		if (!r->started)
			return fail(c, -EPROTO, "output before the command started");
		/* A local write failure (closed pipe) drops output but keeps
		 * the command's status coming. */
		if (fd >= 0 && f->h.len)
			write_out(fd, f->p, f->h.len);
		r->consumed += f->h.len;
		if (r->consumed >= GRANT_BATCH) {
			int rc = send_u32(r, AP_WINDOW, r->consumed);
			r->consumed = 0;
			return rc;
		}
		return 0;
	}
	case AP_WINDOW:
		if (f->h.len != 4 || ap_get_u32(&rd, &v) || r->stdin_credit + v > AP_MAX_WINDOW)
			return fail(c, -EPROTO, "malformed window frame");
		r->stdin_credit += v;
		return 0;
	case AP_EXIT:
		if (ap_exit_decode(f->p, f->h.len, &ex))
			return fail(c, -EPROTO, "malformed exit frame");
		r->x->signaled = ex.kind == AP_KILLED;
		r->x->core = ex.core;
		r->x->code = ex.code;
		r->done = true;
		return 0;
	default:
		return fail(c, -EPROTO, "unexpected frame type %u during exec", f->h.type);
	}
}

static int pump_stdin(struct run *r)
{
	uint8_t buf[32 * 1024];
	size_t want = r->stdin_credit < sizeof(buf) ? (size_t)r->stdin_credit : sizeof(buf);
	ssize_t n = read(r->o->stdin_fd, buf, want);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		r->stdin_open = false;
		return ap_conn_send(r->c->conn, AP_STDIN_EOF, r->chan, NULL, 0);
	}
	r->stdin_credit -= (uint64_t)n;
	return ap_conn_send(r->c->conn, AP_STDIN, r->chan, buf, (size_t)n);
}

static int pump_ctl(struct run *r)
{
	struct agent_ctl m;
	ssize_t n = read(r->o->ctl_fd, &m, sizeof(m));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n != sizeof(m)) {
		r->ctl_open = false;
		return 0;
	}
	if (m.kind == CTL_RESIZE) {
		uint8_t b[4] = { m.a, m.a >> 8, m.b, m.b >> 8 };
		return ap_conn_send(r->c->conn, AP_RESIZE, r->chan, b, 4);
	}
	if (m.kind == CTL_SIGNAL)
		return send_u32(r, AP_SIGNAL, m.a);
	return 0;
}

static int exec_request(struct agent_client *c, const struct agent_exec_opts *o, uint32_t chan)
{
	struct ap_wr w;
	ap_wr_init(&w);
	for (size_t i = 0; o->argv[i]; i++)
		ap_put_tlv_str(&w, AP_T_ARG, o->argv[i]);
	for (size_t i = 0; o->env && o->env[i]; i++)
		ap_put_tlv_str(&w, AP_T_ENV, o->env[i]);
	if (o->cwd)
		ap_put_tlv_str(&w, AP_T_CWD, o->cwd);
	if (o->user)
		ap_put_tlv_str(&w, AP_T_USER, o->user);
	if (o->term)
		ap_put_tlv_str(&w, AP_T_TERM, o->term);
	if (o->pty) {
		uint8_t b[4] = { o->rows, o->rows >> 8, o->cols, o->cols >> 8 };
		ap_put_tlv(&w, AP_T_PTY, b, 4);
	}
	int rc = ap_wr_status(&w);
	if (rc == 0 && w.len > AP_MAX_PAYLOAD)
		rc = fail(c, -E2BIG, "argv and environment exceed %d bytes", AP_MAX_PAYLOAD);
	if (rc == 0)
		rc = ap_conn_send(c->conn, AP_EXEC, chan, w.p, w.len);
	ap_wr_free(&w);
	return rc;
}

static int exec_loop(struct run *r)
{
	struct ap_conn *conn = r->c->conn;
	int rc = 0;
	while (rc == 0 && !r->done) {
		bool in = r->stdin_open && r->started && r->stdin_credit > 0 && ap_conn_pending(conn) < 256 * 1024;
		struct pollfd p[3] = {
			{ .fd = conn->fd, .events = POLLIN | (ap_conn_pending(conn) ? POLLOUT : 0) },
			{ .fd = in ? r->o->stdin_fd : -1, .events = POLLIN },
			{ .fd = r->ctl_open && r->started ? r->o->ctl_fd : -1, .events = POLLIN },
		};
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return fail(r->c, -errno, "poll: %s", strerror(errno));
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int filled = ap_conn_fill(conn);
			struct ap_frame f;
			int fr;
			/* Frames already received count even if the agent closed
			 * right after them (its last word may be an error). */
			while (rc == 0 && !r->done && (fr = ap_conn_next(conn, &f)) != 0)
				rc = fr < 0 ? fail(r->c, -EPROTO, "malformed frame header from the agent")
					    : exec_frame(r, &f);
			if (rc == 0 && !r->done && filled < 0)
				return fail(r->c, filled, "the agent closed the connection during exec");
		}
		if (rc == 0 && p[1].revents)
			rc = pump_stdin(r);
		if (rc == 0 && p[2].revents)
			rc = pump_ctl(r);
		if (rc == 0)
			rc = ap_conn_flush(conn);
	}
	return rc;
}

int agent_exec(struct agent_client *c, const struct agent_exec_opts *o, struct agent_exit *x)
{
	struct run r = { .c = c, .o = o, .x = x, .chan = c->next_chan++,
			 .stdin_open = o->stdin_fd >= 0, .ctl_open = o->ctl_fd >= 0,
			 .stdin_credit = AP_INITIAL_WINDOW };
	memset(x, 0, sizeof(*x));
	if (!o->argv || !o->argv[0])
		return fail(c, -EINVAL, "exec: empty argv");
	int rc = exec_request(c, o, r.chan);
	if (rc == 0 && !r.stdin_open)
		rc = ap_conn_send(c->conn, AP_STDIN_EOF, r.chan, NULL, 0);
	if (rc == 0)
		rc = exec_loop(&r);
	return rc;
}

int agent_ctl_resize(int wfd, uint16_t rows, uint16_t cols)
{
	struct agent_ctl m = { .kind = CTL_RESIZE, .a = rows, .b = cols };
	return write(wfd, &m, sizeof(m)) == sizeof(m) ? 0 : -EIO;
}

int agent_ctl_signal(int wfd, int sig)
{
	struct agent_ctl m = { .kind = CTL_SIGNAL, .a = (uint32_t)sig };
	return write(wfd, &m, sizeof(m)) == sizeof(m) ? 0 : -EIO;
}

/* ---- trees ---- */

static int path_request(struct agent_client *c, uint16_t type, uint32_t chan, const char *path, const char *user)
{
	struct ap_wr w;
	ap_wr_init(&w);
	ap_put_tlv_str(&w, AP_T_PATH, path);
	if (user)
		ap_put_tlv_str(&w, AP_T_USER, user);
	int rc = ap_wr_status(&w);
	if (rc == 0 && strlen(path) > AP_MAX_PATH)
		rc = fail(c, -ENAMETOOLONG, "%s: path too long", path);
	if (rc == 0)
		rc = ap_conn_send(c->conn, type, chan, w.p, w.len);
	ap_wr_free(&w);
	return rc;
}

int agent_put_tree(struct agent_client *c, const char *local_path, const char *remote_dir,
		   const char *user, struct ap_tree_stats *st)
{
	struct ap_frame f;
	char err[320];
	uint32_t chan = c->next_chan++;
	int rc = path_request(c, AP_PUT, chan, remote_dir, user) ?: expect(c, chan, AP_OK, &f);
	if (rc)
		return rc;
	int local = ap_tree_send(c->conn, chan, local_path, st, err, sizeof(err));
	if (local) {
		/* End the stream with counts that cannot match, so the agent
		 * stops and answers; the local error is what we report. */
		uint8_t end[12] = { 0xff, 0xff, 0xff, 0xff };
		ap_conn_send(c->conn, AP_TREE_END, chan, end, sizeof(end));
	}
	rc = expect(c, chan, AP_OK, &f);
	if (local)
		return fail(c, local, "put: %s", err);
	if (rc)
		return rc;
	struct ap_rd r;
	uint32_t entries;
	uint64_t bytes;
	ap_rd_init(&r, f.p, f.h.len);
	if (ap_get_u32(&r, &entries) || ap_get_u64(&r, &bytes))
		return fail(c, -EPROTO, "malformed put reply");
	if (entries != st->entries || bytes != st->bytes)
		return fail(c, -EIO, "put: agent stored %u entries/%llu bytes of %u/%llu", entries,
			    (unsigned long long)bytes, st->entries, (unsigned long long)st->bytes);
	return 0;
}

int agent_get_tree(struct agent_client *c, const char *remote_path, const char *local_dir,
		   const struct gw_opts *o, struct ap_tree_stats *st)
{
	struct ap_tree_writer w;
	struct ap_frame f;
	uint32_t chan = c->next_chan++;
	memset(st, 0, sizeof(*st));
	int rc = path_request(c, AP_GET, chan, remote_path, NULL);
	if (rc)
		return rc;
	int local = ap_tw_open(&w, local_dir, o);
	for (;;) {
		rc = recv_frame(c, &f, c->timeout_ms);
		if (rc)
			break;
		if (f.h.chan != chan) {
			rc = fail(c, -EPROTO, "unexpected frame on channel %u during get", f.h.chan);
			break;
		}
		if (f.h.type == AP_ERROR) {
			rc = take_error(c, &f);
			break;
		}
		if (f.h.type < AP_ENTRY || f.h.type > AP_TREE_END) {
			rc = fail(c, -EPROTO, "unexpected frame type %u during get", f.h.type);
			break;
		}
		/* After a local failure, read on to the end so the session
		 * stays usable, then report it. */
		int s = local ? 0 : ap_tw_frame(&w, &f);
		if (s < 0)
			local = s;
		if (s == 1 || f.h.type == AP_TREE_END)
			break;
	}
	ap_tw_close(&w);
	*st = w.st;
	if (rc == 0 && local)
		rc = fail(c, local, "get: %s", w.err);
	return rc;
}
