/* Bounded parsers of what an image archive says about itself (manifest.h). */
#include "image/manifest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "common/util.h"

bool image_valid_name(const char *s)
{
	size_t n = strnlen(s, IMAGE_NAME_MAX + 1);

	if (n == 0 || n > IMAGE_NAME_MAX || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

bool image_valid_key(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");

	return n == IMAGE_KEY_LEN && s[n] == '\0';
}

int image_hex_sha(const char *hex, size_t len, uint8_t sha[32])
{
	if (len != 64)
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int hi = hex_digit((uint8_t)hex[2 * i]), lo = hex_digit((uint8_t)hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		sha[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void image_sha_hex(const uint8_t sha[32], char hex[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", sha[i]);
}

int image_err(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

#define bad(err, errlen, ...) image_err(err, errlen, -EBADMSG, __VA_ARGS__)

/* A string field that passes ok(), copied into buf. */
static int str_field(const cJSON *j, const char *key, bool (*ok)(const char *), char *buf, size_t len)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, key);

	if (!cJSON_IsString(f) || strlen(f->valuestring) >= len || !ok(f->valuestring))
		return -EBADMSG;
	memcpy(buf, f->valuestring, strlen(f->valuestring) + 1);
	return 0;
}

static bool valid_arch(const char *s)
{
	return !strcmp(s, "x86_64") || !strcmp(s, "arm64");
}

/* build.sh's sizes: whole MiB from 256M to 1T. */
static int size_field(const cJSON *j, uint64_t *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "virtual_size");
	double d;

	if (!cJSON_IsNumber(f))
		return -EBADMSG;
	d = f->valuedouble;
	if (!(d >= (double)IMAGE_SIZE_MIN && d <= (double)IMAGE_SIZE_MAX))
		return -EBADMSG;
	*out = (uint64_t)d;
	return (double)*out == d && *out % (1u << 20) == 0 ? 0 : -EBADMSG;
}

int image_manifest_parse(const char *text, size_t len, struct image_manifest *m, char *err, size_t errlen)
{
	cJSON *j;
	int rc = 0;

	memset(m, 0, sizeof(*m));
	if (len > IMAGE_MANIFEST_MAX)
		return bad(err, errlen, "manifest.json is larger than %u bytes", IMAGE_MANIFEST_MAX);
	j = cJSON_ParseWithLength(text, len);
	if (!cJSON_IsObject(j))
		rc = bad(err, errlen, "manifest.json is not a JSON object");
	else if (str_field(j, "name", image_valid_name, m->name, sizeof(m->name)))
		rc = bad(err, errlen, "manifest.json: \"name\" is not an image name (a-z 0-9 . _ -, up to 64)");
	else if (str_field(j, "key", image_valid_key, m->key, sizeof(m->key)))
		rc = bad(err, errlen, "manifest.json: \"key\" is not 16 hex digits");
	else if (str_field(j, "arch", valid_arch, m->arch, sizeof(m->arch)))
		rc = bad(err, errlen, "manifest.json: \"arch\" is not x86_64 or arm64");
	else if (size_field(j, &m->virtual_size))
		rc = bad(err, errlen, "manifest.json: \"virtual_size\" is not a whole number of MiB from 256M to 1T");
	cJSON_Delete(j);
	return rc;
}

/* One line of a checksum file: its hash, and the name after it (NULL, 0
 * when the line has only the hash). */
static int sums_line(const char *p, size_t n, uint8_t sha[32], const char **name, size_t *nlen)
{
	if (n < 64 || image_hex_sha(p, 64, sha))
		return -EBADMSG;
	*name = NULL;
	*nlen = 0;
	p += 64;
	n -= 64;
	while (n && (*p == ' ' || *p == '\t' || *p == '\r')) {
		p++;
		n--;
	}
	if (n && *p == '*') {
		p++;
		n--;
	}
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\r'))
		n--;
	if (n) {
		*name = p;
		*nlen = n;
	}
	return 0;
}

int image_sums_find(const char *text, size_t len, const char *base, uint8_t sha[32])
{
	const char *p = text, *end = text + len;
	uint8_t h[32], only[32];
	int lines = 0;

	if (len > IMAGE_SUMS_MAX)
		return -EBADMSG;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *name;
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p), nlen;

		if (n && sums_line(p, n, h, &name, &nlen))
			return -EBADMSG;
		if (n) {
			if (name && nlen == strlen(base) && !memcmp(name, base, nlen)) {
				memcpy(sha, h, 32);
				return 0;
			}
			memcpy(only, h, 32);
			lines++;
		}
		p += n + 1;
	}
	if (lines != 1)
		return lines ? -ENOENT : -EBADMSG;
	memcpy(sha, only, 32);
	return 0;
}

int image_id_sidecar_sha(const char *text, size_t len, uint8_t sha[32])
{
	const char *end = text + len, *p;

	if (len > IMAGE_ID_SIDECAR_MAX || !(p = memmem(text, len, "\nsha256 ", 8)))
		return -EBADMSG;
	p += 8;
	if (end - p != 65 || p[64] != '\n')
		return -EBADMSG;
	return image_hex_sha(p, 64, sha);
}
