/* DNS as the host answers it for a sandbox: parse one query, build one
 * answer.  Nothing here sends a packet anywhere: the host never forwards a
 * guest's query; it answers from policy and the sandbox's synthetic address
 * table (names.h).
 *
 * Messages are RFC 1035 wire format, at most 512 bytes in and DNS_MSG_MAX
 * out.  The parser accepts exactly one question (QDCOUNT 1, no answer or
 * authority records; an EDNS OPT record in the additional section is
 * allowed and otherwise ignored), a standard query (QR 0, OPCODE 0), class
 * IN, and names without compression pointers in the question.  Anything
 * else gets FORMERR or NOTIMP, never a crash. */
#ifndef KOSA8_PROXY_DNS_H
#define KOSA8_PROXY_DNS_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define DNS_MSG_MAX 512
#define DNS_TYPE_A 1
#define DNS_TYPE_AAAA 28

enum dns_rcode { DNS_NOERROR = 0, DNS_FORMERR = 1, DNS_SERVFAIL = 2, DNS_NXDOMAIN = 3,
		 DNS_NOTIMP = 4, DNS_REFUSED = 5 };

struct dns_query {
	uint16_t id;
	uint16_t qtype, qclass;
	uint8_t rd;                       /* echoed back */
	char name[POLICY_NAME_MAX + 1];   /* as asked, lower-cased, no trailing dot */
	size_t question_len;              /* bytes of the question section */
	uint8_t question[POLICY_NAME_MAX + 2 + 4 + 2];
};

/* Parses msg.  0 on success; -EBADMSG if it is not a query we answer, with
 * *rcode set to what to answer (FORMERR/NOTIMP) when an answer is possible
 * (an id could be read), or to -1 when the message is to be dropped. */
int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *q, int *rcode);

/* Builds the answer to q into out (DNS_MSG_MAX bytes): rcode, and when
 * rcode is NOERROR and addr is not NULL one A record (qtype A, addr 4 bytes
 * network order) with the given TTL.  NOERROR with addr NULL is NODATA (how
 * AAAA is answered: the sandbox has IPv4 synthetic addresses only).
 * Returns the answer's length or a negative errno. */
int dns_build_answer(const struct dns_query *q, int rcode, const uint8_t *addr, uint32_t ttl,
		     uint8_t *out, size_t outlen);

/* An answer for a message dns_parse_query rejected but could read an id
 * from (FORMERR/NOTIMP, no question echoed).  Length or negative errno. */
int dns_build_error(const uint8_t *msg, size_t len, int rcode, uint8_t *out, size_t outlen);

#endif
