#include "common/termsafe.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Length of the well-formed UTF-8 sequence at p (RFC 3629, table 3-7 of
 * the Unicode standard), 0 when the bytes there are not one, -1 when the
 * input ends before the sequence could be decided. */
static int utf8_len(const uint8_t *p, size_t n, uint32_t *cp)
{
	uint8_t c = p[0], lo = 0x80, hi = 0xbf;
	int len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	/* the second byte's range rules out overlongs, surrogates, > U+10FFFF */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	*cp = c & (0x7f >> len);
	for (int i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return -1;
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
		*cp = *cp << 6 | (p[i] & 0x3f);
	}
	return len;
}

/* Characters a terminal acts on although they are printable UTF-8 (C1,
 * bidi controls, line separators), and those that print as nothing and so
 * hide text from the reader (Unicode's default-ignorable code points but
 * the variation selectors, which only pick a glyph: zero-width spaces and
 * joiners, fillers, word joiners, BOM, the invisible tag block). */
static bool invisible_control(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x34f || cp == 0x61c ||
	       cp == 0x115f || cp == 0x1160 || cp == 0x17b4 || cp == 0x17b5 ||
	       (cp >= 0x180b && cp <= 0x180f) || (cp >= 0x200b && cp <= 0x200f) ||
	       (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0x3164 ||
	       cp == 0xfeff || cp == 0xffa0 || (cp >= 0xfff0 && cp <= 0xfffb) ||
	       (cp >= 0x1bca0 && cp <= 0x1bca3) || (cp >= 0x1d173 && cp <= 0x1d17a) ||
	       (cp >= 0xe0000 && cp <= 0xe007f);
}

/* \uXXXX (JSON: a surrogate pair above U+FFFF, so the output is the same
 * JSON), else \uXXXX or \UXXXXXXXX. */
static void put_escaped(FILE *f, uint32_t cp, bool json)
{
	if (cp <= 0xffff)
		fprintf(f, "\\u%04x", (unsigned)cp);
	else if (json)
		fprintf(f, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
			(unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
	else
		fprintf(f, "\\U%08x", (unsigned)cp);
}

size_t term_write(FILE *f, const void *buf, size_t n, unsigned flags)
{
	const uint8_t *p = buf;
	bool final = flags & TERM_FINAL, lines = flags & TERM_KEEP_LINES;
	size_t i = 0;
	uint32_t cp;
	int len;

	while (i < n) {
		uint8_t c = p[i];

		if (c == '\r' && lines && i + 1 == n && !final)
			break; /* a \r\n may be cut here */
		if (c == '\r' && lines && i + 1 < n && p[i + 1] == '\n') {
			i++;
			continue;
		}
		if (c < 0x20 || c == 0x7f) {
			if (lines && (c == '\n' || c == '\t'))
				fputc(c, f);
			else
				fprintf(f, "\\x%02x", c);
			i++;
			continue;
		}
		len = utf8_len(p + i, n - i, &cp);
		if (len < 0 && !final)
			break;
		if (len <= 0) {
			if (flags & TERM_JSON)
				fputs("\\ufffd", f);
			else
				fprintf(f, "\\x%02x", c);
			i++;
			continue;
		}
		if (invisible_control(cp))
			put_escaped(f, cp, flags & TERM_JSON);
		else
			fwrite(p + i, 1, (size_t)len, f);
		i += (size_t)len;
	}
	return i;
}

int term_copy_fd(int in, FILE *out, unsigned flags, bool raw)
{
	uint8_t buf[65536];
	size_t have = 0, used;
	ssize_t n;

	while ((n = read(in, buf + have, sizeof(buf) - have)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		have += (size_t)n;
		used = raw ? fwrite(buf, 1, have, out) : term_write(out, buf, have, flags);
		memmove(buf, buf + used, have - used);
		have -= used;
	}
	if (have)
		term_write(out, buf, have, flags | TERM_FINAL);
	return fflush(out) ? -errno : 0;
}
