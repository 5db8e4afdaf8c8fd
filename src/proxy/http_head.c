/* Strict HTTP/1.x head parser and body framing (http_head.h). */
#include "proxy/http_head.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"

#define CHUNK_LINE_MAX 1024          /* a chunk-size line with its extensions */
#define TRAILER_MAX (8 * 1024)

static bool tchar(uint8_t c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* field-value and reason-phrase bytes: VCHAR, SP, HTAB, obs-text. */
static bool vbyte(uint8_t c)
{
	return c == ' ' || c == '\t' || (c > 0x20 && c != 0x7f);
}

/* Finds the end of the head: the first CRLF CRLF.  Any CR not followed by
 * LF, or LF not preceded by CR, is an error. */
static int head_end(const uint8_t *buf, size_t len, size_t *end)
{
	size_t lim = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;

	for (size_t i = 0; i < lim; i++) {
		if (buf[i] == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return -EBADMSG;
		if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
			return -EBADMSG;
		if (buf[i] == '\n' && i >= 3 && buf[i - 2] == '\n') {
			*end = i + 1;
			return 1;
		}
	}
	return len >= HTTP_HEAD_MAX ? -E2BIG : 0;
}

static int version(const uint8_t *p, size_t n, int *minor)
{
	if (n != 8 || memcmp(p, "HTTP/1.", 7) || (p[7] != '0' && p[7] != '1'))
		return -EBADMSG;
	*minor = p[7] - '0';
	return 0;
}

static int request_line(const uint8_t *b, size_t n, struct http_head *h)
{
	size_t i = 0, t;

	while (i < n && tchar(b[i]))
		i++;
	if (i == 0 || i >= n || b[i] != ' ')
		return -EBADMSG;
	h->method = (struct http_span){0, (uint16_t)i};
	t = ++i;
	while (i < n && b[i] > 0x20 && b[i] < 0x7f)
		i++;
	if (i == t || i >= n || b[i] != ' ')
		return -EBADMSG;
	h->target = (struct http_span){(uint16_t)t, (uint16_t)(i - t)};
	return version(b + i + 1, n - i - 1, &h->minor);
}

static int status_line(const uint8_t *b, size_t n, struct http_head *h)
{
	if (n < 12 || version(b, 8, &h->minor) || b[8] != ' ' || !isdigit(b[9]) ||
	    !isdigit(b[10]) || !isdigit(b[11]) || (n > 12 && b[12] != ' '))
		return -EBADMSG;
	h->status = (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
	for (size_t i = 13; i < n; i++) {
		if (!vbyte(b[i]))
			return -EBADMSG;
	}
	return h->status >= 100 ? 0 : -EBADMSG;
}

static int field_line(const uint8_t *buf, size_t off, size_t n, struct http_head *h)
{
	const uint8_t *b = buf + off;
	size_t i = 0, vs, ve;

	if (h->nfields == HTTP_FIELDS_MAX)
		return -EBADMSG;
	while (i < n && tchar(b[i]))
		i++;
	/* A line starting with whitespace is obs-fold; whitespace before the
	 * colon is forbidden (RFC 9112 5.1). */
	if (i == 0 || i >= n || b[i] != ':')
		return -EBADMSG;
	vs = i + 1;
	while (vs < n && (b[vs] == ' ' || b[vs] == '\t'))
		vs++;
	ve = n;
	while (ve > vs && (b[ve - 1] == ' ' || b[ve - 1] == '\t'))
		ve--;
	for (size_t k = vs; k < ve; k++) {
		if (!vbyte(b[k]))
			return -EBADMSG;
	}
	h->fields[h->nfields] = (struct http_field){
		{(uint16_t)off, (uint16_t)i}, {(uint16_t)(off + vs), (uint16_t)(ve - vs)}};
	h->nfields++;
	return 0;
}

bool http_field_is(const uint8_t *buf, const struct http_head *h, size_t i, const char *name)
{
	const struct http_span *s = &h->fields[i].name;

	return strlen(name) == s->len && !strncasecmp((const char *)buf + s->off, name, s->len);
}

int http_head_parse(const uint8_t *buf, size_t len, bool response, struct http_head *h)
{
	size_t end, pos, eol;
	int err;

	memset(h, 0, sizeof(*h));
	h->response = response;
	h->host = -1;
	if ((err = head_end(buf, len, &end)) <= 0)
		return err;
	eol = (size_t)((const uint8_t *)memchr(buf, '\r', end) - buf);
	if ((err = response ? status_line(buf, eol, h) : request_line(buf, eol, h)))
		return err;
	for (pos = eol + 2; pos < end - 2; pos = eol + 2) {
		eol = (size_t)((const uint8_t *)memchr(buf + pos, '\r', end - pos) - buf);
		if ((err = field_line(buf, pos, eol - pos, h)))
			return err;
		if (!response && http_field_is(buf, h, h->nfields - 1, "host")) {
			if (h->host >= 0)
				return -EBADMSG;   /* RFC 9112 3.2: exactly one Host */
			h->host = (int)h->nfields - 1;
		}
	}
	h->len = end;
	return (int)end;
}

int http_host_name(const uint8_t *buf, const struct http_head *h, char *out, size_t outlen)
{
	const char *v;
	size_t n, name;

	if (h->host < 0)
		return -ENOENT;
	v = (const char *)buf + h->fields[h->host].value.off;
	n = h->fields[h->host].value.len;
	name = n;
	for (size_t i = 0; i < n; i++) {
		if (v[i] == ':') {
			name = i;
			break;
		}
	}
	if (name == 0 || v[0] == '[' || name >= outlen)
		return -EINVAL;
	if (name < n) {
		size_t digits = n - name - 1;
		if (digits == 0 || digits > 5)
			return -EINVAL;
		for (size_t i = name + 1; i < n; i++) {
			if (!isdigit((unsigned char)v[i]))
				return -EINVAL;
		}
	}
	memcpy(out, v, name);
	out[name] = '\0';
	return 0;
}

static int content_length(const uint8_t *buf, const struct http_span *v, uint64_t *out)
{
	uint64_t n = 0;

	if (v->len == 0 || v->len > 18)
		return -EBADMSG;
	for (size_t i = 0; i < v->len; i++) {
		uint8_t c = buf[v->off + i];
		if (!isdigit(c))
			return -EBADMSG;   /* no lists, signs or spaces: one number */
		n = n * 10 + (uint64_t)(c - '0');
	}
	*out = n;
	return 0;
}

int http_body_framing(const uint8_t *buf, const struct http_head *h, bool head_request,
		      enum http_body *kind, uint64_t *length)
{
	int te = 0, cl = 0;
	uint64_t n = 0, first = 0;

	*length = 0;
	for (size_t i = 0; i < h->nfields; i++) {
		const struct http_span *v = &h->fields[i].value;
		if (http_field_is(buf, h, i, "transfer-encoding")) {
			if (te++ || v->len != 7 || strncasecmp((const char *)buf + v->off, "chunked", 7))
				return -EBADMSG;
		} else if (http_field_is(buf, h, i, "content-length")) {
			if (content_length(buf, v, &n) || (cl++ && n != first))
				return -EBADMSG;
			first = n;
		}
	}
	if (te && cl)
		return -EBADMSG;
	if (h->response && (head_request || h->status < 200 || h->status == 204 || h->status == 304))
		*kind = HTTP_BODY_NONE;
	else if (te)
		*kind = HTTP_BODY_CHUNKED;
	else if (cl)
		*kind = HTTP_BODY_LENGTH, *length = first;
	else
		*kind = h->response ? HTTP_BODY_CLOSE : HTTP_BODY_NONE;
	if (*kind == HTTP_BODY_CHUNKED && h->minor == 0)
		return -EBADMSG;   /* HTTP/1.0 has no chunked coding */
	return 0;
}

enum {
	CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF,
	CH_TRAILER_START, CH_TRAILER, CH_TRAILER_LF, CH_END_LF,
};

/* One byte of everything but chunk data. */
static int chunked_byte(struct http_chunked *c, uint8_t b)
{
	int v;

	switch (c->state) {
	case CH_SIZE:
		if ((v = hex_digit(b)) >= 0) {
			if (++c->digits > 15)
				return -EBADMSG;
			c->left = c->left << 4 | (uint64_t)v;
			return 0;
		}
		if (!c->digits)
			return -EBADMSG;
		c->line = c->digits;
		if (b == '\r')
			c->state = CH_SIZE_LF;
		else if (b == ';' || b == ' ' || b == '\t')
			c->state = CH_EXT;
		else
			return -EBADMSG;
		return 0;
	case CH_EXT:
		if (++c->line > CHUNK_LINE_MAX || (b != '\r' && !vbyte(b)))
			return -EBADMSG;
		if (b == '\r')
			c->state = CH_SIZE_LF;
		return 0;
	case CH_SIZE_LF:
		if (b != '\n')
			return -EBADMSG;
		c->digits = 0;
		c->state = c->left ? CH_DATA : CH_TRAILER_START;
		return 0;
	case CH_DATA_CR:
		if (b != '\r')
			return -EBADMSG;
		c->state = CH_DATA_LF;
		return 0;
	case CH_DATA_LF:
		if (b != '\n')
			return -EBADMSG;
		c->state = CH_SIZE;
		return 0;
	case CH_TRAILER_START:
		if (b == '\r') {
			c->state = CH_END_LF;
			return 0;
		}
		c->state = CH_TRAILER;
		c->line = 0;
		/* fall through */
	case CH_TRAILER:
		if (++c->trailer > TRAILER_MAX || (b != '\r' && !vbyte(b)))
			return -EBADMSG;
		if (b == '\r')
			c->state = CH_TRAILER_LF;
		return 0;
	case CH_TRAILER_LF:
		if (b != '\n')
			return -EBADMSG;
		c->state = CH_TRAILER_START;
		return 0;
	case CH_END_LF:
		if (b != '\n')
			return -EBADMSG;
		c->done = true;
		return 0;
	}
	return -EBADMSG;
}

long http_chunked_feed(struct http_chunked *c, const uint8_t *in, size_t len,
		       int (*data)(void *arg, const uint8_t *p, size_t n), void *arg)
{
	size_t i = 0;
	int err;

	while (i < len && !c->done) {
		if (c->state == CH_DATA) {
			size_t n = len - i < c->left ? len - i : (size_t)c->left;
			if (data && (err = data(arg, in + i, n)) < 0)
				return err;
			i += n;
			c->left -= n;
			if (!c->left)
				c->state = CH_DATA_CR;
			continue;
		}
		if ((err = chunked_byte(c, in[i])))
			return err;
		i++;
	}
	return (long)i;
}
