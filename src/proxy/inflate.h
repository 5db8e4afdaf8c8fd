/* Decoding a response body the proxy did not ask to be compressed.
 *
 * On an intercepted connection the proxy drops the guest's Accept-Encoding,
 * but a server may compress anyway; a secret it echoes would then pass the
 * redaction inside the compressed bytes.  gzip (x-gzip) and deflate (zlib
 * or raw) are decoded here with Debian's zlib, concatenated gzip members
 * included, and the decoded body goes on to the redaction; every other
 * coding is refused by the caller.  The decoded size has a bound
 * (INFLATE_OUT_MAX): a small body cannot make the proxy produce gigabytes. */
#ifndef KOSA8_PROXY_INFLATE_H
#define KOSA8_PROXY_INFLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#define INFLATE_OUT_MAX (64ull * 1024 * 1024)

enum inflate_kind { INFLATE_NONE, INFLATE_GZIP, INFLATE_DEFLATE };

struct inflater {
	enum inflate_kind kind;
	bool started, ended;
	z_stream zs;
	uint64_t out_total;
};

/* The coding a Content-Encoding value names: INFLATE_NONE for identity,
 * -EPROTO for anything else (br, zstd, compress, a list of codings). */
int inflate_coding(const uint8_t *v, size_t len);
void inflater_init(struct inflater *f, enum inflate_kind kind);
/* Decodes n more bytes, handing the output to out.  -EBADMSG for a
 * malformed stream or bytes after its end, -EFBIG past INFLATE_OUT_MAX,
 * or out's error. */
int inflater_feed(struct inflater *f, const uint8_t *p, size_t n,
		  int (*out)(void *arg, const uint8_t *p, size_t n), void *arg);
/* The body ended: -EBADMSG if the stream had not. */
int inflater_finish(struct inflater *f);
void inflater_free(struct inflater *f);

#endif
