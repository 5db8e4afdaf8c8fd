/* TLS interception for hosts a secret is bound to (proxy_int.h).
 *
 * The guest's TLS is terminated with a leaf certificate from the sandbox's
 * CA (ALPN http/1.1 only); upstream gets real TLS, verified against the
 * configured or default trust store, host name included.  In between, each
 * HTTP/1.1 request is parsed and held to the name again (Host, target), and
 * its header values get the real secret in place of the placeholder (or the
 * secret's configured header).  Responses come back with every occurrence
 * of a secret value replaced by its placeholder, heads and bodies, across
 * buffer boundaries; because that changes lengths, response bodies are sent
 * to the guest re-framed as chunked.  Accept-Encoding is dropped from
 * requests so that bodies arrive in the clear where the redaction can see
 * them.
 *
 * Both TLS ends run over memory BIOs: this file moves the bytes between
 * sockets and BIOs itself, so one poll loop drives both ends without
 * OpenSSL's WANT_WRITE states, and back-pressure is a size check. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/util.h"
#include "proxy/ca.h"
#include "proxy/inflate.h"
#include "proxy/proxy_int.h"
#include "proxy/redact.h"
#include "proxy/secrets.h"

#define IO_CHUNK (16 * 1024)
#define OUT_HIGH (256 * 1024)     /* stop producing for a side above this */
#define PIPELINE_MAX 32           /* requests awaiting their responses */

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static int buf_add(struct buf *b, const void *data, size_t n)
{
	if (!n)
		return 0;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *np;
		while (cap < b->len + n)
			cap *= 2;
		if (!(np = realloc(b->p, cap)))
			return -ENOMEM;
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	return 0;
}

static int buf_str(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

static void buf_drop(struct buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
}

static void buf_free(struct buf *b, bool wipe)
{
	if (b->p && wipe)
		OPENSSL_cleanse(b->p, b->cap);
	free(b->p);
	*b = (struct buf){0};
}

/* One TLS end: its socket, its SSL over memory BIOs, ciphertext waiting to
 * be sent. */
struct tls_end {
	int fd;
	SSL *ssl;
	BIO *rb, *wb;
	struct buf out;
	bool eof;       /* the socket said EOF */
};

struct pattern {
	const char *from, *to;
	size_t from_len, to_len;
};

struct intercept {
	struct egress_conn *c;
	struct tls_end g, u;
	/* placeholder -> value for the secrets bound to this host */
	struct pattern inject[SECRET_SET_MAX];
	size_t ninject;
	/* requests, guest -> upstream */
	struct buf req;              /* plaintext not yet parsed */
	enum http_body req_body;
	uint64_t req_left;
	struct http_chunked req_chunked;
	bool heads[PIPELINE_MAX];    /* was each waiting request a HEAD */
	size_t nwait, wait_first;
	/* responses, upstream -> guest */
	struct buf resp;
	bool in_resp_body;
	enum http_body resp_body;
	uint64_t resp_left;
	struct http_chunked resp_chunked;
	struct redactor red;         /* response bodies, every secret of the set */
	struct inflater inf;         /* a body compressed although not asked */
	bool done;                   /* a close-delimited response ended */
};

/* ---- moving bytes ---- */

static int end_flush(struct tls_end *e)
{
	uint8_t tmp[IO_CHUNK];
	int n;
	ssize_t w;

	while ((n = BIO_read(e->wb, tmp, sizeof(tmp))) > 0) {
		if (buf_add(&e->out, tmp, (size_t)n))
			return -ENOMEM;
	}
	while (e->out.len) {
		w = send(e->fd, e->out.p, e->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		buf_drop(&e->out, (size_t)w);
	}
	return 0;
}

static int end_fill(struct tls_end *e)
{
	uint8_t tmp[IO_CHUNK];
	ssize_t n = recv(e->fd, tmp, sizeof(tmp), MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0) {
		e->eof = true;
		return 0;
	}
	return BIO_write(e->rb, tmp, (int)n) == n ? 0 : -ENOMEM;
}

static size_t end_pending(const struct tls_end *e)
{
	return e->out.len + BIO_ctrl_pending(e->wb);
}

/* Waits for either end (idle timeout), or until deadline (mono_ms) if
 * that is set. */
static int wait_io(struct intercept *x, bool g_in, bool u_in, uint64_t deadline)
{
	struct pollfd p[2] = {{.fd = x->g.fd}, {.fd = x->u.fd}};
	int timeout = x->c->ctx->idle_timeout_ms > 0 ? x->c->ctx->idle_timeout_ms : -1;
	uint64_t now = deadline ? mono_ms() : 0;
	int r, err = 0;

	if (deadline)
		timeout = now < deadline ? (int)(deadline - now) : 0;

	if (g_in && !x->g.eof)
		p[0].events |= POLLIN;
	if (u_in && !x->u.eof)
		p[1].events |= POLLIN;
	if (x->g.out.len)
		p[0].events |= POLLOUT;
	if (x->u.out.len)
		p[1].events |= POLLOUT;
	for (int i = 0; i < 2; i++)
		p[i].fd = p[i].events ? p[i].fd : -1;
	while ((r = poll(p, 2, timeout)) < 0 && errno == EINTR)
		;
	if (r <= 0) {
		x->c->reason = r ? "poll failed" : deadline ? "TLS handshake not done in time" : "idle timeout";
		return r ? -errno : -ETIMEDOUT;
	}
	if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
		err = end_fill(&x->g);
	if (!err && p[1].revents & (POLLIN | POLLHUP | POLLERR))
		err = end_fill(&x->u);
	if (!err)
		err = end_flush(&x->g);
	if (!err)
		err = end_flush(&x->u);
	return err;
}

/* The whole handshake has one deadline (EGRESS_DECIDE_MS): a peer
 * dripping its handshake must not hold the connection's slot for ever. */
static int handshake(struct intercept *x, struct tls_end *e, const char *fail)
{
	uint64_t deadline = egress_deadline(x->c->ctx);
	int r, err;

	while ((r = SSL_do_handshake(e->ssl)) != 1) {
		if (SSL_get_error(e->ssl, r) != SSL_ERROR_WANT_READ || e->eof) {
			end_flush(e);   /* let the peer see our alert */
			x->c->reason = fail;
			return -EACCES;
		}
		if ((err = end_flush(e)) || (err = wait_io(x, e == &x->g, e == &x->u, deadline)))
			return err;
	}
	return end_flush(e);
}

/* ---- set-up ---- */

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";
	unsigned char *sel;

	/* Only HTTP/1.1 is understood here: a client offering nothing else
	 * (h2 only) fails the handshake rather than speak something unread. */
	if (SSL_select_next_proto(&sel, outlen, h11, sizeof(h11) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static int end_init(struct tls_end *e, SSL_CTX *ctx, int fd)
{
	e->fd = fd;
	if (!(e->ssl = SSL_new(ctx)) || !(e->rb = BIO_new(BIO_s_mem())) || !(e->wb = BIO_new(BIO_s_mem()))) {
		BIO_free(e->rb);
		BIO_free(e->wb);
		e->rb = e->wb = NULL;
		return -ENOMEM;
	}
	/* An empty read BIO means "wait", not EOF; EOF is e->eof. */
	BIO_set_mem_eof_return(e->rb, -1);
	SSL_set_bio(e->ssl, e->rb, e->wb);
	return 0;
}

static int guest_tls(struct intercept *x)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	X509 *cert = NULL;
	EVP_PKEY *key = NULL;
	int err = -ENOMEM;

	if (!x->c->ctx->ca) {
		x->c->reason = "no CA for interception";
		err = -EACCES;
	} else if (ctx && !(err = egress_ca_leaf(x->c->ctx->ca, x->c->name, &cert, &key))) {
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		/* A renegotiation's hello is one the checks never saw. */
		SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
		SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
		if (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)
			err = -EIO;
		else
			err = end_init(&x->g, ctx, x->c->gfd);
	}
	X509_free(cert);
	EVP_PKEY_free(key);
	SSL_CTX_free(ctx);
	if (err)
		return err;
	SSL_set_accept_state(x->g.ssl);
	/* The ClientHello the checks read goes in first. */
	if (BIO_write(x->g.rb, x->c->first, (int)x->c->first_len) != (int)x->c->first_len)
		return -ENOMEM;
	return handshake(x, &x->g, "TLS handshake with the client failed");
}

static int upstream_tls(struct intercept *x)
{
	const char *cafile = x->c->ctx->upstream_ca_file;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int err = -ENOMEM;

	if (ctx) {
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (cafile ? SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1
			   : SSL_CTX_set_default_verify_paths(ctx) != 1)
			err = -EIO;
		else
			err = end_init(&x->u, ctx, x->c->ufd);
	}
	SSL_CTX_free(ctx);
	if (err) {
		x->c->reason = "upstream TLS set-up failed";
		return err;
	}
	SSL_set_connect_state(x->u.ssl);
	/* The certificate must be for this name (RFC 6125 via OpenSSL). */
	if (SSL_set1_host(x->u.ssl, x->c->name) != 1 ||
	    SSL_set_tlsext_host_name(x->u.ssl, x->c->name) != 1 ||
	    SSL_set_alpn_protos(x->u.ssl, (const unsigned char *)"\x08http/1.1", 9))
		return -ENOMEM;
	return handshake(x, &x->u, "upstream certificate not trusted or TLS failed");
}

static void patterns(struct intercept *x)
{
	const struct secret_set *set = x->c->ctx->secrets;

	for (size_t i = 0; i < secret_set_count(set) && x->ninject < SECRET_SET_MAX; i++) {
		const struct secret *s = secret_set_get(set, i);
		struct pattern p = {s->placeholder, s->value, strlen(s->placeholder), s->value_len};
		if (secret_bound_to(s, x->c->name, x->c->port) && !s->header[0])
			x->inject[x->ninject++] = p;
	}
	redactor_init(&x->red, secret_set_redactions(set));
}

/* ---- rewriting ---- */

/* Copies in to out with every occurrence of a pattern's from replaced by
 * its to, leftmost first (the placeholders of a request's header value). */
static long replace(struct buf *out, const uint8_t *in, size_t n, const struct pattern *pat,
		    size_t npat)
{
	size_t pos = 0;

	if (!n)
		return 0;   /* in may be NULL then: an empty body */
	for (;;) {
		const uint8_t *best = NULL;
		size_t bi = 0;
		for (size_t i = 0; i < npat; i++) {
			const uint8_t *m = memmem(in + pos, n - pos, pat[i].from, pat[i].from_len);
			if (m && (!best || m < best))
				best = m, bi = i;
		}
		if (!best)
			break;
		if (buf_add(out, in + pos, (size_t)(best - in) - pos) ||
		    buf_add(out, pat[bi].to, pat[bi].to_len))
			return -ENOMEM;
		pos = (size_t)(best - in) + pat[bi].from_len;
	}
	if (buf_add(out, in + pos, n - pos))
		return -ENOMEM;
	return (long)n;
}

static int emit_buf(void *arg, const uint8_t *p, size_t n)
{
	return buf_add(arg, p, n);
}

static void audit_secret_use(struct intercept *x, const struct secret *s)
{
	cJSON *d = cJSON_CreateObject();

	if (d) {
		cJSON_AddStringToObject(d, "secret", s->name);
		cJSON_AddStringToObject(d, "host", x->c->name);
	}
	egress_audit(x->c->ctx, "secret.use", d);
}

/* A header a bound secret sets itself: the guest's own copy is dropped. */
static const struct secret *header_secret(struct intercept *x, const uint8_t *b,
					  const struct http_head *h, size_t i)
{
	const struct secret_set *set = x->c->ctx->secrets;

	for (size_t k = 0; k < secret_set_count(set); k++) {
		const struct secret *s = secret_set_get(set, k);
		if (s->header[0] && secret_bound_to(s, x->c->name, x->c->port) && http_field_is(b, h, i, s->header))
			return s;
	}
	return NULL;
}

static int add_secret_headers(struct intercept *x, struct buf *out)
{
	const struct secret_set *set = x->c->ctx->secrets;
	int err = 0;

	for (size_t k = 0; !err && k < secret_set_count(set); k++) {
		const struct secret *s = secret_set_get(set, k);
		const char *at = strstr(s->format, "{}");
		if (!s->header[0] || !secret_bound_to(s, x->c->name, x->c->port))
			continue;
		if ((err = buf_str(out, s->header)) || (err = buf_str(out, ": ")) ||
		    (err = buf_add(out, s->format, (size_t)(at - s->format))) ||
		    (err = buf_add(out, s->value, s->value_len)) || (err = buf_str(out, at + 2)) ||
		    (err = buf_str(out, "\r\n")))
			break;
		audit_secret_use(x, s);
	}
	return err;
}

/* Marks the injected secrets of a rewritten header value as used. */
static void audit_injected(struct intercept *x, const uint8_t *v, size_t n, bool *used)
{
	const struct secret_set *set = x->c->ctx->secrets;

	for (size_t k = 0; k < secret_set_count(set) && k < SECRET_SET_MAX; k++) {
		const struct secret *s = secret_set_get(set, k);
		if (!used[k] && !s->header[0] && secret_bound_to(s, x->c->name, x->c->port) &&
		    memmem(v, n, s->placeholder, strlen(s->placeholder))) {
			used[k] = true;
			audit_secret_use(x, s);
		}
	}
}

static int rewrite_request(struct intercept *x, const uint8_t *b, const struct http_head *h,
			   struct buf *out)
{
	bool used[SECRET_SET_MAX] = {false};
	int err = buf_add(out, b, (size_t)(h->fields[0].name.off));

	for (size_t i = 0; !err && i < h->nfields; i++) {
		const struct http_field *f = &h->fields[i];
		/* Identity bodies only, so redaction sees what the server sent. */
		if (http_field_is(b, h, i, "accept-encoding") || header_secret(x, b, h, i))
			continue;
		audit_injected(x, b + f->value.off, f->value.len, used);
		if ((err = buf_add(out, b + f->name.off, f->name.len)) || (err = buf_str(out, ": ")) ||
		    replace(out, b + f->value.off, f->value.len, x->inject, x->ninject) < 0 ||
		    (err = buf_str(out, "\r\n")))
			err = err ? err : -ENOMEM;
	}
	if (!err)
		err = add_secret_headers(x, out);
	return err ? err : buf_str(out, "\r\n");
}

static int up_write(struct intercept *x, const void *p, size_t n)
{
	if (n && SSL_write(x->u.ssl, p, (int)n) != (int)n)
		return -EIO;
	x->c->bytes_up += n;
	return 0;
}

static int guest_write(struct intercept *x, const void *p, size_t n)
{
	if (n && SSL_write(x->g.ssl, p, (int)n) != (int)n)
		return -EIO;
	x->c->bytes_down += n;
	return 0;
}

/* One request head from x->req: checked, rewritten, sent.  Returns the
 * head's length, 0 if incomplete, negative to end the connection. */
static int request_head(struct intercept *x)
{
	struct http_head h;
	struct buf out = {0};
	int r = http_head_parse(x->req.p, x->req.len, false, &h), err;

	if (r <= 0) {
		if (r < 0)
			x->c->reason = "malformed HTTP request";
		return r < 0 ? -EACCES : 0;
	}
	if ((err = egress_check_request(x->c, x->req.p, &h)))
		return err;
	if (h.minor != 1 || h.nfields == 0 ||
	    http_body_framing(x->req.p, &h, false, &x->req_body, &x->req_left)) {
		x->c->reason = "request not HTTP/1.1 or with ambiguous framing";
		return -EACCES;
	}
	if (x->nwait == PIPELINE_MAX) {
		x->c->reason = "too many pipelined requests";
		return -EACCES;
	}
	x->heads[(x->wait_first + x->nwait++) % PIPELINE_MAX] =
		h.method.len == 4 && !memcmp(x->req.p + h.method.off, "HEAD", 4);
	memset(&x->req_chunked, 0, sizeof(x->req_chunked));
	if (x->req_body == HTTP_BODY_LENGTH && !x->req_left)
		x->req_body = HTTP_BODY_NONE;
	if (!(err = rewrite_request(x, x->req.p, &h, &out)))
		err = up_write(x, out.p, out.len);
	buf_free(&out, true);   /* it held the secret */
	return err ? err : r;
}

/* Consumes guest plaintext: heads rewritten, bodies passed as they are. */
static int requests(struct intercept *x)
{
	while (x->req.len) {
		long n;
		if (x->req_body == HTTP_BODY_LENGTH) {
			n = (long)(x->req.len < x->req_left ? x->req.len : x->req_left);
			if (!(x->req_left -= (uint64_t)n))
				x->req_body = HTTP_BODY_NONE;
		} else if (x->req_body == HTTP_BODY_CHUNKED) {
			if ((n = http_chunked_feed(&x->req_chunked, x->req.p, x->req.len, NULL, NULL)) < 0) {
				x->c->reason = "malformed chunked request body";
				return -EACCES;
			}
			if (x->req_chunked.done)
				x->req_body = HTTP_BODY_NONE;
		} else {
			int r = request_head(x);
			if (r <= 0)
				return r;
			buf_drop(&x->req, (size_t)r);
			continue;
		}
		if (up_write(x, x->req.p, (size_t)n))
			return -EIO;
		buf_drop(&x->req, (size_t)n);
	}
	return 0;
}

/* ---- responses ---- */

static int emit_chunk(struct intercept *x, const uint8_t *p, size_t n)
{
	char size[24];
	int len = snprintf(size, sizeof(size), "%zx\r\n", n);

	if (!n)
		return 0;
	if (guest_write(x, size, (size_t)len) || guest_write(x, p, n) || guest_write(x, "\r\n", 2))
		return -EIO;
	return 0;
}

/* Body data from upstream: redacted (the redactor holds back what may
 * still start a match), then sent as a chunk.  final flushes it all. */
static int body_redact(struct intercept *x, const uint8_t *p, size_t n, bool final)
{
	struct buf out = {0};
	int err = redactor_feed(&x->red, p, n, final, emit_buf, &out);

	if (!err)
		err = emit_chunk(x, out.p, out.len);
	buf_free(&out, true);
	return err;
}

static int decoded_data(void *arg, const uint8_t *p, size_t n)
{
	return body_redact(arg, p, n, false);
}

static int body_data(void *arg, const uint8_t *p, size_t n)
{
	struct intercept *x = arg;
	int err;

	if (x->inf.kind == INFLATE_NONE)
		return body_redact(x, p, n, false);
	if ((err = inflater_feed(&x->inf, p, n, decoded_data, x)) == -EBADMSG || err == -EFBIG)
		x->c->reason = err == -EFBIG ? "decompressed response body too large"
					     : "malformed compressed response body";
	return err;
}

static int body_end(struct intercept *x)
{
	int err = inflater_finish(&x->inf);

	if (err)
		x->c->reason = "compressed response body cut short";
	inflater_free(&x->inf);
	inflater_init(&x->inf, INFLATE_NONE);
	if (!err)
		err = body_redact(x, NULL, 0, true);
	x->in_resp_body = false;
	return err ? err : guest_write(x, "0\r\n\r\n", 5);
}

/* The server was not asked to compress (Accept-Encoding is dropped), but
 * may: gzip and deflate are decoded so the redaction sees the body; any
 * other coding, or more than one, is refused. */
static int content_coding(struct intercept *x, const uint8_t *b, const struct http_head *h)
{
	int kind = INFLATE_NONE;

	for (size_t i = 0; i < h->nfields; i++) {
		int k;
		if (!http_field_is(b, h, i, "content-encoding"))
			continue;
		k = inflate_coding(b + h->fields[i].value.off, h->fields[i].value.len);
		if (k < 0 || (k != INFLATE_NONE && kind != INFLATE_NONE)) {
			x->c->reason = "response with a Content-Encoding that cannot be checked";
			return -EPROTO;
		}
		if (k != INFLATE_NONE)
			kind = k;
	}
	inflater_init(&x->inf, x->resp_body == HTTP_BODY_NONE ? INFLATE_NONE : (enum inflate_kind)kind);
	return 0;
}

static int response_head_out(struct intercept *x, const uint8_t *b, const struct http_head *h)
{
	struct buf head = {0}, out = {0};
	int err = buf_add(&head, b, h->nfields ? h->fields[0].name.off : h->len - 2);

	for (size_t i = 0; !err && i < h->nfields; i++) {
		const struct http_field *f = &h->fields[i];
		/* The body is re-framed, so its old framing goes; a decoded
		 * body loses its coding. */
		if (x->resp_body != HTTP_BODY_NONE && (http_field_is(b, h, i, "content-length") ||
						       http_field_is(b, h, i, "transfer-encoding")))
			continue;
		if (x->inf.kind != INFLATE_NONE && http_field_is(b, h, i, "content-encoding"))
			continue;
		if ((err = buf_add(&head, b + f->name.off, f->name.len)) || (err = buf_str(&head, ": ")) ||
		    (err = buf_add(&head, b + f->value.off, f->value.len)) || (err = buf_str(&head, "\r\n")))
			break;
	}
	if (!err && x->resp_body != HTTP_BODY_NONE)
		err = buf_str(&head, "Transfer-Encoding: chunked\r\n");
	if (!err)
		err = buf_str(&head, "\r\n");
	/* Heads come only between bodies, when the body redactor holds
	 * nothing: it serves, with its buffers, as the head's too. */
	if (!err)
		err = redactor_feed(&x->red, head.p, head.len, true, emit_buf, &out);
	if (!err)
		err = guest_write(x, out.p, out.len);
	buf_free(&head, true);
	buf_free(&out, true);
	return err;
}

static int response_head(struct intercept *x)
{
	struct http_head h;
	bool head_req;
	int r = http_head_parse(x->resp.p, x->resp.len, true, &h), err;

	if (r <= 0) {
		if (r < 0)
			x->c->reason = "malformed HTTP response";
		return r < 0 ? -EPROTO : 0;
	}
	if (!x->nwait || h.status == 101) {
		x->c->reason = "response without a request";
		return -EPROTO;
	}
	head_req = x->heads[x->wait_first];
	if (http_body_framing(x->resp.p, &h, head_req, &x->resp_body, &x->resp_left)) {
		x->c->reason = "response with ambiguous framing";
		return -EPROTO;
	}
	if ((err = content_coding(x, x->resp.p, &h)) || (err = response_head_out(x, x->resp.p, &h)))
		return err;
	if (h.status >= 200) {   /* 1xx are interim: the request still waits */
		x->wait_first = (x->wait_first + 1) % PIPELINE_MAX;
		x->nwait--;
	}
	memset(&x->resp_chunked, 0, sizeof(x->resp_chunked));
	x->in_resp_body = x->resp_body != HTTP_BODY_NONE;
	if (x->resp_body == HTTP_BODY_LENGTH && !x->resp_left)
		err = body_end(x);
	return err ? err : r;
}

static int responses(struct intercept *x)
{
	while (x->resp.len && !x->done) {
		long n;
		int err;
		if (!x->in_resp_body) {
			int r = response_head(x);
			if (r <= 0)
				return r;
			buf_drop(&x->resp, (size_t)r);
			continue;
		}
		if (x->resp_body == HTTP_BODY_CHUNKED) {
			n = http_chunked_feed(&x->resp_chunked, x->resp.p, x->resp.len, body_data, x);
			if (n < 0) {
				x->c->reason = "malformed chunked response";
				return (int)n;
			}
			err = x->resp_chunked.done ? body_end(x) : 0;
		} else {
			n = (long)x->resp.len;
			if (x->resp_body == HTTP_BODY_LENGTH && x->resp_left < (uint64_t)n)
				n = (long)x->resp_left;
			err = body_data(x, x->resp.p, (size_t)n);
			if (!err && x->resp_body == HTTP_BODY_LENGTH && !(x->resp_left -= (uint64_t)n))
				err = body_end(x);
		}
		buf_drop(&x->resp, (size_t)n);
		if (err)
			return err;
	}
	return 0;
}

/* ---- the loop ---- */

/* Reads what plaintext one end has into b.  1 if some came, 0 if none
 * (yet), -ENODATA at the end of its stream, -EIO on a TLS error. */
static int pull(struct tls_end *e, struct buf *b)
{
	uint8_t tmp[IO_CHUNK];
	int n = SSL_read(e->ssl, tmp, sizeof(tmp));

	if (n > 0)
		return buf_add(b, tmp, (size_t)n) ? -ENOMEM : 1;
	switch (SSL_get_error(e->ssl, n)) {
	case SSL_ERROR_WANT_READ:
		return e->eof ? -ENODATA : 0;
	case SSL_ERROR_ZERO_RETURN:
		return -ENODATA;
	default:
		return -EIO;
	}
}

/* The guest ended its side: pass the end on once no request is half sent. */
static int guest_ended(struct intercept *x)
{
	if (x->req.len || x->req_body != HTTP_BODY_NONE) {
		x->c->reason = "client closed inside a request";
		return -EACCES;
	}
	SSL_shutdown(x->u.ssl);
	return end_flush(&x->u);
}

static int upstream_ended(struct intercept *x)
{
	if (x->in_resp_body && x->resp_body == HTTP_BODY_CLOSE) {
		x->done = true;
		return body_end(x);
	}
	if (x->in_resp_body || x->resp.len || x->nwait) {
		x->c->reason = "upstream closed inside a response";
		return -EPROTO;
	}
	x->done = true;
	return 0;
}

static int step(struct intercept *x, bool *g_open, bool *u_open, bool *progress)
{
	int r, err = 0;

	*progress = false;
	if (*g_open && end_pending(&x->u) < OUT_HIGH) {
		if ((r = pull(&x->g, &x->req)) == -ENODATA) {
			*g_open = false;
			err = guest_ended(x);
		} else if (r < 0) {
			x->c->reason = "client TLS error";
			return r;
		} else if (r > 0) {
			*progress = true;
			err = requests(x);
		}
	}
	if (!err && *u_open && end_pending(&x->g) < OUT_HIGH) {
		if ((r = pull(&x->u, &x->resp)) == -ENODATA) {
			*u_open = false;
			err = responses(x);
			if (!err)
				err = upstream_ended(x);
		} else if (r < 0) {
			x->c->reason = "upstream TLS error";
			return r;
		} else if (r > 0) {
			*progress = true;
			err = responses(x);
		}
	}
	if (!err)
		err = end_flush(&x->g);
	if (!err)
		err = end_flush(&x->u);
	return err;
}

static int relay(struct intercept *x)
{
	bool g_open = true, u_open = true, progress;
	int err = 0;

	while (!err && !x->done && (g_open || x->nwait || x->in_resp_body)) {
		if ((err = step(x, &g_open, &u_open, &progress)) || progress || x->done)
			continue;
		if (!g_open && !u_open)
			break;
		err = wait_io(x, g_open && end_pending(&x->u) < OUT_HIGH,
			      u_open && end_pending(&x->g) < OUT_HIGH, 0);
	}
	if (!err) {
		/* Closing: tell the guest, and let what is queued reach it. */
		SSL_shutdown(x->g.ssl);
		err = end_flush(&x->g);
		while (!err && x->g.out.len)
			err = wait_io(x, false, false, 0);
	}
	return err;
}

static void end_free(struct tls_end *e)
{
	SSL_free(e->ssl);   /* frees its BIOs */
	buf_free(&e->out, true);
}

int egress_intercept(struct egress_conn *c)
{
	struct intercept *x = calloc(1, sizeof(*x));
	int err;

	if (!x)
		return -ENOMEM;
	x->c = c;
	x->g.fd = c->gfd;
	x->u.fd = c->ufd;
	patterns(x);
	/* Upstream first: a server we cannot verify never sees the guest's
	 * handshake finish, so the guest gets no certificate for it. */
	if (!(err = upstream_tls(x)) && !(err = guest_tls(x)))
		err = relay(x);
	end_free(&x->g);
	end_free(&x->u);
	buf_free(&x->req, true);
	buf_free(&x->resp, true);
	redactor_free(&x->red);
	inflater_free(&x->inf);
	free(x);
	ERR_clear_error();
	return err;
}
