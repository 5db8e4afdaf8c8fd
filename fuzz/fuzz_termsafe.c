/* libFuzzer target: the terminal escaper (src/common/termsafe.c) over
 * bytes a guest or a log record holds.  Whatever comes in, nothing a
 * terminal acts on comes out raw (C0 but \n and \t, DEL, C1, bidi
 * controls), the output is well-formed UTF-8, and feeding the input in two
 * chunks (the tail carried over as kosa8 logs does) gives the same output.
 *
 *   fuzz/run.sh 60 termsafe */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/termsafe.h"

/* Escapes data whole, or in two chunks split at `cut`; output malloc'd. */
static char *escape(const uint8_t *data, size_t size, size_t cut, unsigned flags, size_t *len)
{
	char *out = NULL;
	FILE *f = open_memstream(&out, len);
	uint8_t *buf;
	size_t used, have;

	if (!f)
		abort();
	used = term_write(f, data, cut, flags);
	have = cut - used;
	if (have > 3)
		abort(); /* at most a cut UTF-8 sequence or a \r waits */
	/* Exactly as long as the chunk: a read past it is ASan's to see. */
	if (!(buf = malloc(have + size - cut ? have + size - cut : 1)))
		abort();
	memcpy(buf, data + used, have);
	memcpy(buf + have, data + cut, size - cut);
	if (term_write(f, buf, have + size - cut, flags | TERM_FINAL) != have + size - cut)
		abort();
	fclose(f);
	free(buf);
	return out;
}

static void check_clean(const unsigned char *p, size_t n, unsigned flags)
{
	for (size_t i = 0; i < n; i++) {
		unsigned c = p[i];
		if ((c < 0x20 && !((flags & TERM_KEEP_LINES) && (c == '\n' || c == '\t'))) || c == 0x7f)
			abort();
		if (c == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
			abort();
		if (c == 0xe2 && i + 2 < n && p[i + 1] == 0x80 &&
		    ((p[i + 2] >= 0xa8 && p[i + 2] <= 0xae) || p[i + 2] == 0x8e || p[i + 2] == 0x8f))
			abort();
		if (c == 0xe2 && i + 2 < n && p[i + 1] == 0x81 && p[i + 2] >= 0xa6 && p[i + 2] <= 0xa9)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned modes[] = {0, TERM_KEEP_LINES, TERM_JSON};
	size_t cut = size ? data[0] % (size + 1) : 0, n1, n2;

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		char *whole = escape(data, size, size, modes[m], &n1);
		char *split = escape(data, size, cut, modes[m], &n2);
		if (n1 != n2 || memcmp(whole, split, n1))
			abort();
		check_clean((const unsigned char *)whole, n1, modes[m]);
		free(whole);
		free(split);
	}
	return 0;
}
