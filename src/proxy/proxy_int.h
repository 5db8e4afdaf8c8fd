/* What proxy.c and intercept.c share about one forwarded connection.
 * Internal to src/proxy; the public interface is egress.h. */
#ifndef KOSA8_PROXY_PROXY_INT_H
#define KOSA8_PROXY_PROXY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/egress.h"
#include "proxy/http_head.h"
#include "proxy/tls_hello.h"

/* Largest first read we hold before deciding: a whole ClientHello or HTTP
 * request head. */
#define EGRESS_FIRST_MAX (TLS_HELLO_MAX > HTTP_HEAD_MAX ? TLS_HELLO_MAX : HTTP_HEAD_MAX)

/* Everything the guest must send before the proxy can decide -- the
 * connection header, then the ClientHello or request head; the rest of an
 * intercepted TLS handshake; a DNS message once begun -- has this long in
 * all (or the idle timeout, if shorter).  A per-read timeout alone would let
 * a byte every few seconds hold a connection slot for ever.  Clients send
 * these at once. */
#define EGRESS_DECIDE_MS 15000

struct egress_conn {
	const struct egress_ctx *ctx;
	int gfd, ufd;                          /* guest side, upstream (-1: none) */
	char name[POLICY_NAME_MAX + 1];        /* normalised */
	uint16_t port;
	const char *proto;                     /* "tls", "http" */
	char seen[TLS_SNI_MAX + 1];            /* SNI or Host as the guest sent it */
	uint8_t first[EGRESS_FIRST_MAX];       /* guest bytes read before deciding */
	size_t first_len;
	uint64_t bytes_up, bytes_down;         /* payload relayed each way */
	bool intercepted;
	unsigned requests;                     /* HTTP requests checked */
	const char *reason;                    /* why it was refused or cut */
	uint64_t deadline;                     /* mono_ms: end of the current phase */
};

/* Whether seen (an SNI or Host as sent) normalises to name
 * (conn_checks.c, below both proxy.c and intercept.c). */
bool egress_same_name(const char *seen, const char *name);

/* Whether a request head may go to c's host: origin-form target (or "*"
 * for OPTIONS), a Host equal to the name, no CONNECT and no Upgrade.
 * Sets c->reason and returns -EACCES otherwise (conn_checks.c). */
int egress_check_request(struct egress_conn *c, const uint8_t *buf, const struct http_head *h);

/* Serves c after the checks, terminating the guest's TLS with the sandbox
 * CA and talking TLS upstream over c->ufd (intercept.c). */
int egress_intercept(struct egress_conn *c);

/* Reads into buf, waiting until deadline (mono_ms; 0: for ever): bytes
 * read, 0 at EOF, -ETIMEDOUT, -errno. */
ssize_t egress_read_until(int fd, void *buf, size_t len, uint64_t deadline);
/* mono_ms() + ctx's decide_ms (EGRESS_DECIDE_MS), or + its idle timeout if
 * shorter. */
uint64_t egress_deadline(const struct egress_ctx *ctx);

/* Sends an audit record of type with details (consumed; conn_checks.c). */
void egress_audit(const struct egress_ctx *ctx, const char *type, cJSON *details);

#endif
