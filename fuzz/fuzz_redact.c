/* libFuzzer target: the response redactor (src/proxy/redact.c).
 * Input: 1 byte L, then a value of 8 + L % 57 bytes (a NUL becomes 'A'),
 * then 1 byte s, then the text.  Checks beyond "no crash": the output
 * holds no REDACT_RUN-byte run of the value as it is or in lower-case hex
 * (the marker and placeholder it wrote cut out: their bytes beside
 * unredacted text may spell part of a value without being it);
 * and the output is the same whether the text is fed whole, in pieces of
 * 1 + s % 97 bytes, or one byte at a time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/redact.h"

#define PLACEHOLDER "k8s-placeholder"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct out {
	uint8_t *p;
	size_t len;
};

static int collect(void *arg, const uint8_t *p, size_t n)
{
	struct out *o = arg;

	if (!(o->p = realloc(o->p, o->len + n + 1)))
		abort();
	memcpy(o->p + o->len, p, n);
	o->len += n;
	return 0;
}

static struct out feed(const struct redact_set *rs, const uint8_t *t, size_t n, size_t step)
{
	struct redactor r;
	struct out o = {malloc(1), 0};

	redactor_init(&r, rs);
	for (size_t off = 0; off < n; off += step) {
		size_t k = n - off < step ? n - off : step;
		if (redactor_feed(&r, t + off, k, false, collect, &o))
			abort();
	}
	if (redactor_feed(&r, NULL, 0, true, collect, &o))
		abort();
	redactor_free(&r);
	return o;
}

/* Cuts what the redactor wrote itself (the marker, the placeholder) out
 * of o: its bytes next to unredacted text are not the value's. */
static void cut_own(struct out *o, const char *s)
{
	size_t n = strlen(s);
	uint8_t *at;

	while ((at = memmem(o->p, o->len, s, n))) {
		*at = 0;
		memmove(at + 1, at + n, o->len - (size_t)(at - o->p) - n);
		o->len -= n - 1;
	}
}

static void no_runs(struct out *o, const char *v, size_t vlen)
{
	char hex[2 * REDACT_RUN + 1];

	cut_own(o, REDACT_MARK);
	cut_own(o, PLACEHOLDER);

	for (size_t i = 0; i + REDACT_RUN <= vlen; i++) {
		if (memmem(o->p, o->len, v + i, REDACT_RUN))
			abort();
		for (int k = 0; k < REDACT_RUN; k++)
			sprintf(hex + 2 * k, "%02x", (uint8_t)v[i + k]);
		if (memmem(o->p, o->len, hex, 2 * REDACT_RUN))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct redact_set *rs;
	char value[64];
	size_t vlen, step;
	struct out a, b, c;

	if (size < 2)
		return 0;
	vlen = 8 + data[0] % 57;
	if (size < 2 + vlen)
		return 0;
	for (size_t i = 0; i < vlen; i++)
		value[i] = data[1 + i] ? (char)data[1 + i] : 'A';
	step = 1 + data[1 + vlen] % 97;
	data += 2 + vlen;
	size -= 2 + vlen;
	if (redact_set_new(&rs) || redact_set_add(rs, value, vlen, PLACEHOLDER))
		abort();
	a = feed(rs, data, size, size ? size : 1);
	b = feed(rs, data, size, step);
	c = feed(rs, data, size, 1);
	if (a.len != b.len || a.len != c.len || memcmp(a.p, b.p, a.len) || memcmp(a.p, c.p, a.len))
		abort();
	no_runs(&a, value, vlen);
	free(a.p), free(b.p), free(c.p);
	redact_set_free(rs);
	return 0;
}
