/* The ClientHello parser against hellos made by OpenSSL's own client (in
 * memory), re-split over reads and TLS records, and against hand-made
 * malformed ones. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/ssl.h>

#include "proxy/tls_hello.h"

/* The first flight of a real OpenSSL client: sni NULL sends none. */
static size_t real_hello(const char *sni, int max_version, uint8_t *out, size_t cap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
	int n;

	assert_non_null(ssl);
	SSL_set_bio(ssl, rb, wb);
	if (max_version)
		SSL_set_max_proto_version(ssl, max_version);
	if (sni)
		SSL_set_tlsext_host_name(ssl, sni);
	SSL_set_alpn_protos(ssl, (const unsigned char *)"\x08http/1.1", 9);
	assert_int_equal(SSL_connect(ssl), -1);   /* wants the server's answer */
	n = BIO_read(wb, out, (int)cap);
	assert_true(n > 0);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return (size_t)n;
}

static void test_real_hello_sni(void **state)
{
	uint8_t buf[4096];
	size_t n = real_hello("API.Example.com", 0, buf, sizeof(buf));
	struct tls_hello h;

	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_true(h.has_sni);
	assert_string_equal(h.sni, "API.Example.com");
	assert_false(h.ech);
	n = real_hello("github.com", TLS1_2_VERSION, buf, sizeof(buf));
	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_string_equal(h.sni, "github.com");
}

static void test_real_hello_no_sni(void **state)
{
	uint8_t buf[4096];
	size_t n = real_hello(NULL, 0, buf, sizeof(buf));
	struct tls_hello h;

	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_false(h.has_sni);
}

/* Byte by byte, as a slow client sends it: incomplete until the last. */
static void test_split_reads(void **state)
{
	uint8_t buf[4096];
	size_t n = real_hello("a.example.org", 0, buf, sizeof(buf));
	struct tls_hello h;

	for (size_t i = 0; i < n; i++)
		assert_int_equal(tls_hello_parse(buf, i, &h), 0);
	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_string_equal(h.sni, "a.example.org");
}

/* The same handshake message re-cut into records of `frag` bytes. */
static size_t refragment(const uint8_t *in, size_t n, size_t frag, uint8_t *out)
{
	const uint8_t *hs = in + 5;
	size_t hslen = n - 5, o = 0;

	for (size_t off = 0; off < hslen; off += frag) {
		size_t k = hslen - off < frag ? hslen - off : frag;
		out[o++] = 22;
		out[o++] = 3;
		out[o++] = 1;
		out[o++] = (uint8_t)(k >> 8);
		out[o++] = (uint8_t)k;
		memcpy(out + o, hs + off, k);
		o += k;
	}
	return o;
}

static void test_split_records(void **state)
{
	uint8_t buf[4096], rec[8192];
	size_t n = real_hello("split.example.net", 0, buf, sizeof(buf));
	struct tls_hello h;

	for (size_t frag = 1; frag < 40; frag += 3) {
		size_t m = refragment(buf, n, frag, rec);
		assert_int_equal(tls_hello_parse(rec, m - 1, &h), 0);
		assert_int_equal(tls_hello_parse(rec, m, &h), (int)m);
		assert_string_equal(h.sni, "split.example.net");
	}
	/* Another record after the hello is not read as part of it. */
	memcpy(buf + n, "\x17\x03\x03\x00\x01X", 6);
	assert_int_equal(tls_hello_parse(buf, n + 6, &h), (int)n);
}

static void test_not_tls(void **state)
{
	struct tls_hello h;

	assert_int_equal(tls_hello_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &h), -EPROTO);
	assert_int_equal(tls_hello_parse((const uint8_t *)"\x16\x01", 2, &h), -EPROTO);
	assert_int_equal(tls_hello_parse((const uint8_t *)"SSH-2.0", 7, &h), -EPROTO);
	assert_int_equal(tls_hello_parse((const uint8_t *)"\x16", 1, &h), 0);
	/* A handshake message that is not a ClientHello (ServerHello, 2). */
	assert_int_equal(tls_hello_parse((const uint8_t *)"\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9, &h), -EBADMSG);
	/* An empty handshake record. */
	assert_int_equal(tls_hello_parse((const uint8_t *)"\x16\x03\x01\x00\x00", 5, &h), -EBADMSG);
}

/* A minimal ClientHello with the given extensions block. */
static size_t make_hello(const uint8_t *ext, size_t extlen, uint8_t *out)
{
	uint8_t body[2048];
	size_t b = 0, o = 0;

	body[b++] = 3;
	body[b++] = 3;
	memset(body + b, 0x11, 32);
	b += 32;
	body[b++] = 0;                     /* session id */
	memcpy(body + b, "\x00\x02\x13\x01", 4);   /* one suite */
	b += 4;
	memcpy(body + b, "\x01\x00", 2);   /* null compression */
	b += 2;
	body[b++] = (uint8_t)(extlen >> 8);
	body[b++] = (uint8_t)extlen;
	memcpy(body + b, ext, extlen);
	b += extlen;
	out[o++] = 22, out[o++] = 3, out[o++] = 1;
	out[o++] = (uint8_t)((b + 4) >> 8), out[o++] = (uint8_t)(b + 4);
	out[o++] = 1, out[o++] = 0, out[o++] = (uint8_t)(b >> 8), out[o++] = (uint8_t)b;
	memcpy(out + o, body, b);
	return o + b;
}

static void test_handmade(void **state)
{
	static const uint8_t sni[] = "\x00\x00\x00\x0c\x00\x0a\x00\x00\x07" "a.b.com";
	static const uint8_t two_names[] =
		"\x00\x00\x00\x14\x00\x12\x00\x00\x07" "a.b.com" "\x00\x00\x06" "c.d.io";
	static const uint8_t dup_ext[] = "\x00\x17\x00\x00\x00\x17\x00\x00";
	static const uint8_t ech[] = "\x00\x00\x00\x0c\x00\x0a\x00\x00\x07" "a.b.com" "\xfe\x0d\x00\x01\x00";
	static const uint8_t nul_name[] = "\x00\x00\x00\x0c\x00\x0a\x00\x00\x07" "a.b\0com";
	static const uint8_t short_ext[] = "\x00\x00\x00\x0c\x00\x0a\x00\x00";
	uint8_t buf[4096];
	struct tls_hello h;
	size_t n;

	n = make_hello(sni, sizeof(sni) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_string_equal(h.sni, "a.b.com");
	n = make_hello(two_names, sizeof(two_names) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), -EBADMSG);
	n = make_hello(dup_ext, sizeof(dup_ext) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), -EBADMSG);
	n = make_hello(ech, sizeof(ech) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), (int)n);
	assert_true(h.ech);
	n = make_hello(nul_name, sizeof(nul_name) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), -EBADMSG);
	n = make_hello(short_ext, sizeof(short_ext) - 1, buf);
	assert_int_equal(tls_hello_parse(buf, n, &h), -EBADMSG);
}

static void test_too_big(void **state)
{
	uint8_t *buf = calloc(1, TLS_HELLO_MAX + 16);
	struct tls_hello h;

	/* A handshake message announcing 1 MiB. */
	memcpy(buf, "\x16\x03\x01\x00\x04\x01\x10\x00\x00", 9);
	assert_int_equal(tls_hello_parse(buf, 9, &h), -E2BIG);
	/* Many valid-looking records never completing the message. */
	memcpy(buf, "\x16\x03\x01\x00\x04\x01\x00\x3f\xff", 9);
	for (size_t o = 9; o + 5 < TLS_HELLO_MAX + 16; o += 5 + 100) {
		memcpy(buf + o, "\x16\x03\x01\x00\x64", 5);
	}
	assert_int_equal(tls_hello_parse(buf, TLS_HELLO_MAX + 16, &h), -E2BIG);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_hello_sni),
		cmocka_unit_test(test_real_hello_no_sni),
		cmocka_unit_test(test_split_reads),
		cmocka_unit_test(test_split_records),
		cmocka_unit_test(test_not_tls),
		cmocka_unit_test(test_handmade),
		cmocka_unit_test(test_too_big),
	};
	return cmocka_run_group_tests_name("tls_hello", tests, NULL, NULL);
}
