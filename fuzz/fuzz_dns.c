/* libFuzzer target: one DNS message from the guest, as the host answers it
 * (src/proxy/dns.c, dns_server.c).  Whatever parses must have its question
 * lie inside the input and be echoed byte for byte; every answer must carry
 * the query's id, set QR, and fit DNS_MSG_MAX; anything else aborts.
 *
 *   fuzz/run.sh 60 dns */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/dns.h"
#include "proxy/egress.h"
#include "proxy/names.h"
#include "proxy/policy.h"

static struct policy *pol;
static struct names *tbl;
static struct egress_ctx ctx;

static enum policy_action ask_yes(void *arg, const char *kind, const char *name, uint16_t port)
{
	return POLICY_ALLOW;
}

static void init(void)
{
	static const char text[] = "allow *.com\nallow a.b\nask *.org\ndeny x.com\n";

	if (pol)
		return;
	if (policy_new(&pol) || policy_add_text(pol, text, strlen(text), "fuzz", NULL) ||
	    names_new(&tbl))
		abort();
	ctx = (struct egress_ctx){.sandbox = "fuzz", .policy = pol, .names = tbl, .ask = ask_yes,
				  .idle_timeout_ms = 1000};
}

static void check_answer(const uint8_t *q, size_t qlen, const uint8_t *out, int n)
{
	if (n < 0)
		return;
	if (n < 12 || n > DNS_MSG_MAX || memcmp(out, q, 2) || !(out[2] & 0x80))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t addr[4] = {198, 18, 0, 1};
	struct dns_query q;
	uint8_t out[DNS_MSG_MAX];
	int rcode, n;

	init();
	if (dns_parse_query(data, size, &q, &rcode) == 0) {
		if (rcode != 0 || q.question_len > size - 12 || strlen(q.name) > POLICY_NAME_MAX ||
		    memcmp(q.question, data + 12, q.question_len))
			abort();
		n = dns_build_answer(&q, DNS_NOERROR, q.qtype == DNS_TYPE_A ? addr : NULL, 60, out,
				     sizeof(out));
		if (n != (int)(12 + q.question_len + (q.qtype == DNS_TYPE_A ? 16 : 0)))
			abort();
		check_answer(data, size, out, n);
	} else if (rcode >= 0) {
		n = dns_build_error(data, size, rcode, out, sizeof(out));
		if (n != 12)
			abort();
		check_answer(data, size, out, n);
	}
	n = egress_dns_answer(&ctx, data, size, out, sizeof(out));
	check_answer(data, size, out, n);
	return 0;
}
