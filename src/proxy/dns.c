/* RFC 1035 messages, only as far as a host that answers its guest's
 * questions itself needs them.  The parser reads the guest's bytes with a
 * bounds check before every access and advances only over what it checked;
 * the builder writes into the caller's buffer and refuses rather than
 * truncates. */
#include "proxy/dns.h"

#include <errno.h>
#include <string.h>

#define DNS_HDR 12
#define DNS_CLASS_IN 1
#define DNS_TYPE_OPT 41

/* Header flag bits (RFC 1035 4.1.1). */
#define F_QR 0x8000u
#define F_AA 0x0400u
#define F_RD 0x0100u
#define F_RA 0x0080u
#define OPCODE(f) (((f) >> 11) & 0xfu)

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Letters, digits, '-' and '_' (SRV and DMARC names use it): anything else
 * in a label (a '.', a NUL, a control byte) would make the text form of the
 * name mean something else than the wire form. */
static int name_byte(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A' + 'a';
	if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')
		return c;
	return -1;
}

/* The question's name at msg[*pos], uncompressed.  Advances *pos past it. */
static int parse_name(const uint8_t *msg, size_t len, size_t *pos, char *name)
{
	size_t p = *pos, out = 0;

	for (;;) {
		uint8_t l;
		if (p >= len)
			return -EBADMSG;
		l = msg[p++];
		if (l == 0)
			break;
		/* 0xc0: a compression pointer (a question is the first name of a
		 * message, nothing to point back to); 0x40/0x80: reserved. */
		if (l & 0xc0)
			return -EBADMSG;
		if (l > len - p || out + (out ? 1 : 0) + l > POLICY_NAME_MAX)
			return -EBADMSG;
		if (out)
			name[out++] = '.';
		for (uint8_t i = 0; i < l; i++) {
			int c = name_byte(msg[p + i]);
			if (c < 0)
				return -EBADMSG;
			name[out++] = (char)c;
		}
		p += l;
	}
	name[out] = '\0';
	*pos = p;
	return 0;
}

/* An EDNS OPT pseudo-record (RFC 6891): root name, type 41, rdata in bounds. */
static int parse_opt(const uint8_t *msg, size_t len, size_t *pos)
{
	size_t p = *pos;
	uint16_t rdlen;

	if (len - p < 11 || msg[p] != 0 || rd16(msg + p + 1) != DNS_TYPE_OPT)
		return -EBADMSG;
	rdlen = rd16(msg + p + 9);
	if (rdlen > len - p - 11)
		return -EBADMSG;
	*pos = p + 11 + rdlen;
	return 0;
}

int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *q, int *rcode)
{
	uint16_t flags, arcount;
	size_t pos = DNS_HDR;

	memset(q, 0, sizeof(*q));
	*rcode = -1;
	if (!msg || len < DNS_HDR)
		return -EBADMSG; /* no id to answer to */
	q->id = rd16(msg);
	flags = rd16(msg + 2);
	if (flags & F_QR)
		return -EBADMSG; /* a response: answering it could start a loop */
	q->rd = (flags & F_RD) ? 1 : 0;
	*rcode = DNS_FORMERR;
	if (len > DNS_MSG_MAX)
		return -EBADMSG;
	if (OPCODE(flags) != 0) {
		*rcode = DNS_NOTIMP;
		return -EBADMSG;
	}
	arcount = rd16(msg + 10);
	if (rd16(msg + 4) != 1 || rd16(msg + 6) || rd16(msg + 8) || arcount > 1)
		return -EBADMSG;
	if (parse_name(msg, len, &pos, q->name) || len - pos < 4)
		return -EBADMSG;
	q->qtype = rd16(msg + pos);
	q->qclass = rd16(msg + pos + 2);
	pos += 4;
	q->question_len = pos - DNS_HDR;
	memcpy(q->question, msg + DNS_HDR, q->question_len);
	if (arcount && parse_opt(msg, len, &pos))
		return -EBADMSG;
	if (pos != len)
		return -EBADMSG; /* bytes after the records the header announced */
	if (q->qclass != DNS_CLASS_IN) {
		*rcode = DNS_NOTIMP;
		return -EBADMSG;
	}
	*rcode = DNS_NOERROR;
	return 0;
}

int dns_build_answer(const struct dns_query *q, int rcode, const uint8_t *addr, uint32_t ttl,
		     uint8_t *out, size_t outlen)
{
	bool answer = rcode == DNS_NOERROR && addr;
	size_t need = DNS_HDR + q->question_len + (answer ? 16 : 0), p;

	if (rcode < 0 || rcode > 15 || (addr && q->qtype != DNS_TYPE_A) || q->question_len < 5 ||
	    q->question_len > sizeof(q->question))
		return -EINVAL;
	if (outlen < need || need > DNS_MSG_MAX)
		return -ENOSPC;
	/* Authoritative: no other server will ever say anything about these
	 * names to this guest.  RA: to the guest this is its recursive
	 * resolver (stub resolvers warn when it is missing). */
	wr16(out, q->id);
	wr16(out + 2, (uint16_t)(F_QR | F_AA | F_RA | (q->rd ? F_RD : 0) | (unsigned)rcode));
	wr16(out + 4, 1);
	wr16(out + 6, answer ? 1 : 0);
	wr16(out + 8, 0);
	wr16(out + 10, 0);
	memcpy(out + DNS_HDR, q->question, q->question_len);
	p = DNS_HDR + q->question_len;
	if (answer) {
		wr16(out + p, 0xc000 | DNS_HDR); /* the name: a pointer to the question's */
		wr16(out + p + 2, DNS_TYPE_A);
		wr16(out + p + 4, DNS_CLASS_IN);
		wr16(out + p + 6, (uint16_t)(ttl >> 16));
		wr16(out + p + 8, (uint16_t)ttl);
		wr16(out + p + 10, 4);
		memcpy(out + p + 12, addr, 4);
		p += 16;
	}
	return (int)p;
}

int dns_build_error(const uint8_t *msg, size_t len, int rcode, uint8_t *out, size_t outlen)
{
	uint16_t flags;

	if (!msg || len < DNS_HDR || rcode < 0 || rcode > 15)
		return -EINVAL;
	if (outlen < DNS_HDR)
		return -ENOSPC;
	flags = rd16(msg + 2);
	/* RFC 1035 4.1.1: the id, opcode and RD of the request are copied. */
	memcpy(out, msg, 2);
	wr16(out + 2, (uint16_t)(F_QR | F_RA | (flags & (0x7800u | F_RD)) | (unsigned)rcode));
	memset(out + 4, 0, 8);
	return DNS_HDR;
}
