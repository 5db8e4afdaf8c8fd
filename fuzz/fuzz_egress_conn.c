/* libFuzzer target: one whole guest connection through the egress proxy
 * (src/proxy/proxy.c): the K8E1 header, the first-bytes checks (TLS
 * ClientHello / HTTP head against the name) and the plain-HTTP request
 * filter of the relay.  The first input byte picks the header (synthetic
 * address of the allowed name on port 80 or 443, an unassigned synthetic
 * address, IPv6, or the input's own bytes as a header); the rest is what
 * the guest sends, then EOF.  Upstream is a socketpair that absorbs what
 * is relayed and sends nothing.  Checks: no crash, no sanitizer report,
 * and what reaches upstream is never more than the guest sent. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy/egress.h"

#define NAME "api.test.example"
#define INPUT_MAX (32 * 1024)   /* stays inside the socket buffers */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct egress_ctx ctx;
static int upstream_peer = -1;
static size_t relayed;

static void audit_drop(void *arg, const char *type, cJSON *d)
{
	cJSON *up = cJSON_GetObjectItem(d, "bytes_up");

	relayed = cJSON_IsNumber(up) ? (size_t)up->valuedouble : 0;
	cJSON_Delete(d);
}

static int upstream(void *arg, const char *name, uint16_t port)
{
	int sp[2];

	if (strcmp(name, NAME) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		abort();
	shutdown(sp[0], SHUT_WR);   /* the server says nothing, then EOF */
	upstream_peer = sp[0];
	return sp[1];
}

static void init(void)
{
	struct policy_error perr;
	struct policy *p;
	struct names *n;
	uint32_t a;

	if (ctx.policy)
		return;
	if (policy_new(&p) || policy_add_text(p, "allow " NAME "\n", strlen(NAME) + 7, "fuzz", &perr) ||
	    names_new(&n) || names_assign(n, NAME, &a))
		abort();
	ctx = (struct egress_ctx){.sandbox = "fuzz", .policy = p, .names = n, .audit = audit_drop,
				  .connect_upstream = upstream, .idle_timeout_ms = 200};
}

/* A header for selector sel (input bytes as header: case 4, by the caller). */
static size_t header(uint8_t sel, uint8_t *h)
{
	uint32_t be = htonl(NAMES_BASE + 1);

	memcpy(h, "K8E1\x04\x00\x00\x50", 8);
	if (sel % 5 == 1)
		h[6] = 1, h[7] = 0xbb;    /* 443 */
	if (sel % 5 == 2)
		be = htonl(NAMES_BASE + 77);   /* never handed out */
	if (sel % 5 == 3) {
		h[4] = 6;
		memset(h + 8, 0, 16);
		return 24;
	}
	memcpy(h + 8, &be, 4);
	return 12;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t h[EGRESS_HDR_MAX], sel;
	size_t hlen;
	int sp[2];

	if (size < 1 || size > INPUT_MAX)
		return 0;
	init();
	sel = data[0];
	data++;
	size--;
	if (sel % 5 == 4) {
		hlen = size < EGRESS_HDR_MAX ? size : EGRESS_HDR_MAX;
		memcpy(h, data, hlen);
		data += hlen;
		size -= hlen;
	} else {
		hlen = header(sel, h);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		abort();
	relayed = 0;
	if ((hlen && write(sp[0], h, hlen) != (ssize_t)hlen) ||
	    (size && write(sp[0], data, size) != (ssize_t)size))
		abort();
	shutdown(sp[0], SHUT_WR);
	egress_connect_serve(&ctx, sp[1]);
	/* (with the input's own header, its bytes past a short header are
	 * stream too: hence hlen + size) */
	if (relayed > hlen + size)
		abort();
	close(sp[0]);
	if (upstream_peer >= 0)
		close(upstream_peer);
	upstream_peer = -1;
	return 0;
}
