#include "supervisor/ctl_server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jsonl.h"
#include "common/util.h"
#include "supervisor/control.h"

void ctl_reply_error(int fd, const char *msg)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddBoolToObject(r, "ok", false);
	cJSON_AddStringToObject(r, "error", msg);
	control_send(fd, r, -1);
	cJSON_Delete(r);
}

void ctl_reply_ok(int fd, cJSON *r, int pass_fd)
{
	if (!r)
		r = cJSON_CreateObject();
	cJSON_AddBoolToObject(r, "ok", true);
	control_send(fd, r, pass_fd);
	cJSON_Delete(r);
}

void ctl_server_init(struct ctl_server *s, int listen_fd, const struct ctl_handler *h)
{
	memset(s, 0, sizeof(*s));
	s->listen_fd = listen_fd;
	s->h = h;
	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		s->conns[i].fd = -1;
}

static void drop(struct ctl_conn *c)
{
	close(c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

int ctl_server_clients(const struct ctl_server *s)
{
	int n = 0;

	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		n += s->conns[i].fd >= 0;
	return n;
}

int ctl_server_pollfds(const struct ctl_server *s, struct pollfd *p)
{
	int n = 0;

	p[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
	/* Held clients too: their hang-up is what cancels what they wait for. */
	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		if (s->conns[i].fd >= 0)
			p[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
	return n;
}

static struct ctl_conn *find(struct ctl_server *s, int fd)
{
	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		if (s->conns[i].fd == fd && fd >= 0)
			return &s->conns[i];
	return NULL;
}

static void accept_one(struct ctl_server *s)
{
	struct ctl_conn *c = NULL;
	int fd = control_accept(s->listen_fd);

	if (fd < 0)
		return;
	for (int i = 0; i < CTL_CLIENTS_MAX && !c; i++)
		if (s->conns[i].fd < 0)
			c = &s->conns[i];
	/* Non-blocking: neither a slow reader nor a slow writer stops the loop. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 || !c ||
	    !(c->buf = malloc(CONTROL_MAX_LINE + 1))) {
		ctl_reply_error(fd, c ? "out of memory" : "too many clients at once: try again");
		close(fd);
		return;
	}
	c->fd = fd;
	c->got = 0;
	c->held = 0;
	c->deadline = mono_ms() + CTL_REQUEST_MS;
}

/* The request line is complete: parse it and hand it over. */
static void request(struct ctl_server *s, struct ctl_conn *c)
{
	cJSON *req;
	const char *why;
	int fd = c->fd;
	int err = jsonl_parse(c->buf, c->len, CONTROL_MAX_LINE, &req, &why);

	free(c->buf);
	c->buf = NULL;
	if (err) {
		ctl_reply_error(fd, why);
		drop(c);
		return;
	}
	c->held = 1; /* the handler may release it before it returns */
	if (s->h->request(s->h->arg, fd, req) == CTL_DONE && (c = find(s, fd)))
		drop(c);
	cJSON_Delete(req);
}

static void readable(struct ctl_server *s, struct ctl_conn *c)
{
	char scrap[256];
	ssize_t n;

	if (c->held) {
		/* Anything after the request is ignored; end of file is a hang-up. */
		n = read(c->fd, scrap, sizeof(scrap));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			int fd = c->fd;
			s->h->gone(s->h->arg, fd);
			if ((c = find(s, fd)))
				drop(c);
		}
		return;
	}
	n = read(c->fd, c->buf + c->got, CONTROL_MAX_LINE - c->got);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		drop(c);
		return;
	}
	char *nl = memchr(c->buf + c->got, '\n', (size_t)n);
	c->got += (size_t)n;
	if (nl) {
		c->len = (size_t)(nl - c->buf);
		request(s, c);
	} else if (c->got == CONTROL_MAX_LINE) {
		ctl_reply_error(c->fd, "request line too long");
		drop(c);
	}
}

void ctl_server_serve(struct ctl_server *s, const struct pollfd *p, int n)
{
	uint64_t now;

	for (int i = 1; i < n; i++) {
		struct ctl_conn *c = find(s, p[i].fd);
		if (c && (p[i].revents & (POLLIN | POLLHUP | POLLERR)))
			readable(s, c);
	}
	if (n > 0 && (p[0].revents & POLLIN))
		accept_one(s);
	now = mono_ms();
	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		if (s->conns[i].fd >= 0 && !s->conns[i].held && now >= s->conns[i].deadline)
			drop(&s->conns[i]);
}

int ctl_server_timeout(const struct ctl_server *s, int cap)
{
	uint64_t now = mono_ms();
	int t = cap;

	for (int i = 0; i < CTL_CLIENTS_MAX; i++) {
		const struct ctl_conn *c = &s->conns[i];
		if (c->fd < 0 || c->held)
			continue;
		if (c->deadline <= now)
			return 0;
		if (t < 0 || c->deadline - now < (uint64_t)t)
			t = (int)(c->deadline - now);
	}
	return t;
}

void ctl_server_release(struct ctl_server *s, int fd)
{
	struct ctl_conn *c = find(s, fd);

	if (c)
		drop(c);
}

void ctl_server_close(struct ctl_server *s)
{
	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		if (s->conns[i].fd >= 0)
			drop(&s->conns[i]);
}
