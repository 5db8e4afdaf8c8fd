/* libFuzzer target: the TLS record framing checker (src/proxy/tls_records.c).
 * Input: 2 bytes big-endian n, then n bytes the client sent, then what the
 * server sent.  The server's stream is fed first (so that its ServerHello
 * sets the version), then the client's.  Checks beyond "no crash": feeding
 * each stream in one call or one byte at a time gives the same verdict,
 * the same reason and the same failing byte, and a held-back header is
 * never more than 4 bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/tls_records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	int err;
	const char *why;
	size_t at;       /* bytes fed before the failing call's end */
};

static int accept_hello(void *arg, const struct tls_hello *h, const char **why)
{
	(void)arg;
	/* A hello naming "evil" stands for one the proxy refuses. */
	if (h->has_sni && !strcmp(h->sni, "evil")) {
		*why = "refused hello";
		return -13;
	}
	return 0;
}

static struct run feed(struct tls_records_ctx *x, struct tls_records *s, const uint8_t *p, size_t n,
		       size_t step, size_t base)
{
	struct run r = {0, NULL, 0};

	for (size_t off = 0; off < n; off += step) {
		size_t k = n - off < step ? n - off : step;
		if ((r.err = tls_records_feed(x, s, p + off, k, &r.why))) {
			r.at = base + off + k;
			return r;
		}
		if (tls_records_pending(s) > 4)
			abort();
	}
	return r;
}

static struct run run_all(const uint8_t *up, size_t nup, const uint8_t *down, size_t ndown, size_t step)
{
	struct tls_records_ctx *x = malloc(sizeof(*x));
	struct run r;

	if (!x)
		abort();
	tls_records_init(x);
	x->on_hello = accept_hello;
	r = feed(x, &x->down, down, ndown, step, 0);
	if (!r.err)
		r = feed(x, &x->up, up, nup, step, ndown);
	free(x);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t nup;
	struct run a, b;

	if (size < 2)
		return 0;
	nup = (size_t)data[0] << 8 | data[1];
	data += 2;
	size -= 2;
	if (nup > size)
		nup = size;
	a = run_all(data, nup, data + nup, size - nup, size ? size : 1);
	b = run_all(data, nup, data + nup, size - nup, 1);
	/* One byte at a time pins the failing byte; in one call it is only
	 * known to be in that call. */
	if (a.err != b.err || (a.why != b.why && (!a.why || !b.why || strcmp(a.why, b.why))))
		abort();
	if (a.err && b.at > a.at)
		abort();
	return 0;
}
