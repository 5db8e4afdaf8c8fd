/* libFuzzer target: what an image archive says about itself
 * (src/image/manifest.c): its manifest.json, a checksum file in
 * sha256sum's format (SOURCE.sha256, from a download's server) and the
 * disk identity sidecar.  The first byte picks the parser.
 *
 * An accepted manifest has a valid name and key, a known architecture and
 * a whole-MiB size within build.sh's bounds, and parsing it again gives the
 * same; an accepted checksum is 64 hex digits found in the input.
 *
 *   fuzz/run.sh 60 image_meta */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/manifest.h"

static void check_manifest(const char *p, size_t n)
{
	struct image_manifest m, again;
	char err[IMAGE_ERR_LEN] = "";

	if (image_manifest_parse(p, n, &m, err, sizeof(err))) {
		if (!err[0])
			abort();
		return;
	}
	if (!image_valid_name(m.name) || !image_valid_key(m.key) ||
	    (strcmp(m.arch, "x86_64") && strcmp(m.arch, "arm64")) || m.virtual_size < IMAGE_SIZE_MIN ||
	    m.virtual_size > IMAGE_SIZE_MAX || m.virtual_size % (1u << 20))
		abort();
	if (image_manifest_parse(p, n, &again, err, sizeof(err)) || memcmp(&m, &again, sizeof(m)))
		abort();
}

/* The hash, written back as hex, appears in the input (either case). */
static void check_found(const char *p, size_t n, const uint8_t sha[32])
{
	char hex[65];

	image_sha_hex(sha, hex);
	for (size_t i = 0; i + 64 <= n; i++) {
		size_t k = 0;
		while (k < 64 && tolower((unsigned char)p[i + k]) == hex[k])
			k++;
		if (k == 64)
			return;
	}
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data + 1;
	size_t n = size ? size - 1 : 0;
	uint8_t sha[32];

	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		check_manifest(p, n);
		break;
	case 1:
		if (image_sums_find(p, n, "demo.tar.zst", sha) == 0)
			check_found(p, n, sha);
		break;
	default:
		if (image_id_sidecar_sha(p, n, sha) == 0)
			check_found(p, n, sha);
		break;
	}
	return 0;
}
