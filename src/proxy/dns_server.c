/* The sandbox's DNS server: every question is answered here, from policy
 * and the synthetic address table, and nothing is ever asked of a real
 * resolver.  So a guest cannot move data out through the names it looks up
 * (a query for <secret>.attacker.example reaches no one), and a name the
 * policy does not allow does not even get an address.
 *
 *   allowed name, A        one synthetic A record, TTL EGRESS_DNS_TTL
 *   (or `ask` name)        (the person is asked at connect, not here)
 *   allowed name, other    NOERROR with no records ("NODATA"): the sandbox
 *                          has IPv4 synthetic addresses only, and no TXT,
 *                          MX, ... data exists for it to see
 *   denied or unknown      REFUSED (not NXDOMAIN, which claims the name does
 *                          not exist and is cached as such: an approval
 *                          given later must take effect at once)
 *   malformed              FORMERR / NOTIMP; a message without an id, or a
 *                          response, is dropped
 * Every query is audited as "net.dns". */
#include "proxy/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "proxy/dns.h"
#include "proxy/proxy_int.h"

/* Short, so that a name whose rule is removed stops working soon in the
 * guest; the address itself never changes for the sandbox's life. */
#define EGRESS_DNS_TTL 60
/* A TCP DNS message is at most 65535 bytes (2-byte length). */
#define DNS_STREAM_MAX 65535

static const char *qtype_name(uint16_t t, char *buf, size_t len)
{
	static const struct { uint16_t t; const char *n; } names[] = {
		{1, "A"}, {2, "NS"}, {5, "CNAME"}, {6, "SOA"}, {10, "NULL"}, {12, "PTR"},
		{15, "MX"}, {16, "TXT"}, {28, "AAAA"}, {33, "SRV"}, {64, "SVCB"},
		{65, "HTTPS"}, {255, "ANY"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (names[i].t == t)
			return names[i].n;
	snprintf(buf, len, "TYPE%u", t);
	return buf;
}

static const char *rcode_name(int rcode)
{
	static const char *const names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"};

	return rcode >= 0 && rcode < (int)ARRAY_SIZE(names) ? names[rcode] : "DROPPED";
}

/* The query's audit record, or NULL when nobody listens (or no memory). */
static cJSON *query_record(const struct egress_ctx *ctx, const struct dns_query *q, bool parsed,
			   const char *decision, const char *rule, int rcode, const uint8_t *addr)
{
	char tbuf[16], abuf[INET_ADDRSTRLEN];
	cJSON *d;

	if (!ctx->audit || !(d = cJSON_CreateObject()))
		return NULL;
	if (parsed) {
		cJSON_AddStringToObject(d, "name", q->name);
		cJSON_AddStringToObject(d, "qtype", qtype_name(q->qtype, tbuf, sizeof(tbuf)));
	}
	cJSON_AddStringToObject(d, "decision", decision);
	if (rule)
		cJSON_AddStringToObject(d, "rule", rule);
	cJSON_AddStringToObject(d, "rcode", rcode_name(rcode));
	if (addr && inet_ntop(AF_INET, addr, abuf, sizeof(abuf)))
		cJSON_AddStringToObject(d, "address", abuf);
	return d;
}

/* The answer to a message that did not parse (or is to be dropped). */
static int answer_malformed(const struct egress_ctx *ctx, const uint8_t *msg, size_t len, int rcode,
			   uint8_t *out, size_t outlen, cJSON **rec)
{
	*rec = query_record(ctx, NULL, false, rcode < 0 ? "dropped" : "malformed", NULL, rcode, NULL);
	if (rcode < 0)
		return -EBADMSG;
	return dns_build_error(msg, len, rcode, out, outlen);
}

/* egress_dns_answer, with the audit record handed back (*rec, maybe NULL)
 * for the caller to send once the answer is out. */
static int answer(const struct egress_ctx *ctx, const uint8_t *msg, size_t len, uint8_t *out,
		  size_t outlen, cJSON **rec)
{
	struct dns_query q;
	char rule[POLICY_NAME_MAX + 300];
	enum policy_action a;
	uint8_t addr[4];
	const uint8_t *ans = NULL;
	int rcode, err;

	if (dns_parse_query(msg, len, &q, &rcode))
		return answer_malformed(ctx, msg, len, rcode, out, outlen, rec);
	/* An `ask` name is answered at once, like an allowed one, and the
	 * person is asked when the guest connects (the proxy holds that
	 * connection): a resolver gives up after 5-10 s, long before a person
	 * answers.  The answer is a synthetic address, so nothing leaves the
	 * host, and the address only leads to the proxy, which asks. */
	a = policy_decide(ctx->policy, q.name, 0, rule, sizeof(rule));
	rcode = a != POLICY_DENY ? DNS_NOERROR : DNS_REFUSED;
	if (a != POLICY_DENY && q.qtype == DNS_TYPE_A) {
		char norm[POLICY_NAME_MAX + 1];
		uint32_t ip;
		/* policy_decide did not deny it, so it normalises. */
		if (policy_normalise_name(q.name, norm, sizeof(norm)) ||
		    names_assign(ctx->names, norm, &ip)) {
			rcode = DNS_SERVFAIL; /* the range is used up */
		} else {
			uint32_t be = htonl(ip);
			memcpy(addr, &be, 4);
			ans = addr;
		}
	}
	err = dns_build_answer(&q, rcode, ans, EGRESS_DNS_TTL, out, outlen);
	*rec = query_record(ctx, &q, true, policy_action_name(a), rule, rcode, ans);
	return err;
}

int egress_dns_answer(const struct egress_ctx *ctx, const uint8_t *msg, size_t len,
		      uint8_t *out, size_t outlen)
{
	cJSON *rec;
	int n = answer(ctx, msg, len, out, outlen, &rec);

	egress_audit(ctx, "net.dns", rec);
	return n;
}

/* Reads exactly len bytes by deadline (mono_ms; 0: none): 1 when done, 0
 * on a clean EOF before the first byte, negative errno. */
static int read_until(int fd, uint8_t *buf, size_t len, uint64_t deadline)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = egress_read_until(fd, buf + got, len - got, deadline);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return got ? -ECONNRESET : 0;
		got += (size_t)n;
	}
	return 1;
}

/* Writes the whole answer.  MSG_NOSIGNAL: a guest that hangs up before its
 * answer must not raise SIGPIPE in the supervisor (a pipe, for tests, falls
 * back to write). */
static int send_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ENOTSOCK)
			return write_all(fd, buf, len);
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int serve_one(const struct egress_ctx *ctx, int fd, uint8_t *in)
{
	uint8_t out[2 + DNS_MSG_MAX];
	cJSON *rec;
	size_t len;
	int r, n;

	uint64_t deadline = ctx->idle_timeout_ms > 0 ? mono_ms() + (uint64_t)ctx->idle_timeout_ms : 0;

	/* A stream may wait for its next message as long as the guest likes
	 * (its own slot), but a message once begun must arrive whole in time. */
	if ((r = read_until(fd, in, 1, deadline)) <= 0)
		return r;
	deadline = egress_deadline(ctx);
	if ((r = read_until(fd, in + 1, 1, deadline)) <= 0)
		return r ? r : -ECONNRESET;
	len = (size_t)in[0] << 8 | in[1];
	if (len && (r = read_until(fd, in, len, deadline)) <= 0)
		return r ? r : -ECONNRESET;
	n = answer(ctx, in, len, out + 2, sizeof(out) - 2, &rec);
	if (n < 0) {
		egress_audit(ctx, "net.dns", rec);
		return 1; /* dropped: nothing to say to it */
	}
	out[0] = (uint8_t)(n >> 8);
	out[1] = (uint8_t)n;
	r = send_all(fd, out, (size_t)n + 2);
	/* Recorded once the guest has its answer: the supervisor writes the
	 * first record of a kind with an fdatasync (3-14 ms here), which a
	 * new name's first lookup would otherwise wait for. */
	egress_audit(ctx, "net.dns", rec);
	return r ? r : 1;
}

int egress_dns_serve(const struct egress_ctx *ctx, int fd)
{
	uint8_t *in = malloc(DNS_STREAM_MAX);
	int r = -ENOMEM;

	if (in) {
		while ((r = serve_one(ctx, fd, in)) > 0)
			;
	}
	free(in);
	close(fd);
	return r;
}
