/* AP_TRUST: the host's CA certificate into the guest's trust store, done
 * here, inside the guest, so that no host code ever reads the guest's files
 * to install it (what update-ca-certificates would do, without running it):
 * the certificate goes where Debian keeps local CAs, and into the bundle
 * curl, git, python and OpenSSL read, unless it is there already. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CA_DIR "/usr/local/share/ca-certificates"
#define CA_FILE CA_DIR "/kosa8-sandbox.crt"
#define BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define BUNDLE_MAX (16 * 1024 * 1024)

static bool pem_ok(const uint8_t *p, size_t len)
{
	static const char begin[] = "-----BEGIN CERTIFICATE-----";
	for (size_t i = 0; i < len; i++)
		if ((p[i] < 0x20 || p[i] > 0x7e) && p[i] != '\n' && p[i] != '\r')
			return false;
	return len > sizeof(begin) && !memcmp(p, begin, sizeof(begin) - 1) &&
	       memmem(p, len, "-----END CERTIFICATE-----", 25) && p[len - 1] == '\n';
}

/* Writes text into a new file beside path and renames it over path: a
 * reader sees the old or the new file, never half of one. */
static int replace_file(const char *path, const void *text, size_t len)
{
	char tmp[256];
	snprintf(tmp, sizeof(tmp), "%s.kosa8-new", path);
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = write_all(fd, text, len);
	if (rc == 0 && fchmod(fd, 0644) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

/* The bundle as it is (empty if missing) with room for extra more bytes;
 * a bundle over BUNDLE_MAX, or that is no regular file, is refused. */
static int read_bundle(uint8_t **buf, size_t *len, size_t extra)
{
	int fd = open(BUNDLE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), rc = 0;
	uint8_t *p;

	*buf = NULL;
	*len = 0;
	if (fd < 0 && errno != ENOENT)
		return -errno;
	if (fd >= 0) {
		rc = read_fd(fd, BUNDLE_MAX, buf, len);
		close(fd);
	}
	if (rc == 0 && !(p = realloc(*buf, *len + extra)))
		rc = -ENOMEM;
	if (rc) {
		free(*buf);
		*buf = NULL;
		return rc;
	}
	*buf = p;
	return 0;
}

int trust_ca(struct ap_conn *c, const struct ap_frame *f)
{
	uint8_t *text = NULL;
	size_t len = 0;
	const char *what = CA_FILE;
	if (!pem_ok(f->p, f->h.len))
		return ap_conn_send_error(c, f->h.chan, EINVAL, "trust: not one PEM certificate");
	if (mkdir(CA_DIR, 0755) < 0 && errno != EEXIST)
		return ap_conn_send_error(c, f->h.chan, errno, "trust: %s: %s", CA_DIR, strerror(errno));
	int rc = replace_file(CA_FILE, f->p, f->h.len);
	if (rc == 0) {
		what = BUNDLE;
		rc = read_bundle(&text, &len, f->h.len + 1);
	}
	/* Restarts find it there already. */
	if (rc == 0 && !memmem(text, len, f->p, f->h.len)) {
		if (len && text[len - 1] != '\n')
			text[len++] = '\n';
		memcpy(text + len, f->p, f->h.len);
		rc = replace_file(BUNDLE, text, len + f->h.len);
	}
	free(text);
	if (rc)
		return ap_conn_send_error(c, f->h.chan, -rc, "trust: %s: %s", what, strerror(-rc));
	return ap_conn_send(c, AP_OK, f->h.chan, NULL, 0);
}
