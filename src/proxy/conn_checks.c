/* What every forwarded connection is held to, shared by the relay
 * (proxy.c), interception (intercept.c) and the DNS server, which all call
 * down here: the request rules, the audit hook, and the one deadline for
 * what the guest sends before a decision (proxy_int.h). */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

#include "proxy/proxy_int.h"

void egress_audit(const struct egress_ctx *ctx, const char *type, cJSON *details)
{
	if (ctx->audit && details)
		ctx->audit(ctx->arg, type, details);
	else
		cJSON_Delete(details);
}

bool egress_same_name(const char *seen, const char *name)
{
	char norm[POLICY_NAME_MAX + 1];

	return !policy_normalise_name(seen, norm, sizeof(norm)) && !strcmp(norm, name);
}

int egress_check_request(struct egress_conn *c, const uint8_t *buf, const struct http_head *h)
{
	const char *target = (const char *)buf + h->target.off;
	char host[TLS_SNI_MAX + 1];

	c->requests++;
	if (h->method.len == 7 && !memcmp(buf + h->method.off, "CONNECT", 7)) {
		c->reason = "CONNECT request";
		return -EACCES;
	}
	/* An absolute-form target names its own host, which a server must
	 * prefer to Host (RFC 9112 3.2.2): only origin-form is let through. */
	if (target[0] != '/' && !(h->target.len == 1 && target[0] == '*')) {
		c->reason = "request target not in origin form";
		return -EACCES;
	}
	for (size_t i = 0; i < h->nfields; i++) {
		if (http_field_is(buf, h, i, "upgrade")) {
			c->reason = "protocol upgrade";
			return -EACCES;
		}
	}
	if (http_host_name(buf, h, host, sizeof(host))) {
		c->reason = "request without a usable Host";
		return -EACCES;
	}
	if (!c->seen[0])
		snprintf(c->seen, sizeof(c->seen), "%s", host);
	if (!egress_same_name(host, c->name)) {
		snprintf(c->seen, sizeof(c->seen), "%s", host);
		c->reason = "Host does not match the name";
		return -EACCES;
	}
	return 0;
}

ssize_t egress_read_until(int fd, void *buf, size_t len, uint64_t deadline)
{
	bool sock = true;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now;
		ssize_t n;
		int r;

		/* What already arrived is taken without a poll first (the
		 * guest's header and first bytes usually have). */
		if (sock) {
			n = recv(fd, buf, len, MSG_DONTWAIT);
			if (n >= 0)
				return n;
			if (errno == ENOTSOCK)
				sock = false;
			else if (errno != EAGAIN && errno != EINTR)
				return -errno;
		}
		now = deadline ? mono_ms() : 0;
		if (deadline && now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, deadline ? (int)(deadline - now) : -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		if (sock)
			continue;
		n = read(fd, buf, len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return n < 0 ? -errno : n;
	}
}

uint64_t egress_deadline(const struct egress_ctx *ctx)
{
	int ms = EGRESS_DECIDE_MS;

	/* decide_ms can only shorten the bound (egress.h says why it exists). */
	if (ctx->decide_ms > 0 && ctx->decide_ms < ms)
		ms = ctx->decide_ms;

	if (ctx->idle_timeout_ms > 0 && ctx->idle_timeout_ms < ms)
		ms = ctx->idle_timeout_ms;

	return mono_ms() + (uint64_t)ms;
}
