#include "common/termsafe.h"

#include <stdint.h>
#include <errno.h>
#include <unistd.h>
#include <string.h>

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

/* Characters a terminal acts on although they are printable UTF-8. */
static bool invisible_control(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
	       (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
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
		if (c == '\r' && lines && p[i + 1] == '\n') {
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
			fprintf(f, "\\u%04x", (unsigned)cp);
		else
			fwrite(p + i, 1, (size_t)len, f);
		i += (size_t)len;
	}
	return i;
}

int term_copy_fd(int in, FILE *f, bool raw)
{
	unsigned char buf[65536];
	size_t have = 0, used;
	ssize_t n;

	while ((n = read(in, buf + have, sizeof(buf) - have)) > 0) {
		have += (size_t)n;
		if (raw) {
			fwrite(buf, 1, have, f);
			have = 0;
			continue;
		}
		used = term_write(f, buf, have, TERM_KEEP_LINES);
		memmove(buf, buf + used, have - used);
		have -= used;
	}
	if (have)
		term_write(f, buf, have, TERM_KEEP_LINES | TERM_FINAL);
	fflush(f);
	return n < 0 ? -errno : 0;
}
