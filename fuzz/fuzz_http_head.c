/* libFuzzer target: the HTTP/1.x head parser, body framing and chunked
 * decoder (src/proxy/http_head.c).  The first byte picks request or
 * response; a complete head is followed by its framing and, for chunked
 * bodies, the decoder over the rest.  Checks: the head and every span lie
 * inside the input, the chunked decoder never consumes more than it was
 * given nor passes on more data than it consumed. */
#include <stdint.h>
#include <stdlib.h>

#include "proxy/http_head.h"
#include "proxy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct count {
	size_t bytes;
};

static int count_data(void *arg, const uint8_t *p, size_t n)
{
	((struct count *)arg)->bytes += n;
	return 0;
}

static void check_spans(const struct http_head *h, size_t len)
{
	if (h->len > len || h->nfields > HTTP_FIELDS_MAX)
		abort();
	for (size_t i = 0; i < h->nfields; i++) {
		if ((size_t)h->fields[i].name.off + h->fields[i].name.len > h->len ||
		    (size_t)h->fields[i].value.off + h->fields[i].value.len > h->len)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_head h;
	struct http_chunked c = {0};
	struct count cnt = {0};
	enum http_body kind;
	uint64_t length;
	char host[POLICY_NAME_MAX + 1];
	int r;

	if (size < 1)
		return 0;
	r = http_head_parse(data + 1, size - 1, data[0] & 1, &h);
	if (r <= 0)
		return 0;
	check_spans(&h, size - 1);
	http_host_name(data + 1, &h, host, sizeof(host));
	if (http_body_framing(data + 1, &h, data[0] & 2, &kind, &length) == 0 &&
	    kind == HTTP_BODY_CHUNKED) {
		size_t rest = size - 1 - (size_t)r;
		long used = http_chunked_feed(&c, data + 1 + r, rest, count_data, &cnt);
		if (used > (long)rest || (used >= 0 && cnt.bytes > (size_t)used))
			abort();
	}
	return 0;
}
