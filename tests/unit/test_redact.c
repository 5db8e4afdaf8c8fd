/* The redactor (src/proxy/redact.c): runs of a secret of REDACT_RUN bytes
 * or more, whole or in part, plain and encoded, at every offset of the
 * value, fed whole, cut at every boundary and one byte at a time (issue
 * 23 items 7 and 11). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proxy/redact.h"

#define VALUE "sk-ant-api03-Zq9_xW2+Lm/0p8Rt~v.Ys7KdHb6NcUf5"
#define PH "k8s-placeholder-KEY-0123456789abcdef0123456789abcdef"

static const char b64a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64u[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

struct out {
	char *p;
	size_t len;
};

static int collect(void *arg, const uint8_t *p, size_t n)
{
	struct out *o = arg;

	o->p = realloc(o->p, o->len + n + 1);
	memcpy(o->p + o->len, p, n);
	o->len += n;
	o->p[o->len] = 0;
	return 0;
}

static struct redact_set *one_set(void)
{
	struct redact_set *rs;

	assert_int_equal(redact_set_new(&rs), 0);
	assert_int_equal(redact_set_add(rs, VALUE, strlen(VALUE), PH), 0);
	return rs;
}

/* Redacts text fed in pieces: cut at `cut` (0: whole), or byte by byte. */
static char *run(const struct redact_set *rs, const char *text, size_t cut, bool bytewise)
{
	struct redactor r;
	struct out o = {calloc(1, 1), 0};
	size_t n = strlen(text);

	redactor_init(&r, rs);
	if (bytewise) {
		for (size_t i = 0; i < n; i++)
			assert_int_equal(redactor_feed(&r, (const uint8_t *)text + i, 1, false, collect, &o), 0);
		assert_int_equal(redactor_feed(&r, NULL, 0, true, collect, &o), 0);
	} else {
		assert_int_equal(redactor_feed(&r, (const uint8_t *)text, cut, false, collect, &o), 0);
		assert_int_equal(redactor_feed(&r, (const uint8_t *)text + cut, n - cut, true, collect, &o), 0);
	}
	redactor_free(&r);
	return o.p;
}

enum enc { PLAIN, HEX_LO, HEX_UP, B64, B64URL, PCT_UP, PCT_LO, JSON_SLASH, JSON_U, JS_X, HTML_HEX, HTML_DEC, NENC };

static void encode(enum enc e, const uint8_t *p, size_t n, char *out)
{
	size_t o = 0;

	switch (e) {
	case PLAIN:
		memcpy(out, p, n), o = n;
		break;
	case HEX_LO:
	case HEX_UP:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, e == HEX_LO ? "%02x" : "%02X", p[i]);
		break;
	case JSON_SLASH:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, p[i] == '/' ? "\\/" : "%c", p[i]);
		break;
	case JSON_U:
	case JS_X:
	case HTML_HEX:
	case HTML_DEC:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, e == JSON_U ? "\\u%04X" : e == JS_X ? "\\x%02x"
						 : e == HTML_HEX ? "&#x%x;" : "&#%d;", p[i]);
		break;
	case PCT_UP:
	case PCT_LO:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, e == PCT_LO ? "%%%02x" : "%%%02X", p[i]);
		break;
	case B64:
	case B64URL: {
		const char *a = e == B64 ? b64a : b64u;
		for (size_t i = 0; i < n; i += 3) {
			uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
				     (i + 2 < n ? p[i + 2] : 0);
			out[o++] = a[w >> 18 & 63];
			out[o++] = a[w >> 12 & 63];
			if (i + 1 < n)
				out[o++] = a[w >> 6 & 63];
			else if (e == B64)
				out[o++] = '=';
			if (i + 2 < n)
				out[o++] = a[w & 63];
			else if (e == B64)
				out[o++] = '=';
		}
		break;
	}
	default:
		break;
	}
	out[o] = 0;
}

/* Any REDACT_RUN-byte run of VALUE in any encoding (base64: the 8
 * characters that 6 bytes make at any alignment). */
static bool leaks(const char *out)
{
	const uint8_t *v = (const uint8_t *)VALUE;
	char e[64];

	for (size_t o = 0; o + REDACT_RUN <= strlen(VALUE); o++) {
		for (int k = 0; k < NENC; k++) {
			encode((enum enc)k, v + o, k == B64 || k == B64URL ? 6 : REDACT_RUN, e);
			if (strstr(out, e))
				return true;
		}
	}
	return false;
}

static void test_whole_value(void **state)
{
	struct redact_set *rs = one_set();
	const char *text = "before " VALUE " after " VALUE VALUE "!";
	char *want = NULL, *got;

	assert_true(asprintf(&want, "before " PH " after " PH PH "!") > 0);
	for (size_t cut = 0; cut <= strlen(text); cut++) {
		got = run(rs, text, cut, false);
		assert_string_equal(got, want);
		free(got);
	}
	got = run(rs, text, 0, true);
	assert_string_equal(got, want);
	free(got), free(want);
	redact_set_free(rs);
}

/* Every run of 8 bytes or more, at every offset of the value, in every
 * encoding, cut at every boundary and fed byte by byte: nothing of it
 * reaches the output, the text around it does, and every way of feeding
 * gives the same output. */
static void test_runs_every_offset(void **state)
{
	struct redact_set *rs = one_set();
	const uint8_t *v = (const uint8_t *)VALUE;
	size_t L = strlen(VALUE);
	char enc[512], text[600];

	for (size_t o = 0; o + REDACT_RUN <= L; o++) {
		size_t lens[] = {REDACT_RUN, REDACT_RUN + 1, REDACT_RUN + 4, L - o};
		for (size_t li = 0; li < 4; li++) {
			size_t k = lens[li];
			if (o + k > L)
				continue;
			for (int e = 0; e < NENC; e++) {
				char *whole;
				encode((enum enc)e, v + o, k, enc);
				snprintf(text, sizeof(text), "<%s>", enc);
				assert_true(leaks(text));   /* the check can see it */
				whole = run(rs, text, 0, false);
				if (leaks(whole) || whole[0] != '<' || whole[strlen(whole) - 1] != '>')
					fail_msg("offset %zu len %zu enc %d: %s -> %s", o, k, e, text, whole);
				for (size_t cut = 1; cut < strlen(text); cut++) {
					char *got = run(rs, text, cut, false);
					if (strcmp(got, whole))
						fail_msg("cut %zu of %s: %s vs %s", cut, text, got, whole);
					free(got);
				}
				char *bw = run(rs, text, 0, true);
				assert_string_equal(bw, whole);
				free(bw), free(whole);
			}
		}
	}
	redact_set_free(rs);
}

/* Shorter runs pass (the rule is REDACT_RUN bytes), and text with nothing
 * of the value is left exactly as it was. */
static void test_short_runs_and_clean_text(void **state)
{
	struct redact_set *rs = one_set();
	const char *clean = "GET /v1/models HTTP/1.1 {\"data\":[\"aGVsbG8gd29ybGQ=\", \"%41%42\", \"deadbeef\"]} sk-ant-";
	char text[64], *got;

	got = run(rs, clean, 0, false);
	assert_string_equal(got, clean);
	free(got);
	snprintf(text, sizeof(text), "[%.7s]", VALUE + 3);
	got = run(rs, text, 0, false);
	assert_string_equal(got, text);
	free(got);
	redact_set_free(rs);
}

/* One value inside another: the longer one wins where both match (no
 * tail of it left over), the shorter one alone is still redacted. */
static void test_nested_values(void **state)
{
	struct redact_set *rs;
	char *got;

	assert_int_equal(redact_set_new(&rs), 0);
	assert_int_equal(redact_set_add(rs, "sk-live-ABCDEFGH", 16, "PH-SHORT"), 0);
	assert_int_equal(redact_set_add(rs, "sk-live-ABCDEFGHIJKLMNOP", 24, "PH-LONG"), 0);
	got = run(rs, "x sk-live-ABCDEFGHIJKLMNOP y sk-live-ABCDEFGH z", 0, false);
	assert_string_equal(got, "x PH-LONG y PH-SHORT z");
	free(got);
	/* A run of the longer one past the shorter one's end. */
	got = run(rs, "x ABCDEFGHIJKL y", 0, false);
	assert_string_equal(got, "x " REDACT_MARK " y");
	free(got);
	redact_set_free(rs);
}

/* A value shorter than REDACT_RUN is redacted whole, in every encoding. */
static void test_short_value(void **state)
{
	struct redact_set *rs;
	char enc[64], text[80], *got;

	assert_int_equal(redact_set_new(&rs), 0);
	assert_int_equal(redact_set_add(rs, "pw12345", 7, "PH"), 0);
	for (int e = 0; e < NENC; e++) {
		encode((enum enc)e, (const uint8_t *)"pw12345", 7, enc);
		snprintf(text, sizeof(text), "(%s)", enc);
		got = run(rs, text, 0, false);
		assert_null(strstr(got, enc));
		free(got);
	}
	redact_set_free(rs);
}

static void test_set_limits(void **state)
{
	struct redact_set *rs;
	char big[8194];

	assert_int_equal(redact_set_new(&rs), 0);
	assert_int_equal(redact_set_add(rs, "", 0, "x"), -EINVAL);
	assert_int_equal(redact_set_add(rs, "a\0b", 3, "x"), -EINVAL);
	memset(big, 'k', sizeof(big));
	assert_int_equal(redact_set_add(rs, big, 8193, "x"), -EINVAL);
	assert_int_equal(redact_set_add(rs, big, 8192, "x"), 0);
	for (int i = 1; i < REDACT_VALUES_MAX; i++)
		assert_int_equal(redact_set_add(rs, "value-123456", 12, "x"), 0);
	assert_int_equal(redact_set_add(rs, "value-123456", 12, "x"), -E2BIG);
	redact_set_free(rs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_value),
		cmocka_unit_test(test_runs_every_offset),
		cmocka_unit_test(test_short_runs_and_clean_text),
		cmocka_unit_test(test_nested_values),
		cmocka_unit_test(test_short_value),
		cmocka_unit_test(test_set_limits),
	};
	return cmocka_run_group_tests_name("redact", tests, NULL, NULL);
}
