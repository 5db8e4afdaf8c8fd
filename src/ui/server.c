/* The console's HTTP side: checks, routes and responses.  A thread per
 * connection (libmicrohttpd's), bounded in number, so that a live page's
 * event stream may block while it waits for the next snapshot. */
#include "ui/ui.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "ui/action.h"
#include "ui/audit.h"
#include "ui/state.h"

#define UI_MEMORY_PER_CONNECTION (32 * 1024)  /* headers included: libmicrohttpd answers 431/413 past it */
#define UI_IDLE_SECONDS 30
#define UI_HEARTBEAT_MS 15000

struct ui {
	struct MHD_Daemon *d;
	struct ui_state *state;
	struct ui_auth auth;
	atomic_int streams;
	bool remote;        /* sandboxes in the helper machine (ui_opts) */
	char *index;        /* ui_index_html with this run's CSRF token in it */
};

/* A POST's body, gathered before it is acted on. */
struct upload {
	size_t len;
	bool too_big;
	char body[UI_BODY_MAX];
};

static void secure_headers(struct MHD_Response *r, const char *type)
{
	MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "X-Frame-Options", "DENY");
	MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r, "Content-Security-Policy",
				"default-src 'none'; script-src 'self'; style-src 'self'; "
				"connect-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'none'");
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
			       const char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
								 MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	secure_headers(r, type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status)
{
	return respond(c, status, "text/plain", "", 0);
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, cJSON *j)
{
	char *s = cJSON_PrintUnformatted(j);
	enum MHD_Result ret = s ? respond(c, status, "application/json", s, strlen(s)) : MHD_NO;

	free(s);
	cJSON_Delete(j);
	return ret;
}

/* The token was in the URL: it goes into a cookie, and the browser to "/"
 * so that the token leaves its address bar and history. */
static enum MHD_Result login(struct ui *u, struct MHD_Connection *c)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	char cookie[UI_COOKIE_NAME_MAX + UI_TOKEN_HEX + 64];
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	snprintf(cookie, sizeof(cookie), "%s=%s; Path=/; HttpOnly; SameSite=Strict", u->auth.cookie_name,
		 u->auth.token);
	secure_headers(r, "text/plain");
	MHD_add_response_header(r, "Set-Cookie", cookie);
	MHD_add_response_header(r, "Location", "/");
	ret = MHD_queue_response(c, MHD_HTTP_SEE_OTHER, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- live page: server-sent events ---- */

struct stream {
	struct ui *u;
	uint64_t gen;
	bool started;
	char *pending;          /* what is left of the last event */
	size_t len, off;
};

static void stream_next(struct stream *s)
{
	char *text;
	int err = 0;

	if (s->started)
		err = ui_state_wait(s->u->state, s->gen, UI_HEARTBEAT_MS);
	s->started = true;
	free(s->pending);
	s->pending = NULL;
	s->len = s->off = 0;
	if (err == -ESHUTDOWN)
		return;
	if (err == -ETIMEDOUT) {
		s->pending = strdup(": still here\n\n");
	} else if ((text = ui_state_get(s->u->state, &s->gen))) {
		/* cJSON's unformatted text has no newline: one data line. */
		if (asprintf(&s->pending, "event: state\ndata: %s\n\n", text) < 0)
			s->pending = NULL;
		free(text);
	}
	s->len = s->pending ? strlen(s->pending) : 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *s = cls;
	size_t n;

	if (s->off == s->len)
		stream_next(s);
	if (!s->pending)
		return MHD_CONTENT_READER_END_OF_STREAM;
	n = s->len - s->off < max ? s->len - s->off : max;
	memcpy(buf, s->pending + s->off, n);
	s->off += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	struct stream *s = cls;

	atomic_fetch_sub(&s->u->streams, 1);
	free(s->pending);
	free(s);
}

static enum MHD_Result events(struct ui *u, struct MHD_Connection *c)
{
	struct MHD_Response *r;
	struct stream *s;
	enum MHD_Result ret;

	if (atomic_fetch_add(&u->streams, 1) >= UI_STREAMS_MAX) {
		atomic_fetch_sub(&u->streams, 1);
		return refuse(c, MHD_HTTP_SERVICE_UNAVAILABLE);
	}
	if (!(s = calloc(1, sizeof(*s)))) {
		atomic_fetch_sub(&u->streams, 1);
		return MHD_NO;
	}
	s->u = u;
	if (!(r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free))) {
		stream_free(s);
		return MHD_NO;
	}
	secure_headers(r, "text/event-stream");
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- routes ---- */

static enum MHD_Result audit(struct MHD_Connection *c, bool verify)
{
	int err;
	cJSON *j = verify ? ui_audit_read(&err) : ui_audit_records(&err);

	if (!j)
		return refuse(c, err == -EBUSY ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_INTERNAL_SERVER_ERROR);
	return respond_json(c, MHD_HTTP_OK, j);
}

/* The newest snapshot, as the live pages have it. */
static enum MHD_Result state_text(struct MHD_Connection *c, struct ui *u)
{
	uint64_t gen;
	char *text = ui_state_get(u->state, &gen);
	enum MHD_Result ret;

	if (!text)
		return MHD_NO;
	ret = respond(c, MHD_HTTP_OK, "application/json", text, strlen(text));
	free(text);
	return ret;
}

static enum MHD_Result get(struct ui *u, struct MHD_Connection *c, const char *url)
{
	if (!strcmp(url, "/"))
		return respond(c, MHD_HTTP_OK, "text/html; charset=utf-8", u->index, strlen(u->index));
	if (!strcmp(url, "/app.js"))
		return respond(c, MHD_HTTP_OK, "text/javascript; charset=utf-8", ui_app_js, strlen(ui_app_js));
	if (!strcmp(url, "/app.css"))
		return respond(c, MHD_HTTP_OK, "text/css; charset=utf-8", ui_app_css, strlen(ui_app_css));
	if (!strcmp(url, "/api/state") && u->remote)
		return state_text(c, u);
	if (!strcmp(url, "/api/state"))
		return respond_json(c, MHD_HTTP_OK, ui_state_read());
	if (!strcmp(url, "/api/events"))
		return events(u, c);
	if (!strcmp(url, "/api/audit"))
		return audit(c, true);
	if (!strcmp(url, "/api/audit/records"))
		return audit(c, false);
	return refuse(c, MHD_HTTP_NOT_FOUND);
}

/* {"ok":false,"error":why} with status. */
static enum MHD_Result post_error(struct MHD_Connection *c, unsigned status, const char *why)
{
	cJSON *j = cJSON_CreateObject();

	cJSON_AddFalseToObject(j, "ok");
	cJSON_AddStringToObject(j, "error", why);
	return respond_json(c, status, j);
}

/* {"ok":true,"output":..} or the error, after the action ran. */
static enum MHD_Result post_done(struct MHD_Connection *c, int err, const char *why)
{
	cJSON *j;

	if (err)
		return post_error(c, err == -EBUSY ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_CONFLICT, why);
	j = cJSON_CreateObject();
	cJSON_AddTrueToObject(j, "ok");
	if (why[0])
		cJSON_AddStringToObject(j, "output", why);
	return respond_json(c, MHD_HTTP_OK, j);
}

static enum MHD_Result post(struct ui *u, struct MHD_Connection *c, const char *url, const struct upload *up)
{
	struct ui_ckpt_action ck;
	struct ui_action a;
	const char *bad;
	char why[600] = "";
	int err;

	if (strcmp(url, "/api/answer") && strcmp(url, "/api/checkpoint"))
		return refuse(c, MHD_HTTP_NOT_FOUND);
	if (up->too_big)
		return post_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "body too large");
	if (!strcmp(url, "/api/checkpoint")) {
		if (ui_ckpt_action_parse(up->body, up->len, &ck, &bad))
			return post_error(c, MHD_HTTP_BAD_REQUEST, bad);
		log_info("ui: %s %s from %s%s%s", ck.op, ck.sandbox, ck.checkpoint, ck.name[0] ? " as " : "",
			 ck.name);
		return post_done(c, ui_checkpoint_op(&ck, why, sizeof(why)), why);
	}
	if (ui_action_parse(up->body, up->len, &a, &bad))
		return post_error(c, MHD_HTTP_BAD_REQUEST, bad);
	err = ui_answer(a.sandbox, a.id, a.answer, u->remote, why, sizeof(why));
	return post_done(c, err, why);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *data, size_t *data_len, void **con_cls)
{
	struct ui *u = cls;
	struct upload *up = *con_cls;
	const char *why, *clen;
	struct ui_req r;

	if (up) {
		if (*data_len) {
			if (*data_len > sizeof(up->body) - up->len)
				up->too_big = true;
			else
				memcpy(up->body + up->len, data, *data_len);
			if (!up->too_big)
				up->len += *data_len;
			*data_len = 0;
			return MHD_YES;
		}
		return post(u, c, url, up);
	}
	r = (struct ui_req){
		.method = method,
		.host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"),
		.origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"),
		.cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, u->auth.cookie_name),
		.query_token = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token"),
		.csrf = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Kosa8-CSRF"),
	};
	switch (ui_check(&u->auth, &r, &why)) {
	case UI_DENY:
		log_info("ui: refused %s %s: %s", method, url, why);
		return refuse(c, MHD_HTTP_FORBIDDEN);
	case UI_ALLOW_LOGIN:
		return login(u, c);
	case UI_ALLOW:
		break;
	}
	if (strcmp(method, "POST"))
		return get(u, c, url);
	clen = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	if (clen && strtoull(clen, NULL, 10) > UI_BODY_MAX)
		return refuse(c, MHD_HTTP_CONTENT_TOO_LARGE);
	if (!(up = calloc(1, sizeof(*up))))
		return MHD_NO;
	*con_cls = up;
	return MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	free(*con_cls);
	*con_cls = NULL;
}

/* 127.0.0.1 only: with no TLS, anything wider would hand the token and
 * the approvals to whoever can watch or reach the network. */
static int listen_loopback(const struct ui_opts *o, uint16_t *port, char *why, size_t len)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(o->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int fd, one = 1;

	if (o->listen && strcmp(o->listen, "127.0.0.1") && strcasecmp(o->listen, "localhost")) {
		snprintf(why, len, "will not listen on %s: kosa8 ui has no TLS, so it listens on 127.0.0.1 only "
			 "(reach it from elsewhere through an SSH tunnel: ssh -L PORT:127.0.0.1:PORT)", o->listen);
		return -EPERM;
	}
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen)) {
		int err = -errno;
		snprintf(why, len, "cannot listen on 127.0.0.1:%u: %s", o->port, strerror(-err));
		close(fd);
		return err;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

static char *index_with_csrf(const char *csrf)
{
	const char *at = strstr(ui_index_html, "@CSRF@");
	char *s;

	if (!at || asprintf(&s, "%.*s%s%s", (int)(at - ui_index_html), ui_index_html, csrf, at + 6) < 0)
		return NULL;
	return s;
}

int ui_start(const struct ui_opts *o, struct ui **out, char *why, size_t len)
{
	struct ui *u = calloc(1, sizeof(*u));
	uint16_t port = 0;
	int fd, err;

	snprintf(why, len, "out of memory");
	if (!u)
		return -ENOMEM;
	u->remote = o->remote;
	if ((fd = listen_loopback(o, &port, why, len)) < 0) {
		free(u);
		return fd;
	}
	if ((err = ui_auth_init(&u->auth, port)) || !(u->index = index_with_csrf(u->auth.csrf)) ||
	    (err = ui_state_start(o->notify, o->remote, &u->state))) {
		snprintf(why, len, "cannot start: %s", strerror(err ? -err : ENOMEM));
		goto fail;
	}
	u->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
				handle, u, MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)UI_CONNECTIONS_MAX,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)UI_MEMORY_PER_CONNECTION,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)UI_IDLE_SECONDS,
				MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
	if (!u->d) {
		snprintf(why, len, "libmicrohttpd would not start");
		err = -EIO;
		goto fail;
	}
	*out = u;
	return 0;
fail:
	ui_state_stop(u->state);
	ui_state_free(u->state);
	free(u->index);
	close(fd);
	free(u);
	return err ? err : -ENOMEM;
}

const struct ui_auth *ui_auth(const struct ui *u)
{
	return &u->auth;
}

void ui_stop(struct ui *u)
{
	if (!u)
		return;
	/* Wakes the event streams first: MHD_stop_daemon waits for their
	 * threads, which read the state until then. */
	ui_state_stop(u->state);
	MHD_stop_daemon(u->d);
	ui_state_free(u->state);
	free(u->index);
	free(u);
}
