/* gzip and deflate response bodies, decoded with zlib (inflate.h). */
#include "proxy/inflate.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#define OUT_CHUNK (16 * 1024)

static bool token_is(const uint8_t *v, size_t len, const char *t)
{
	return strlen(t) == len && !strncasecmp((const char *)v, t, len);
}

int inflate_coding(const uint8_t *v, size_t len)
{
	if (token_is(v, len, "identity"))
		return INFLATE_NONE;
	if (token_is(v, len, "gzip") || token_is(v, len, "x-gzip"))
		return INFLATE_GZIP;
	if (token_is(v, len, "deflate"))
		return INFLATE_DEFLATE;
	return -EPROTO;
}

void inflater_init(struct inflater *f, enum inflate_kind kind)
{
	memset(f, 0, sizeof(*f));
	f->kind = kind;
}

/* "deflate" is meant to be zlib (RFC 9110 8.4.1.2), but servers send raw
 * deflate too: a zlib header is a CMF with method 8 and a check that
 * divides by 31. */
static int start(struct inflater *f, const uint8_t *p, size_t n)
{
	int bits = 15 + 32;   /* gzip or zlib, detected */

	if (f->kind == INFLATE_DEFLATE && !((p[0] & 0x0f) == 8 && (n < 2 || (p[0] << 8 | p[1]) % 31 == 0)))
		bits = -15;
	if (inflateInit2(&f->zs, bits) != Z_OK)
		return -ENOMEM;
	f->started = true;
	return 0;
}

int inflater_feed(struct inflater *f, const uint8_t *p, size_t n,
		  int (*out)(void *arg, const uint8_t *p, size_t n), void *arg)
{
	uint8_t buf[OUT_CHUNK];
	int err;

	if (!n)
		return 0;
	if (!f->started && (err = start(f, p, n)))
		return err;
	f->zs.next_in = (Bytef *)p;
	f->zs.avail_in = (uInt)n;
	while (f->zs.avail_in) {
		int r;
		size_t got;
		if (f->ended) {
			/* Another gzip member may follow; anything else may not. */
			if (f->kind != INFLATE_GZIP || inflateReset(&f->zs) != Z_OK)
				return -EBADMSG;
			f->ended = false;
		}
		f->zs.next_out = buf;
		f->zs.avail_out = sizeof(buf);
		r = inflate(&f->zs, Z_NO_FLUSH);
		if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR)
			return -EBADMSG;
		got = sizeof(buf) - f->zs.avail_out;
		if ((f->out_total += got) > INFLATE_OUT_MAX)
			return -EFBIG;
		if (got && (err = out(arg, buf, got)))
			return err;
		if (r == Z_STREAM_END)
			f->ended = true;
		else if (r == Z_BUF_ERROR && !got)
			return -EBADMSG;   /* no progress with input left */
	}
	return 0;
}

int inflater_finish(struct inflater *f)
{
	return !f->started || f->ended ? 0 : -EBADMSG;
}

void inflater_free(struct inflater *f)
{
	if (f->started)
		inflateEnd(&f->zs);
	f->started = false;
}
