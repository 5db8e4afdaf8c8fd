/* Streaming TLS record framing checker (tls_records.h). */
#include "proxy/tls_records.h"

#include <errno.h>
#include <string.h>

enum {
	REC_CCS = 20,
	REC_ALERT = 21,
	REC_HANDSHAKE = 22,
	REC_APPDATA = 23,
	REC_HEARTBEAT = 24,
};

enum {
	HS_CLIENT_HELLO = 1,
	HS_SERVER_HELLO = 2,
	HS_CERTIFICATE = 11,
	HS_CERTIFICATE_VERIFY = 15,
	HS_CLIENT_KEY_EXCHANGE = 16,
};

#define TLS13 0x0304

void tls_records_init(struct tls_records_ctx *x)
{
	memset(&x->up, 0, sizeof(x->up));
	memset(&x->down, 0, sizeof(x->down));
	x->version = 0;
	x->up.from_client = true;
}

static int fail(const char **why, const char *reason)
{
	*why = reason;
	return -EPROTO;
}

/* Whether this side's handshake and alert records are still in the clear:
 * in TLS 1.2 they are encrypted after its change_cipher_spec; in TLS 1.3
 * encrypted records are all application data (RFC 8446 5.2). */
static bool side_plain(const struct tls_records_ctx *x, const struct tls_records *s)
{
	return !(x->version && x->version < TLS13 && s->ccs_seen);
}

static bool mid_message(const struct tls_records *s)
{
	return s->mhdr_got || s->msg_left;
}

/* Each header byte is judged as it comes, so the first byte that cannot
 * start a record is the one refused. */
static int header_byte(struct tls_records_ctx *x, struct tls_records *s, const char **why)
{
	uint8_t type = s->hdr[0];
	size_t len;

	switch (s->hdr_got) {
	case 1:
		if (type == REC_HEARTBEAT)
			return fail(why, "TLS heartbeat record");
		if (type < REC_CCS || type > REC_APPDATA)
			return fail(why, "not a TLS record");
		s->plain = type != REC_APPDATA && (type == REC_CCS || side_plain(x, s));
		/* RFC 8446 5.1: a handshake message is never interleaved
		 * with other records. */
		if (mid_message(s) && (type != REC_HANDSHAKE || !s->plain))
			return fail(why, "TLS handshake message interrupted");
		if (!s->from_client && !x->version && type != REC_HANDSHAKE && type != REC_ALERT)
			return fail(why, "server record before its ServerHello");
		return 0;
	case 2:
		return s->hdr[1] == 3 ? 0 : fail(why, "TLS record with a bad version");
	case 3:
		if (s->hdr[2] > 3 || (s->hdr[2] == 0 && !(s->from_client && type == REC_HANDSHAKE && s->plain)))
			return fail(why, "TLS record with a bad version");
		return 0;
	case TLS_REC_HDR:
		break;
	default:
		return 0;
	}
	len = (size_t)s->hdr[3] << 8 | s->hdr[4];
	if (len == 0)
		return fail(why, "empty TLS record");
	if (len > (s->plain ? TLS_REC_PLAIN_MAX : TLS_REC_PROTECTED_MAX))
		return fail(why, "TLS record too long");
	if ((type == REC_CCS && len != 1) || (type == REC_ALERT && s->plain && len != 2))
		return fail(why, "TLS change_cipher_spec or alert of a bad length");
	s->type = type;
	s->rec_left = len;
	return 0;
}

/* Which handshake messages a side may send in the clear. */
static bool message_allowed(const struct tls_records_ctx *x, const struct tls_records *s, uint8_t t)
{
	if (s->from_client) {
		if (!s->messages || !x->version || x->version >= TLS13)
			return t == HS_CLIENT_HELLO;   /* a first hello, or one after HRR */
		return t == HS_CERTIFICATE || t == HS_CERTIFICATE_VERIFY || t == HS_CLIENT_KEY_EXCHANGE;
	}
	if (!s->messages || x->version >= TLS13)
		return t == HS_SERVER_HELLO;           /* TLS 1.3: HRR, then ServerHello */
	return t != HS_CLIENT_HELLO;
}

static int message_start(struct tls_records_ctx *x, struct tls_records *s, const char **why)
{
	uint8_t t = s->mhdr[0];

	if (!message_allowed(x, s, t))
		return fail(why, s->from_client ? "unexpected TLS handshake message from the client"
						: "unexpected TLS handshake message from the server");
	s->msg_left = (size_t)s->mhdr[1] << 16 | (size_t)s->mhdr[2] << 8 | s->mhdr[3];
	s->collect = t == HS_CLIENT_HELLO || t == HS_SERVER_HELLO;
	s->msg_len = 0;
	if (s->collect && s->msg_left > sizeof(s->msg))
		return fail(why, "TLS hello too large");
	return 0;
}

static int message_end(struct tls_records_ctx *x, struct tls_records *s, const char **why)
{
	struct tls_hello h;
	int v;

	s->mhdr_got = 0;
	s->messages++;
	if (!s->collect)
		return 0;
	s->collect = false;
	if (s->from_client) {
		if (tls_client_hello_body(s->msg, s->msg_len, &h))
			return fail(why, "malformed ClientHello");
		return x->on_hello ? x->on_hello(x->arg, &h, why) : 0;
	}
	v = tls_server_hello_version(s->msg, s->msg_len);
	if (v < 0)
		return fail(why, "malformed ServerHello");
	if (v < 0x0301 || v > TLS13 || (x->version && x->version != v))
		return fail(why, "ServerHello with an unsupported or changed version");
	x->version = v;
	return 0;
}

/* Plaintext handshake bytes: whole messages, back to back. */
static int handshake_bytes(struct tls_records_ctx *x, struct tls_records *s, const uint8_t *p,
			   size_t n, const char **why)
{
	int err;

	while (n) {
		if (s->mhdr_got < 4) {
			s->mhdr[s->mhdr_got++] = *p++;
			n--;
			if (s->mhdr_got == 4 && (err = message_start(x, s, why)))
				return err;
		} else {
			size_t k = n < s->msg_left ? n : s->msg_left;
			if (s->collect)
				memcpy(s->msg + s->msg_len, p, k);
			s->msg_len += k;
			s->msg_left -= k;
			p += k;
			n -= k;
		}
		if (s->mhdr_got == 4 && !s->msg_left && (err = message_end(x, s, why)))
			return err;
	}
	return 0;
}

static int body_bytes(struct tls_records_ctx *x, struct tls_records *s, const uint8_t *p, size_t n,
		      const char **why)
{
	if (!s->plain)
		return 0;
	if (s->type == REC_HANDSHAKE)
		return handshake_bytes(x, s, p, n, why);
	if (s->type == REC_CCS && p[0] != 1)
		return fail(why, "TLS change_cipher_spec that is not 1");
	if (s->type == REC_CCS)
		s->ccs_seen = true;
	return 0;
}

int tls_records_feed(struct tls_records_ctx *x, struct tls_records *s, const uint8_t *p,
		     size_t n, const char **why)
{
	int err;

	while (n) {
		if (s->hdr_got < TLS_REC_HDR) {
			s->hdr[s->hdr_got++] = *p++;
			n--;
			if ((err = header_byte(x, s, why)))
				return err;
			continue;
		}
		size_t k = n < s->rec_left ? n : s->rec_left;
		if ((err = body_bytes(x, s, p, k, why)))
			return err;
		p += k;
		n -= k;
		if (!(s->rec_left -= k))
			s->hdr_got = 0;
	}
	return 0;
}

size_t tls_records_pending(const struct tls_records *s)
{
	return s->hdr_got < TLS_REC_HDR ? s->hdr_got : 0;
}
