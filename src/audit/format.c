#include "audit/format.h"

#include <openssl/evp.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

void audit_header_encode(const struct audit_header *h, uint8_t out[AUDIT_HDR_LEN])
{
	memcpy(out, AUDIT_HDR_MAGIC, 4);
	put32(out + 4, AUDIT_VERSION);
	memcpy(out + 8, h->log_id, AUDIT_LOG_ID_LEN);
	put64(out + 24, h->created_ns);
}

int audit_header_version(const uint8_t *buf, size_t len)
{
	size_t m = len < 4 ? len : 4;

	if (memcmp(buf, AUDIT_HDR_MAGIC, m))
		return -EBADMSG;
	if (len < AUDIT_HDR_LEN)
		return -EAGAIN;
	return get32(buf + 4) > INT32_MAX ? -EPROTONOSUPPORT : (int)get32(buf + 4);
}

int audit_header_parse(const uint8_t *buf, size_t len, struct audit_header *h)
{
	int v = audit_header_version(buf, len);

	if (v == -EBADMSG || v == -EAGAIN)
		return v;
	/* every version so far puts the log id and time in the same place */
	memcpy(h->log_id, buf + 8, AUDIT_LOG_ID_LEN);
	h->created_ns = get64(buf + 24);
	return v == AUDIT_VERSION ? 0 : -EPROTONOSUPPORT;
}

/* Names end up on terminals (show) and in other tools' parsers: no control
 * bytes, so a record cannot repaint the screen or forge a second line. */
static bool name_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

/* What the writer accepts in any field (section 3): no byte below 0x20, no
 * 0x7F, and well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF).  JSON allows raw tab, CR and LF as whitespace
 * between tokens; a record does not: details are one line. */
static bool text_ok(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < len) {
		unsigned char c = p[i], lo = 0x80, hi = 0xbf;
		size_t n;

		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f)
				return false;
			i++;
			continue;
		}
		n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		if (n == 0 || i + n > len)
			return false;
		lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
		if (p[i + 1] < lo || p[i + 1] > hi)
			return false;
		for (size_t k = 2; k < n; k++)
			if (p[i + k] < 0x80 || p[i + k] > 0xbf)
				return false;
		i += n;
	}
	return true;
}

static bool details_ok(const char *d, size_t len)
{
	const char *end = NULL;
	cJSON *j;
	bool ok;

	/* The record parser checks only the braces (it must stay cheap for
	 * verify); the writer checks the whole thing. */
	if (len < 2 || d[0] != '{' || d[len - 1] != '}')
		return false;
	j = cJSON_ParseWithLengthOpts(d, len, &end, false);
	ok = j && cJSON_IsObject(j) && end == d + len;
	cJSON_Delete(j);
	return ok;
}

int audit_event_check(const struct audit_event *ev)
{
	const char *det = ev->details ? ev->details : "{}";
	size_t a = ev->sandbox ? strlen(ev->sandbox) : 0;
	size_t b = ev->actor ? strlen(ev->actor) : 0;
	size_t c = ev->type ? strlen(ev->type) : 0;
	size_t d = strlen(det);

	if (b == 0 || c == 0)
		return -EINVAL;
	if (a > AUDIT_NAME_MAX || b > AUDIT_NAME_MAX || c > AUDIT_NAME_MAX)
		return -E2BIG;
	if (!text_ok(ev->sandbox ? ev->sandbox : "", a) || !text_ok(ev->actor, b) ||
	    !text_ok(ev->type, c))
		return -EINVAL;
	if (d > AUDIT_REC_MAX || AUDIT_REC_FIXED + a + b + c + d + 1 > AUDIT_REC_MAX)
		return -E2BIG;
	if (!text_ok(det, d) || !details_ok(det, d))
		return -EINVAL;
	return (int)(AUDIT_REC_FIXED + a + b + c + d + 1);
}

int audit_record_encode(uint8_t *buf, size_t cap, uint64_t seq, uint64_t time_ns,
			const uint8_t prev[AUDIT_HASH_LEN], const struct audit_event *ev)
{
	const char *sb = ev->sandbox ? ev->sandbox : "";
	const char *det = ev->details ? ev->details : "{}";
	size_t a = strlen(sb), b = strlen(ev->actor), c = strlen(ev->type), d = strlen(det);
	size_t total = AUDIT_REC_FIXED + a + b + c + d + 1;
	uint8_t *p;

	if (total > cap)
		return -ENOSPC;
	memcpy(buf, AUDIT_REC_MAGIC, 4);
	put32(buf + 4, (uint32_t)total);
	put64(buf + 8, seq);
	put64(buf + 16, time_ns);
	memcpy(buf + 24, prev, AUDIT_HASH_LEN);
	put16(buf + 56, (uint16_t)a);
	put16(buf + 58, (uint16_t)b);
	put16(buf + 60, (uint16_t)c);
	put32(buf + 62, (uint32_t)d);
	p = buf + AUDIT_REC_FIXED;
	memcpy(p, sb, a);
	p += a;
	memcpy(p, ev->actor, b);
	p += b;
	memcpy(p, ev->type, c);
	p += c;
	memcpy(p, det, d);
	p += d;
	*p = '\n';
	return (int)total;
}

int audit_record_parse(const uint8_t *buf, size_t len, struct audit_record *r)
{
	size_t m = len < 4 ? len : 4;
	uint32_t total, a, b, c, d;
	const char *s;

	if (memcmp(buf, AUDIT_REC_MAGIC, m))
		return -EBADMSG;
	if (len < 8)
		return -EAGAIN;
	total = get32(buf + 4);
	if (total < AUDIT_REC_MIN || total > AUDIT_REC_MAX)
		return -EBADMSG;
	if (len < AUDIT_REC_FIXED)
		return -EAGAIN;
	a = get16(buf + 56);
	b = get16(buf + 58);
	c = get16(buf + 60);
	d = get32(buf + 62);
	/* Each term is bounded (16 or 32 bits), so the 64-bit sum cannot wrap. */
	if ((uint64_t)AUDIT_REC_FIXED + a + b + c + d + 1 != total)
		return -EBADMSG;
	if (len < total)
		return -EAGAIN;
	if (buf[total - 1] != '\n' || a > AUDIT_NAME_MAX || b > AUDIT_NAME_MAX ||
	    c > AUDIT_NAME_MAX || b == 0 || c == 0 || d < 2)
		return -EBADMSG;
	s = (const char *)buf + AUDIT_REC_FIXED;
	if (!name_ok(s, a + b + c) || s[a + b + c] != '{' || s[a + b + c + d - 1] != '}')
		return -EBADMSG;
	r->seq = get64(buf + 8);
	r->time_ns = get64(buf + 16);
	r->prev = buf + 24;
	r->sandbox = s;
	r->sandbox_len = (uint16_t)a;
	r->actor = s + a;
	r->actor_len = (uint16_t)b;
	r->type = s + a + b;
	r->type_len = (uint16_t)c;
	r->details = s + a + b + c;
	r->details_len = d;
	r->raw = buf;
	r->len = total;
	return (int)total;
}

bool audit_tail_is_torn(const uint8_t *p, size_t len)
{
	struct audit_record r;
	bool zero = true;
	int n = audit_record_parse(p, len, &r);

	if (n > 0)
		return false;
	for (size_t i = 0; i < len && zero; i++)
		zero = p[i] == 0;
	if (n != -EAGAIN && !zero)
		return false;
	for (size_t q = 1; q + AUDIT_REC_MIN <= len; q++)
		if (p[q] == 'K' && audit_record_parse(p + q, len - q, &r) > 0)
			return false;
	return true;
}

bool audit_record_details_valid(const struct audit_record *r)
{
	return details_ok(r->details, r->details_len);
}

void audit_head_message(const struct audit_head *h, uint8_t msg[AUDIT_HEAD_MSG_LEN])
{
	uint8_t *p = msg;

	memcpy(p, AUDIT_HEAD_DOMAIN, AUDIT_HEAD_DOMAIN_LEN);
	p += AUDIT_HEAD_DOMAIN_LEN;
	memcpy(p, h->log_id, AUDIT_LOG_ID_LEN);
	p += AUDIT_LOG_ID_LEN;
	put64(p, h->created_ns);
	put64(p + 8, h->index);
	memcpy(p + 16, h->prev, AUDIT_HASH_LEN);
	p += 16 + AUDIT_HASH_LEN;
	put64(p, h->size);
	put64(p + 8, h->time_ns);
	memcpy(p + 16, h->root, AUDIT_HASH_LEN);
	memcpy(p + 16 + AUDIT_HASH_LEN, h->pubkey, AUDIT_PUBKEY_LEN);
}

void audit_head_digest(const struct audit_head *h, uint8_t out[AUDIT_HASH_LEN])
{
	uint8_t msg[AUDIT_HEAD_MSG_LEN];

	audit_head_message(h, msg);
	EVP_Digest(msg, sizeof(msg), out, NULL, EVP_sha256(), NULL);
}

void audit_hex(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int audit_unhex(const char *in, size_t inlen, uint8_t *out, size_t n)
{
	if (inlen != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit((uint8_t)in[2 * i]), lo = hex_digit((uint8_t)in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int audit_head_format(const struct audit_head *h, char *buf, size_t cap)
{
	char id[2 * AUDIT_LOG_ID_LEN + 1], prev[2 * AUDIT_HASH_LEN + 1], root[2 * AUDIT_HASH_LEN + 1];
	char pub[2 * AUDIT_PUBKEY_LEN + 1], sig[2 * AUDIT_SIG_LEN + 1];
	int n;

	audit_hex(h->log_id, sizeof(h->log_id), id);
	audit_hex(h->prev, sizeof(h->prev), prev);
	audit_hex(h->root, sizeof(h->root), root);
	audit_hex(h->pubkey, sizeof(h->pubkey), pub);
	audit_hex(h->sig, sizeof(h->sig), sig);
	n = snprintf(buf, cap, AUDIT_HEAD_TAG " %s %llu %llu %s %llu %llu %s %s %s\n", id,
		     (unsigned long long)h->created_ns, (unsigned long long)h->index, prev,
		     (unsigned long long)h->size, (unsigned long long)h->time_ns, root, pub, sig);
	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	return n;
}

/* A cursor over one head line: each step takes one space-separated field. */
struct cursor {
	const char *p, *end;
};

static int next_field(struct cursor *c, const char **f, size_t *flen)
{
	const char *s = c->p;

	while (c->p < c->end && *c->p != ' ')
		c->p++;
	*f = s;
	*flen = (size_t)(c->p - s);
	if (*flen == 0)
		return -EBADMSG;
	if (c->p < c->end)
		c->p++; /* the single separating space */
	return 0;
}

static int hex_field(struct cursor *c, uint8_t *out, size_t n)
{
	const char *f;
	size_t flen;

	if (next_field(c, &f, &flen) < 0)
		return -EBADMSG;
	for (size_t i = 0; i < flen; i++)
		if (f[i] >= 'A' && f[i] <= 'F')
			return -EBADMSG; /* one spelling only */
	return audit_unhex(f, flen, out, n) ? -EBADMSG : 0;
}

static int dec_field(struct cursor *c, uint64_t *v)
{
	const char *f;
	size_t flen;
	uint64_t x = 0;

	if (next_field(c, &f, &flen) < 0 || flen > 20 || (flen > 1 && f[0] == '0'))
		return -EBADMSG;
	for (size_t i = 0; i < flen; i++) {
		if (f[i] < '0' || f[i] > '9')
			return -EBADMSG;
		if (x > (UINT64_MAX - (uint64_t)(f[i] - '0')) / 10)
			return -EBADMSG;
		x = x * 10 + (uint64_t)(f[i] - '0');
	}
	*v = x;
	return 0;
}

int audit_head_parse(const char *buf, size_t len, struct audit_head *h)
{
	const char *nl = memchr(buf, '\n', len < AUDIT_HEAD_LINE_MAX ? len : AUDIT_HEAD_LINE_MAX);
	struct cursor c = {buf, NULL};
	const char *f;
	size_t flen;

	if (!nl)
		return len < AUDIT_HEAD_LINE_MAX ? -EAGAIN : -EBADMSG;
	c.end = nl;
	if (next_field(&c, &f, &flen) < 0 || flen != strlen(AUDIT_HEAD_TAG) ||
	    memcmp(f, AUDIT_HEAD_TAG, flen))
		return -EBADMSG;
	if (hex_field(&c, h->log_id, sizeof(h->log_id)) < 0 || dec_field(&c, &h->created_ns) < 0 ||
	    dec_field(&c, &h->index) < 0 || hex_field(&c, h->prev, sizeof(h->prev)) < 0 ||
	    dec_field(&c, &h->size) < 0 ||
	    dec_field(&c, &h->time_ns) < 0 || hex_field(&c, h->root, sizeof(h->root)) < 0 ||
	    hex_field(&c, h->pubkey, sizeof(h->pubkey)) < 0 ||
	    hex_field(&c, h->sig, sizeof(h->sig)) < 0)
		return -EBADMSG;
	/* Nothing after the signature, and no trailing space before '\n'. */
	if (c.p != c.end || nl[-1] == ' ')
		return -EBADMSG;
	return (int)(nl - buf + 1);
}
