/* The host side of a sandbox's network: what the supervisor runs for each
 * DNS stream and each TCP connection the guest agent forwards over vsock.
 *
 * The guest has no network device.  Its agent redirects every TCP connection
 * and every DNS query to itself and forwards them to the host (CID 2):
 *
 *   port EGRESS_DNS_PORT   one stream of DNS messages, each preceded by its
 *                          length as 2 bytes big-endian (RFC 1035 4.2.2
 *                          framing); the host answers each in order.
 *   port EGRESS_TCP_PORT   one connection per guest TCP connection: the
 *                          agent first writes the K8E1 header
 *                          (agentproto/wire.h), then the stream.
 *
 * Security never depends on the guest following this: the host looks only at
 * the destination address (which must be a synthetic one, names.h), the
 * policy for the name it maps to, and (TLS) the ClientHello's SNI or (HTTP)
 * the Host header, which must equal that name.  See docs/egress.md. */
#ifndef KOSA8_PROXY_EGRESS_H
#define KOSA8_PROXY_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "agentproto/wire.h" /* the ports and the K8E1 header */
#include "proxy/names.h"
#include "proxy/policy.h"


struct secret_set;   /* proxy/secrets.h */
struct egress_ca;    /* proxy/ca.h */
struct upstream_cache; /* proxy/upstream_cache.h */

/* Everything the DNS server and the proxy need, shared by their threads.
 * The callbacks are how the supervisor plugs in approvals and the audit log
 * (and tests plug in their own).  All pointers outlive every connection. */
struct egress_ctx {
	const char *sandbox;
	struct policy *policy;       /* thread-safe; approvals may add rules */
	struct names *names;
	struct secret_set *secrets;  /* NULL: no secrets, no TLS interception */
	struct egress_ca *ca;        /* per-sandbox CA; needed when secrets is set */

	/* Blocks until a person answers (or the wait times out): POLICY_ALLOW or
	 * POLICY_DENY.  kind is "connect" (DNS answers an `ask` name with a
	 * synthetic address without asking: see dns_server.c).  NULL: an `ask`
	 * is a deny. */
	enum policy_action (*ask)(void *arg, const char *kind, const char *name, uint16_t port);
	/* Takes ownership of details.  type is e.g. "net.dns", "net.connect". */
	void (*audit)(void *arg, const char *type, cJSON *details);
	/* Opens the upstream TCP connection for name:port.  NULL: resolve name
	 * on the host (getaddrinfo, through upstream_cache below) and connect
	 * to a public address of it.  Returns an fd or -errno. */
	int (*connect_upstream)(void *arg, const char *name, uint16_t port);
	/* Trust store for upstream TLS when intercepting (CA file); NULL: the
	 * host's default store. */
	const char *upstream_ca_file;
	void *arg;

	int idle_timeout_ms;         /* a connection idle this long is closed */
	/* What the guest sends before each decision (a connection header, a
	 * request head, a DNS message, a TLS handshake) must arrive whole
	 * within EGRESS_DECIDE_MS (proxy_int.h).  This only exists so that
	 * the deadline tests run in a second rather than 15: it can only
	 * shorten that bound (a larger value is ignored), so nothing set here
	 * lets a guest hold a connection slot longer.  Neither the policy
	 * nor sandbox.json reaches it: the supervisor leaves it 0. */
	int decide_ms;
	/* The default connector's resolutions (upstream_cache.h), one cache
	 * per sandbox; NULL: the name is resolved on every connection.  Last
	 * in the struct so that a build without it reads the rest alike
	 * (bench/egress links main's library for a before and after). */
	struct upstream_cache *upstream_cache;
};

/* Answers one DNS query (policy, approvals, synthetic address, audit).
 * Returns the answer's length in out (DNS_MSG_MAX bytes) or a negative
 * errno when the message is to be dropped.  src/proxy/dns_server.c */
int egress_dns_answer(const struct egress_ctx *ctx, const uint8_t *q, size_t qlen,
		      uint8_t *out, size_t outlen);
/* Serves one DNS stream (framing above) until EOF or error; closes fd.
 * Each query's record goes to ctx->audit after its answer is sent. */
int egress_dns_serve(const struct egress_ctx *ctx, int fd);

/* Parses the connection header.  Returns its length, 0 if more bytes are
 * needed, -EBADMSG if it is malformed.  src/proxy/proxy.c */
int egress_parse_header(const uint8_t *buf, size_t len, int *family, uint8_t addr[16],
			uint16_t *port);
/* Serves one forwarded TCP connection to its end: reads the header, maps the
 * address to its name, decides, checks SNI / Host, connects upstream (TLS
 * interception where a secret is bound to the name), relays, audits.
 * Closes fd.  Returns 0 or the negative errno that ended it. */
int egress_connect_serve(const struct egress_ctx *ctx, int fd);

#endif
