/* What an image archive says about itself, parsed from bytes that came
 * from anywhere (an archive, a download): the image's manifest.json
 * (written by guest/image/build.sh, docs/images.md), a checksum file in
 * sha256sum(1)'s format, and the disk identity sidecar.  Every parser is
 * bounded by its input length and fuzzed (fuzz/fuzz_image_meta.c). */
#ifndef KOSA8_IMAGE_MANIFEST_H
#define KOSA8_IMAGE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAGE_NAME_MAX 64
#define IMAGE_KEY_LEN 16
/* build.sh's own bounds on a recipe's size. */
#define IMAGE_SIZE_MIN (256ull << 20)
#define IMAGE_SIZE_MAX (1ull << 40)
/* The default image's manifest is about 20 KiB (235 packages). */
#define IMAGE_MANIFEST_MAX (1u << 20)
#define IMAGE_RECIPE_MAX (64u << 10)
#define IMAGE_ID_SIDECAR_MAX 1024u
#define IMAGE_SUMS_MAX (64u << 10)
#define IMAGE_ERR_LEN 512

struct image_manifest {
	char name[IMAGE_NAME_MAX + 1];
	char key[IMAGE_KEY_LEN + 1];
	char arch[16];            /* "x86_64" or "arm64" */
	uint64_t virtual_size;    /* the disk file's size */
};

/* An image name is a cache folder: a-z 0-9 . _ -, starting with a letter
 * or digit, up to 64 (build.sh's rule). */
bool image_valid_name(const char *s);
/* A key: 16 lower-case hex digits. */
bool image_valid_key(const char *s);

/* 0, or -EBADMSG with the reason in err. */
int image_manifest_parse(const char *text, size_t len, struct image_manifest *m, char *err,
			 size_t errlen);

/* The SHA-256 a checksum file gives for file name base: a line "HEX" alone,
 * or "HEX  NAME" / "HEX *NAME" as sha256sum writes them, the one naming
 * base (or the only line).  0, -ENOENT (no line for base), -EBADMSG. */
int image_sums_find(const char *text, size_t len, const char *base, uint8_t sha[32]);

/* The "sha256 HEX" line of a disk identity sidecar (disk/base_id.c). */
int image_id_sidecar_sha(const char *text, size_t len, uint8_t sha[32]);

/* Formats the reason into err and returns rc: the image part's errors. */
int image_err(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* 64 hex digits (either case) to bytes: 0 or -EINVAL. */
int image_hex_sha(const char *hex, size_t len, uint8_t sha[32]);
void image_sha_hex(const uint8_t sha[32], char hex[65]);

#endif
