/* Downloads (fetch.h). */
#include "image/fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/fileio.h"
#include "common/sha256.h"

#define STALL_SECONDS 60L
#define CONNECT_SECONDS 30L

bool image_is_url(const char *s)
{
	return !strncasecmp(s, "http://", 7) || !strncasecmp(s, "https://", 8) || !strncasecmp(s, "file://", 7);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;

static void global_init(void)
{
	init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct dl {
	int fd;               /* or -1: into mem */
	char *mem;
	size_t mem_len;
	uint64_t got, max, total;
	struct sha256 sha;
	const struct image_progress *p;
	int err;              /* -errno that stopped the transfer */
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ctx)
{
	struct dl *d = ctx;
	size_t n = size * nmemb;

	if (n > d->max - d->got) {
		d->err = -EFBIG;
		return 0;
	}
	if (d->fd >= 0 && write_all(d->fd, ptr, n) < 0) {
		d->err = -errno;
		return 0;
	}
	if (d->fd < 0) {
		memcpy(d->mem + d->mem_len, ptr, n);
		d->mem_len += n;
	}
	sha256_update(&d->sha, ptr, n);
	d->got += n;
	return n;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct dl *d = ctx;

	if (image_cancelled(d->p)) {
		d->err = -ECANCELED;
		return 1;
	}
	if (dltotal > 0)
		d->total = (uint64_t)dltotal;
	if (d->p && dlnow > 0)
		image_progress_report(d->p, "downloading", (uint64_t)dlnow, d->total, false);
	return 0;
}

static CURL *easy_new(const char *url, struct dl *d, char *errbuf)
{
	CURL *c;

	pthread_once(&once, global_init);
	if (init_rc != CURLE_OK || !(c = curl_easy_init()))
		return NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CONNECT_SECONDS);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, STALL_SECONDS);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)d->max);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kosa8-image-import");
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, d);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	return c;
}

/* 0, or the error: ours (d->err), a missing document, or curl's. */
static int perform(CURL *c, struct dl *d, const char *url, const char *errbuf, char *err, size_t errlen)
{
	CURLcode rc = curl_easy_perform(c);
	long status = 0;

	if (rc == CURLE_OK)
		return 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (d->err == -ECANCELED)
		snprintf(err, errlen, "interrupted");
	else if (d->err == -EFBIG || rc == CURLE_FILESIZE_EXCEEDED)
		snprintf(err, errlen, "%s: larger than %llu bytes", url, (unsigned long long)d->max);
	else if (d->err)
		snprintf(err, errlen, "%s: writing: %s", url, strerror(-d->err));
	else
		snprintf(err, errlen, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
	if (d->err)
		return d->err;
	if (rc == CURLE_FILESIZE_EXCEEDED)
		return -EFBIG;
	if (status == 404 || status == 410 || rc == CURLE_FILE_COULDNT_READ_FILE)
		return -ENOENT;
	return -EIO;
}

int image_fetch(const char *url, int fd, uint64_t max, const struct image_progress *p, uint8_t sha[32],
		uint64_t *got, char *err, size_t errlen)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct dl d = {.fd = fd, .max = max, .p = p};
	CURL *c;
	int rc;

	sha256_init(&d.sha);
	if (!(c = easy_new(url, &d, errbuf))) {
		snprintf(err, errlen, "libcurl: cannot start a transfer");
		return -ENOMEM;
	}
	rc = perform(c, &d, url, errbuf, err, errlen);
	curl_easy_cleanup(c);
	if (!rc)
		image_progress_report(p, "downloading", d.got, d.total ? d.total : d.got, true);
	*got = d.got;
	if (!rc)
		sha256_final(&d.sha, sha);
	return rc;
}

int image_fetch_small(const char *url, size_t max, char **buf, size_t *len, char *err, size_t errlen)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct dl d = {.fd = -1, .max = max, .mem = malloc(max + 1)};
	CURL *c;
	int rc;

	sha256_init(&d.sha);
	if (!d.mem || !(c = easy_new(url, &d, errbuf))) {
		free(d.mem);
		snprintf(err, errlen, "libcurl: cannot start a transfer");
		return -ENOMEM;
	}
	rc = perform(c, &d, url, errbuf, err, errlen);
	curl_easy_cleanup(c);
	if (rc) {
		free(d.mem);
		return rc;
	}
	d.mem[d.mem_len] = 0;
	*buf = d.mem;
	*len = d.mem_len;
	return 0;
}
