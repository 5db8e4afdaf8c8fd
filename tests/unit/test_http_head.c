/* The strict HTTP/1.x head parser, body framing and chunked decoder. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proxy/http_head.h"

static int req(const char *s, struct http_head *h)
{
	return http_head_parse((const uint8_t *)s, strlen(s), false, h);
}

static void test_request(void **state)
{
	const char *s = "GET /repos?x=1 HTTP/1.1\r\nHost: API.github.com:8443\r\n"
			"User-Agent: curl/7.88.1\r\nAccept:  */*  \r\n\r\nBODY";
	struct http_head h;
	char host[256];

	assert_int_equal(req(s, &h), (int)(strlen(s) - 4));
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.nfields, 3);
	assert_int_equal(h.method.len, 3);
	assert_memory_equal(s + h.target.off, "/repos?x=1", h.target.len);
	assert_int_equal(h.host, 0);
	assert_memory_equal(s + h.fields[2].value.off, "*/*", h.fields[2].value.len);
	assert_int_equal(http_host_name((const uint8_t *)s, &h, host, sizeof(host)), 0);
	assert_string_equal(host, "API.github.com");
	for (size_t i = 0; i < strlen(s) - 4; i++)
		assert_int_equal(http_head_parse((const uint8_t *)s, i, false, &h), 0);
}

static void test_request_rejects(void **state)
{
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",          /* two Host */
		"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",         /* obs-fold */
		"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",              /* bare CR */
		"GET / HTTP/1.1\nHost: a\n\n",                          /* bare LF */
		"GET / HTTP/1.1\r\nHost : a\r\n\r\n",                   /* space before colon */
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
		"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
		"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n",                  /* control char */
		"\r\n\r\n",
	};
	struct http_head h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(req(bad[i], &h), -EBADMSG);
}

static void test_host_name(void **state)
{
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
	};
	struct http_head h;
	char host[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(req(bad[i], &h) > 0);
		assert_int_equal(http_host_name((const uint8_t *)bad[i], &h, host, sizeof(host)), -EINVAL);
	}
	assert_true(req("GET / HTTP/1.0\r\n\r\n", &h) > 0);
	assert_int_equal(http_host_name((const uint8_t *)"", &h, host, sizeof(host)), -ENOENT);
}

static void test_too_big(void **state)
{
	size_t n = HTTP_HEAD_MAX + 100;
	char *s = malloc(n);
	struct http_head h;

	memset(s, 'a', n);
	memcpy(s, "GET / HTTP/1.1\r\nX: ", 19);
	assert_int_equal(http_head_parse((const uint8_t *)s, n, false, &h), -E2BIG);
	free(s);
}

static void test_framing(void **state)
{
	static const struct {
		const char *head;
		bool response, head_req;
		int err;
		enum http_body kind;
		uint64_t len;
	} cases[] = {
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n", false, false, 0, HTTP_BODY_LENGTH, 12},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false, false, 0, HTTP_BODY_CHUNKED, 0},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", false, false, 0, HTTP_BODY_NONE, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false, false, -EBADMSG, 0, 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, false, -EBADMSG, 0, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", false, false, -EBADMSG, 0, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", false, false, 0, HTTP_BODY_LENGTH, 3},
		{"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", false, false, -EBADMSG, 0, 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, false, 0, HTTP_BODY_LENGTH, 5},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, true, 0, HTTP_BODY_NONE, 0},
		{"HTTP/1.1 204 No Content\r\n\r\n", true, false, 0, HTTP_BODY_NONE, 0},
		{"HTTP/1.1 100 Continue\r\n\r\n", true, false, 0, HTTP_BODY_NONE, 0},
		{"HTTP/1.1 200\r\n\r\n", true, false, 0, HTTP_BODY_CLOSE, 0},
		{"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, false, -EBADMSG, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint8_t *b = (const uint8_t *)cases[i].head;
		struct http_head h;
		enum http_body kind;
		uint64_t len;

		assert_int_equal(http_head_parse(b, strlen(cases[i].head), cases[i].response, &h),
				 (int)strlen(cases[i].head));
		assert_int_equal(http_body_framing(b, &h, cases[i].head_req, &kind, &len), cases[i].err);
		if (!cases[i].err) {
			assert_int_equal(kind, cases[i].kind);
			assert_int_equal(len, cases[i].len);
		}
	}
}

struct sink {
	char buf[256];
	size_t n;
};

static int sink_data(void *arg, const uint8_t *p, size_t n)
{
	struct sink *s = arg;

	assert_true(s->n + n < sizeof(s->buf));
	memcpy(s->buf + s->n, p, n);
	s->n += n;
	return 0;
}

static void test_chunked(void **state)
{
	static const char body[] = "5;name=v\r\nhello\r\n1A\r\n abcdefghijklmnopqrstuvwxy\r\n"
				   "0\r\nX-Sum: 1\r\n\r\nNEXT";
	struct http_chunked c = {0};
	struct sink s = {0};
	size_t len = sizeof(body) - 1 - 4;

	/* Whole, then byte by byte: the same data and the same end. */
	assert_int_equal(http_chunked_feed(&c, (const uint8_t *)body, sizeof(body) - 1, sink_data, &s), (long)len);
	assert_true(c.done);
	assert_int_equal(s.n, 31);
	assert_memory_equal(s.buf, "hello abcdefghijklmnopqrstuvwxy", 31);
	memset(&c, 0, sizeof(c));
	s.n = 0;
	for (size_t i = 0; i < len; i++)
		assert_int_equal(http_chunked_feed(&c, (const uint8_t *)body + i, 1, sink_data, &s), 1);
	assert_true(c.done);
	assert_int_equal(s.n, 31);
}

static void test_chunked_rejects(void **state)
{
	static const char *const bad[] = {
		"x\r\n", "5\nhello\r\n", "5\r\nhelloX\r\n", "\r\n", "12345678901234567\r\n",
		"0\r\nX: a\rb\r\n\r\n", "-1\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct http_chunked c = {0};
		assert_int_equal(http_chunked_feed(&c, (const uint8_t *)bad[i], strlen(bad[i]), NULL, NULL),
				 -EBADMSG);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_request_rejects),
		cmocka_unit_test(test_host_name),
		cmocka_unit_test(test_too_big),
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_chunked_rejects),
	};
	return cmocka_run_group_tests_name("http_head", tests, NULL, NULL);
}
