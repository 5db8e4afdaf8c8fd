/* Downloads with libcurl: http, https and file URLs only (redirects to
 * http or https only), failing on an HTTP error, on a stall of a minute,
 * and beyond a size bound. */
#ifndef KOSA8_IMAGE_FETCH_H
#define KOSA8_IMAGE_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/archive.h"

/* http://, https:// or file:// (case-insensitive scheme). */
bool image_is_url(const char *s);

/* Writes the body of url to fd, at most max bytes; sha gets its SHA-256
 * and *got its length.  0, -ECANCELED, -EFBIG, or -EIO with err. */
int image_fetch(const char *url, int fd, uint64_t max, const struct image_progress *p, uint8_t sha[32],
		uint64_t *got, char *err, size_t errlen);

/* A small document (a checksum file) into *buf (NUL-terminated, free()):
 * 0, -ENOENT when the server has none (404, 410, a missing file), -EFBIG
 * beyond max, -EIO with err. */
int image_fetch_small(const char *url, size_t max, char **buf, size_t *len, char *err, size_t errlen);

#endif
