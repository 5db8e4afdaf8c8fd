/* The serving side of the control socket (control.h) for an event loop:
 * many clients at once, none of which can hold the others up.
 *
 * Each client sends one request line.  It is read without blocking, bounded
 * (CONTROL_MAX_LINE) and within CTL_REQUEST_MS of the connection: a client
 * that sends half a line, or nothing, loses only its own connection.  A
 * complete request goes to the handler, which answers at once (CTL_DONE:
 * the connection is closed) or keeps the client for a later answer
 * (CTL_HOLD: a stop's end, a long operation's progress and result).  A held
 * client that hangs up is reported to gone() so that what it waited for can
 * be cancelled; the handler ends a held client with ctl_server_release.
 *
 * Only the thread that runs the loop calls these. */
#ifndef KOSA8_SUPERVISOR_CTL_SERVER_H
#define KOSA8_SUPERVISOR_CTL_SERVER_H

#include <cjson/cJSON.h>
#include <poll.h>
#include <stdint.h>

#define CTL_CLIENTS_MAX 64
#define CTL_REQUEST_MS 5000
/* Poll entries ctl_server_pollfds may fill: the listener and each client. */
#define CTL_POLLFDS (CTL_CLIENTS_MAX + 1)

enum { CTL_DONE = 0, CTL_HOLD = 1 };

struct ctl_handler {
	/* A client's request: answer on fd, return CTL_DONE or CTL_HOLD. */
	int (*request)(void *arg, int fd, const cJSON *req);
	/* A held client hung up (fd is closed right after). */
	void (*gone)(void *arg, int fd);
	void *arg;
};

struct ctl_conn {
	int fd;            /* -1: free */
	char *buf;         /* the request so far (CONTROL_MAX_LINE + 1) */
	size_t got;
	size_t len;        /* the request line's, without its newline */
	uint64_t deadline; /* for the request line */
	int held;
};

struct ctl_server {
	int listen_fd;
	struct ctl_conn conns[CTL_CLIENTS_MAX];
	const struct ctl_handler *h;
};

void ctl_server_init(struct ctl_server *s, int listen_fd, const struct ctl_handler *h);
/* The listener and every client, into p (CTL_POLLFDS entries): the count. */
int ctl_server_pollfds(const struct ctl_server *s, struct pollfd *p);
/* Serves what poll found in p (filled by ctl_server_pollfds, n entries)
 * and drops clients past their deadline. */
void ctl_server_serve(struct ctl_server *s, const struct pollfd *p, int n);
/* Milliseconds until the next request deadline (-1: none), at most cap. */
int ctl_server_timeout(const struct ctl_server *s, int cap);
/* Ends a held client: its connection is closed. */
void ctl_server_release(struct ctl_server *s, int fd);
/* Closes every client (held ones are not reported to gone()). */
void ctl_server_close(struct ctl_server *s);
/* Clients connected now (reading or held). */
int ctl_server_clients(const struct ctl_server *s);

/* {"ok":false,"error":msg} on fd; a client that does not read is the
 * client's loss (the socket does not block). */
void ctl_reply_error(int fd, const char *msg);
/* r (or {}) with "ok":true, pass_fd passed with it when >= 0; r is freed. */
void ctl_reply_ok(int fd, cJSON *r, int pass_fd);

#endif
