/* What every forwarded connection is held to, shared by the relay
 * (proxy.c) and interception (intercept.c), which both call down here:
 * the request rules and the audit hook (proxy_int.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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
