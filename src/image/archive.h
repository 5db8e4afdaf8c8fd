/* One image as one archive file: a pax tar (zstd-compressed when written;
 * zstd, gzip, xz or none when read) of exactly these members, in order:
 *
 *     manifest.json            required, first
 *     recipe                   optional
 *     rootfs.ext4.kosa8-id     optional: the disk identity (disk/base_id.c)
 *     rootfs.ext4              required, last: the disk, as a sparse entry
 *
 * An archive is read as hostile: any other name, a link, a directory, an
 * absolute or ".." path, a member over its bound, a disk whose size is not
 * the manifest's, a data block outside the disk, or anything after the disk
 * is refused with the reason.  Files are created by these fixed names in a
 * directory the caller made (O_EXCL, O_NOFOLLOW): nothing in the archive
 * chooses a path. */
#ifndef KOSA8_IMAGE_ARCHIVE_H
#define KOSA8_IMAGE_ARCHIVE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/manifest.h"

#define IMAGE_DISK "rootfs.ext4"
#define IMAGE_MANIFEST "manifest.json"
#define IMAGE_RECIPE "recipe"
#define IMAGE_ID_SIDECAR "rootfs.ext4.kosa8-id"

/* How a long step reports: what it does, bytes done of total (0: unknown);
 * final once at its end.  cancel, when set by a signal, stops the step
 * at its next block with -ECANCELED. */
struct image_progress {
	void (*fn)(void *ctx, const char *what, uint64_t done, uint64_t total, bool final);
	void *ctx;
	volatile sig_atomic_t *cancel;
};

void image_progress_report(const struct image_progress *p, const char *what, uint64_t done,
			   uint64_t total, bool final);
bool image_cancelled(const struct image_progress *p);

/* Writes the image in dirfd (a <cache>/images/NAME/KEY folder) to outfd as
 * an archive; sha gets the SHA-256 of the bytes written.  0 or -errno, the
 * reason in err. */
int image_archive_write(int dirfd, int outfd, const struct image_progress *p, uint8_t sha[32],
			char *err, size_t errlen);

struct image_unpacked {
	struct image_manifest m;
	bool has_id, has_recipe;
	uint8_t id_sha[32];   /* what the archive's identity sidecar claims */
};

/* Unpacks the archive read from fd (size bytes, for progress) into dirfd,
 * an empty folder; the identity sidecar is not written, only read into u.
 * 0, -EBADMSG (the archive is refused: err says why), -ECANCELED, -errno. */
int image_archive_unpack(int fd, uint64_t size, int dirfd, const struct image_progress *p,
			 struct image_unpacked *u, char *err, size_t errlen);
/* The same from memory (the fuzz target). */
int image_archive_unpack_mem(const void *buf, size_t len, int dirfd, struct image_unpacked *u,
			     char *err, size_t errlen);

#endif
