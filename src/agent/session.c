/* One host connection: the version exchange, then one request at a time.
 * A malformed frame or a frame out of place ends this session only (each
 * session is its own process). */
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agentproto/tree.h"

#define HELLO_TIMEOUT_MS 30000

static int hello(struct ap_conn *c)
{
	struct ap_frame f;
	struct ap_rd r;
	uint16_t major, minor;
	int rc = ap_conn_recv(c, &f, HELLO_TIMEOUT_MS);
	if (rc)
		return rc;
	ap_rd_init(&r, f.p, f.h.len);
	if (f.h.type != AP_HELLO || f.h.chan != 0 || ap_get_u16(&r, &major) || ap_get_u16(&r, &minor)) {
		ap_conn_send_error(c, 0, EPROTO, "expected a hello frame first");
		return -EPROTO;
	}
	if (major != AP_VERSION_MAJOR) {
		ap_conn_send_error(c, 0, EPROTONOSUPPORT,
				   "protocol version %u.%u not supported: this agent speaks %d.%d",
				   major, minor, AP_VERSION_MAJOR, AP_VERSION_MINOR);
		return -EPROTONOSUPPORT;
	}
	struct ap_wr w;
	ap_wr_init(&w);
	ap_put_u16(&w, AP_VERSION_MAJOR);
	ap_put_u16(&w, AP_VERSION_MINOR);
	ap_put_bytes(&w, AP_AGENT_VERSION, strlen(AP_AGENT_VERSION));
	rc = ap_wr_status(&w) ?: ap_conn_send(c, AP_HELLO, 0, w.p, w.len);
	ap_wr_free(&w);
	return rc;
}

static int ping(struct ap_conn *c, const struct ap_frame *f)
{
	uint64_t now = boottime_ms();
	struct ap_wr w;
	if (f->h.len)
		return -EBADMSG;
	ap_wr_init(&w);
	ap_put_u64(&w, now);
	ap_put_u64(&w, now - agent_cfg.start_ms);
	ap_put_bytes(&w, AP_AGENT_VERSION, strlen(AP_AGENT_VERSION));
	int rc = ap_wr_status(&w) ?: ap_conn_send(c, AP_PONG, f->h.chan, w.p, w.len);
	ap_wr_free(&w);
	return rc;
}

static int send_stats(struct ap_conn *c, uint32_t chan, const struct ap_tree_stats *st)
{
	uint8_t b[12];
	struct ap_wr w = { .p = b, .cap = sizeof(b) };
	ap_put_u32(&w, st->entries);
	ap_put_u64(&w, st->bytes);
	return ap_conn_send(c, AP_OK, chan, b, sizeof(b));
}

/* AP_PUT: accept (AP_OK), then apply the tree stream.  After a failure the
 * rest of the stream is read and dropped, so that the error reaches the host
 * as a reply instead of a reset connection. */
static int put(struct ap_conn *c, const struct ap_frame *req)
{
	struct ap_path_req q;
	struct agent_user u;
	struct ap_tree_writer w;
	struct ap_frame f;
	uint32_t chan = req->h.chan;
	char err[256];
	int rc = ap_path_req_decode(req->p, req->h.len, &q);
	if (rc)
		return ap_conn_send_error(c, chan, rc, "malformed put request");
	if (q.path[0] != '/') {
		rc = ap_conn_send_error(c, chan, EINVAL, "put: %s: the target must be an absolute path", q.path);
		goto out;
	}
	if (user_lookup(q.user, &u, err, sizeof(err))) {
		rc = ap_conn_send_error(c, chan, ENOENT, "%s", err);
		goto out;
	}
	/* The host's files keep their modes in the guest, special bits too. */
	struct gw_opts o = { .mode_mask = 07777, .chown = geteuid() == 0, .uid = u.uid, .gid = u.gid };
	rc = ap_tw_open(&w, q.path, &o);
	if (rc) {
		rc = ap_conn_send_error(c, chan, rc, "put: %s", w.err);
		ap_tw_close(&w);
		goto out;
	}
	rc = ap_conn_send(c, AP_OK, chan, NULL, 0);
	int state = 0;   /* 0 streaming, 1 done, <0 failed: skipping to the end */
	while (rc == 0 && state != 1) {
		rc = ap_conn_recv(c, &f, -1);
		if (rc == -EBADMSG)
			ap_conn_send_error(c, 0, EBADMSG, "malformed frame header");
		if (rc)
			break;
		if (f.h.chan != chan || f.h.type < AP_ENTRY || f.h.type > AP_TREE_END) {
			ap_conn_send_error(c, 0, EBADMSG, "frame type %u on channel %u inside a put", f.h.type, f.h.chan);
			rc = -EBADMSG;
		} else {
			if (state == 0)
				state = ap_tw_frame(&w, &f);
			if (f.h.type == AP_TREE_END)
				break;   /* the end of the stream, accepted or not */
		}
	}
	if (rc == 0)
		rc = state == 1 ? send_stats(c, chan, &w.st) : ap_conn_send_error(c, chan, state, "put: %s", w.err);
	ap_tw_close(&w);
out:
	ap_path_req_free(&q);
	return rc;
}

static int get(struct ap_conn *c, const struct ap_frame *req)
{
	struct ap_path_req q;
	struct ap_tree_stats st;
	char err[320];
	int rc = ap_path_req_decode(req->p, req->h.len, &q);
	if (rc)
		return ap_conn_send_error(c, req->h.chan, rc, "malformed get request");
	if (q.path[0] != '/')
		rc = -EINVAL;
	else
		rc = ap_tree_send(c, req->h.chan, q.path, &st, err, sizeof(err));
	if (rc == -EINVAL && q.path[0] != '/')
		snprintf(err, sizeof(err), "%s: the source must be an absolute path", q.path);
	if (rc)
		rc = ap_conn_send_error(c, req->h.chan, rc, "get: %s", err);
	ap_path_req_free(&q);
	return rc;
}

static int power(struct ap_conn *c, const struct ap_frame *f)
{
	if (f->h.len)
		return -EBADMSG;
	int rc = ap_conn_send(c, AP_OK, f->h.chan, NULL, 0) ?: ap_conn_flush_all(c);
	/* The listening process (PID 1 in the guest) does the actual work. */
	kill(agent_cfg.main_pid, f->h.type == AP_SHUTDOWN ? SIGUSR1 : SIGUSR2);
	return rc ? rc : -ESHUTDOWN;
}

/* Stream frames the host sent before it learnt that its command had ended
 * (or never started) are late, not malformed. */
static bool late_stream_frame(const struct ap_frame *f, uint32_t done_chan)
{
	uint16_t t = f->h.type;
	return f->h.chan == done_chan && done_chan != 0 &&
	       (t == AP_STDIN || t == AP_STDIN_EOF || t == AP_WINDOW || t == AP_RESIZE || t == AP_SIGNAL);
}

static int dispatch(struct ap_conn *c, const struct ap_frame *f, uint32_t *done_chan)
{
	if (late_stream_frame(f, *done_chan))
		return 0;
	switch (f->h.type) {
	case AP_PING:
		return ping(c, f);
	case AP_EXEC:
		if (!f->h.chan)
			return -EBADMSG;
		*done_chan = f->h.chan;
		return exec_run(c, f->h.chan, f->p, f->h.len);
	case AP_PUT:
		return f->h.chan ? put(c, f) : -EBADMSG;
	case AP_GET:
		return f->h.chan ? get(c, f) : -EBADMSG;
	case AP_TRUST:
		return f->h.chan ? trust_ca(c, f) : -EBADMSG;
	case AP_SHUTDOWN:
	case AP_REBOOT:
		return power(c, f);
	case AP_FIXUP:
		return f->h.chan ? fixup_run(c, f->h.chan, f->p, f->h.len) : -EBADMSG;
	default:
		return -EBADMSG;
	}
}

void session_run(int fd)
{
	struct ap_conn *c;
	struct ap_frame f;
	if (ap_conn_open(&c, fd)) {
		close(fd);
		return;
	}
	uint32_t done_chan = 0;
	int rc = hello(c);
	while (rc == 0) {
		rc = ap_conn_recv(c, &f, -1);
		if (rc == -EBADMSG)
			ap_conn_send_error(c, 0, EBADMSG, "malformed frame header");
		if (rc)
			break;
		uint16_t type = f.h.type;
		rc = dispatch(c, &f, &done_chan);
		if (rc == -EBADMSG && type != AP_EXEC)
			ap_conn_send_error(c, 0, EBADMSG, "unexpected or malformed frame (type %u)", type);
		if (rc == 0)
			rc = ap_conn_flush(c);
	}
	/* Best effort, never blocking: a final error frame is small enough
	 * for the socket buffer. */
	if (!c->eof)
		ap_conn_flush(c);
	ap_conn_close(c);
}
