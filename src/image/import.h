/* Images moved between machines: export one from the cache to an archive
 * file (archive.h), import one from a path or URL into the cache.
 *
 * An import happens in <cache>/images/.import-XXXXXX under the cache's
 * lock (the one guest/image/build.sh holds while it builds): the archive
 * is downloaded there and checked against its SHA-256 before libarchive
 * reads a byte of it; the image is unpacked into a folder beside it, its
 * disk identity computed (and checked against the archive's claim), and
 * the folder renamed to <images>/NAME/KEY only then.  Whatever fails, or
 * an interrupt, removes the temporary folder; one left by a killed import
 * is removed by the next.  An imported image carries import.json (where
 * it came from, its checksum); lookups use it when no build of the
 * current recipe and agent exists (image_find_imported). */
#ifndef KOSA8_IMAGE_IMPORT_H
#define KOSA8_IMAGE_IMPORT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/archive.h"

#define IMAGE_IMPORT_INFO "import.json"
/* The largest archive accepted: a full 1 TiB disk, incompressible. */
#define IMAGE_ARCHIVE_MAX (IMAGE_SIZE_MAX + (1ull << 30))

enum image_verified { IMAGE_UNVERIFIED, IMAGE_SHA_GIVEN, IMAGE_SHA_FILE };

struct image_import_opts {
	const char *source;        /* a path, or an http(s):// or file:// URL */
	const char *name;          /* NULL: the manifest's */
	const uint8_t *sha;        /* 32 bytes, or NULL: SOURCE.sha256 if there is one */
	bool no_verify;            /* a URL without any checksum is refused otherwise */
	bool force;                /* replace an image of the same name and key */
	const struct image_progress *progress;
	void (*note)(void *ctx, const char *line); /* one line for the user */
};

struct image_import_result {
	char path[PATH_MAX];       /* the imported disk */
	char name[IMAGE_NAME_MAX + 1], key[IMAGE_KEY_LEN + 1];
	char sha_hex[65];          /* of the archive */
	enum image_verified verified;
	bool replaced;
};

/* 0 or -errno with err: -EEXIST (the image is there, no force), -EBADMSG
 * (a refused archive), -EPERM (a URL with no checksum), -EKEYREJECTED (a
 * checksum that does not match), -ECANCELED. */
int image_import(const struct image_import_opts *o, struct image_import_result *r, char *err, size_t errlen);

/* Writes the image in dir (<images>/NAME/KEY) to file (written whole, then
 * renamed: a failed export leaves no file), its SHA-256 in sha, and with
 * sums also "FILE.sha256" in sha256sum's format. */
int image_export(const char *dir, const char *file, bool sums, const struct image_progress *p,
		 uint8_t sha[32], char *err, size_t errlen);

/* <cache>/images for x86_64 guests, <cache>/images-ARCH for others. */
int image_root(const char *arch, char *buf, size_t len);

/* The newest imported image named name under root: its disk in out. 0 or
 * -ENOENT. */
int image_find_imported(const char *root, const char *name, char *out, size_t len);

#endif
