/* Bounded TLS ClientHello parser (tls_hello.h). */
#include "proxy/tls_hello.h"

#include <errno.h>
#include <string.h>

#define REC_HDR 5
#define REC_HANDSHAKE 22
#define REC_MAX 16384           /* RFC 8446 5.1: a plaintext fragment's limit */
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define EXT_ECH 0xfe0d          /* draft-ietf-tls-esni: encrypted_client_hello */
#define EXT_ESNI 0xffce         /* the older draft's encrypted_server_name */
#define EXT_MAX 128
#define EXT_SUPPORTED_VERSIONS 43

/* A cursor that only advances over bytes it has. */
struct cur {
	const uint8_t *p;
	size_t left;
};

static int take(struct cur *c, size_t n, struct cur *sub)
{
	if (n > c->left)
		return -EBADMSG;
	if (sub) {
		sub->p = c->p;
		sub->left = n;
	}
	c->p += n;
	c->left -= n;
	return 0;
}

static int u8(struct cur *c, size_t *v)
{
	if (c->left < 1)
		return -EBADMSG;
	*v = c->p[0];
	return take(c, 1, NULL);
}

static int u16(struct cur *c, size_t *v)
{
	if (c->left < 2)
		return -EBADMSG;
	*v = (size_t)c->p[0] << 8 | c->p[1];
	return take(c, 2, NULL);
}

/* A vector with a 1- or 2-byte length prefix. */
static int vec(struct cur *c, int lenbytes, struct cur *sub)
{
	size_t n;
	int err = lenbytes == 1 ? u8(c, &n) : u16(c, &n);

	return err ? err : take(c, n, sub);
}

static int parse_server_name(struct cur ext, struct tls_hello *h)
{
	struct cur list, name;
	size_t type;
	int err;

	if ((err = vec(&ext, 2, &list)) || ext.left || !list.left)
		return -EBADMSG;
	while (list.left) {
		if ((err = u8(&list, &type)) || (err = vec(&list, 2, &name)))
			return err;
		if (type != 0)
			continue;   /* RFC 6066: other name types may be defined */
		if (h->has_sni || !name.left || name.left > TLS_SNI_MAX || memchr(name.p, 0, name.left))
			return -EBADMSG;
		memcpy(h->sni, name.p, name.left);
		h->sni[name.left] = '\0';
		h->has_sni = true;
	}
	return 0;
}

static int parse_extensions(struct cur exts, struct tls_hello *h)
{
	size_t seen[EXT_MAX], nseen = 0, type;
	struct cur body;
	int err;

	while (exts.left) {
		if ((err = u16(&exts, &type)) || (err = vec(&exts, 2, &body)))
			return err;
		for (size_t i = 0; i < nseen; i++) {
			if (seen[i] == type)
				return -EBADMSG;   /* RFC 8446 4.2: no type twice */
		}
		if (nseen == EXT_MAX)
			return -EBADMSG;
		seen[nseen++] = type;
		if (type == EXT_SERVER_NAME && (err = parse_server_name(body, h)))
			return err;
		if (type == EXT_ECH || type == EXT_ESNI)
			h->ech = true;
	}
	return 0;
}

static int parse_client_hello(struct cur c, struct tls_hello *h)
{
	struct cur v;
	size_t version;
	int err;

	memset(h, 0, sizeof(*h));
	if ((err = u16(&c, &version)))
		return err;
	h->legacy_version = (uint16_t)version;
	if ((err = take(&c, 32, NULL)) ||          /* random */
	    (err = vec(&c, 1, &v)) || v.left > 32 ||  /* legacy_session_id */
	    (err = vec(&c, 2, &v)) || v.left < 2 || v.left % 2 ||   /* cipher_suites */
	    (err = vec(&c, 1, &v)) || v.left < 1)   /* legacy_compression_methods */
		return err ? err : -EBADMSG;
	if (!c.left)
		return 0;   /* a TLS 1.2 hello may have no extensions: no SNI */
	if ((err = vec(&c, 2, &v)) || c.left)
		return -EBADMSG;
	return parse_extensions(v, h);
}

/* Joins handshake fragments from the records in buf into hs.  Returns the
 * stream bytes used once the whole message is there, else 0 / -errno. */
static int join_records(const uint8_t *buf, size_t len, uint8_t *hs, size_t *hslen)
{
	size_t off = 0, need = 0;

	*hslen = 0;
	while (len - off >= REC_HDR) {
		size_t rlen = (size_t)buf[off + 3] << 8 | buf[off + 4];

		if (buf[off] != REC_HANDSHAKE || buf[off + 1] != 3)
			return off ? -EBADMSG : -EPROTO;
		if (rlen == 0 || rlen > REC_MAX)
			return -EBADMSG;   /* RFC 8446 5.1: no empty handshake fragments */
		if (off + REC_HDR + rlen > TLS_HELLO_MAX)
			return -E2BIG;
		if (len - off - REC_HDR < rlen)
			return 0;
		memcpy(hs + *hslen, buf + off + REC_HDR, rlen);
		*hslen += rlen;
		off += REC_HDR + rlen;
		if (*hslen < 4)
			continue;
		if (hs[0] != HS_CLIENT_HELLO)
			return -EBADMSG;
		need = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
		if (need > TLS_HELLO_MAX)
			return -E2BIG;
		/* Nothing may follow the ClientHello in the client's first flight. */
		if (*hslen > need)
			return -EBADMSG;
		if (*hslen == need)
			return (int)off;
	}
	/* A partial record header can already tell a stream that is not TLS. */
	if ((len - off >= 1 && buf[off] != REC_HANDSHAKE) || (len - off >= 2 && buf[off + 1] != 3))
		return off ? -EBADMSG : -EPROTO;
	return len >= TLS_HELLO_MAX ? -E2BIG : 0;
}

int tls_hello_parse(const uint8_t *buf, size_t len, struct tls_hello *h)
{
	uint8_t hs[TLS_HELLO_MAX];
	size_t hslen;
	int used, err;

	memset(h, 0, sizeof(*h));
	if ((used = join_records(buf, len, hs, &hslen)) <= 0)
		return used;
	err = parse_client_hello((struct cur){hs + 4, hslen - 4}, h);
	return err ? err : used;
}

int tls_client_hello_body(const uint8_t *body, size_t len, struct tls_hello *h)
{
	return parse_client_hello((struct cur){body, len}, h);
}

int tls_server_hello_version(const uint8_t *body, size_t len)
{
	struct cur c = {body, len}, v, exts;
	size_t version, type, sel;
	int err;

	if ((err = u16(&c, &version)) || (err = take(&c, 32, NULL)) ||   /* random */
	    (err = vec(&c, 1, NULL)) || (err = take(&c, 3, NULL)))       /* id, suite, compression */
		return err;
	if (!c.left)
		return (int)version;
	if (vec(&c, 2, &exts) || c.left)
		return -EBADMSG;
	/* RFC 8446 4.2.1: TLS 1.3 is chosen in supported_versions, never in
	 * legacy_version. */
	while (exts.left) {
		if (u16(&exts, &type) || vec(&exts, 2, &v))
			return -EBADMSG;
		if (type == EXT_SUPPORTED_VERSIONS) {
			if (u16(&v, &sel) || v.left)
				return -EBADMSG;
			version = sel;
		}
	}
	return (int)version;
}
