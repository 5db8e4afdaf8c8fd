/* HTTP/1.x message heads and body framing, as the egress proxy reads them
 * from a guest (requests) and from an upstream server (responses).
 *
 * Strict by design (RFC 9112): lines end in CRLF (a bare CR or bare LF is
 * an error), no obs-fold, no whitespace before a field's colon, no control
 * characters, field names are tokens, at most HTTP_FIELDS_MAX fields and
 * HTTP_HEAD_MAX bytes.  A request has at most one Host field.  Body framing
 * refuses Content-Length together with Transfer-Encoding, any coding other
 * than "chunked", and disagreeing Content-Length values: the classic
 * request-smuggling ambiguities are errors, never guesses. */
#ifndef KOSA8_PROXY_HTTP_HEAD_H
#define KOSA8_PROXY_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_HEAD_MAX (16 * 1024)
#define HTTP_FIELDS_MAX 100

/* Offsets into the parsed buffer. */
struct http_span {
	uint16_t off, len;
};

struct http_field {
	struct http_span name, value;   /* value without surrounding whitespace */
};

struct http_head {
	bool response;
	struct http_span method, target;   /* requests */
	int status;                        /* responses */
	int minor;                         /* HTTP/1.minor */
	struct http_field fields[HTTP_FIELDS_MAX];
	size_t nfields;
	int host;                          /* index of the Host field, or -1 */
	size_t len;                        /* bytes of the head, final CRLF included */
};

/* Parses a request (response false) or response head at the start of buf.
 * Returns the head's length when complete, 0 if more bytes are needed,
 * -EBADMSG if malformed, -E2BIG if longer than HTTP_HEAD_MAX. */
int http_head_parse(const uint8_t *buf, size_t len, bool response, struct http_head *h);

/* Whether field i's name is name (case-insensitive). */
bool http_field_is(const uint8_t *buf, const struct http_head *h, size_t i, const char *name);

/* The host name of a request's Host field without its port, into out.
 * -ENOENT without a Host field, -EINVAL for an empty or bracketed (IPv6)
 * host, a bad port, or one that does not fit. */
int http_host_name(const uint8_t *buf, const struct http_head *h, char *out, size_t outlen);

enum http_body { HTTP_BODY_NONE, HTTP_BODY_LENGTH, HTTP_BODY_CHUNKED, HTTP_BODY_CLOSE };

/* How the message's body is delimited (RFC 9112 6.3).  For a response,
 * head_request says the request was HEAD (no body whatever the fields say).
 * *length is set for HTTP_BODY_LENGTH.  -EBADMSG for ambiguous framing. */
int http_body_framing(const uint8_t *buf, const struct http_head *h, bool head_request,
		      enum http_body *kind, uint64_t *length);

/* A streaming decoder for a chunked body (RFC 9112 7.1), trailers
 * included.  Zero-initialise, then feed bytes as they come. */
struct http_chunked {
	int state;
	uint64_t left;        /* data bytes left in this chunk */
	unsigned digits;
	size_t line;          /* bytes of the current extension / trailer line */
	size_t trailer;       /* bytes of trailers so far */
	bool done;
};

/* Consumes bytes of in up to the end of the body.  Each run of chunk data
 * is passed to data (when not NULL).  Returns the bytes consumed (less than
 * len only when the body ended: c->done), or -EBADMSG / the first negative
 * value data returned. */
long http_chunked_feed(struct http_chunked *c, const uint8_t *in, size_t len,
		       int (*data)(void *arg, const uint8_t *p, size_t n), void *arg);

#endif
