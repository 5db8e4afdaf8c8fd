#include "audit/bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/audit.h"
#include "common/util.h"

static int map_fd(int fd, size_t max, bool populate, const uint8_t **p, size_t *len)
{
	void *m;
	int err;

	*p = NULL;
	if ((err = fd_regular_size(fd, max, len)) || !*len)
		return err;
	m = mmap(NULL, *len, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	*p = m;
	return 0;
}

#define SCAN_BUF (1u << 20)

/* End of the last whole record, by lengths alone; a tail that is not the
 * start of a record (damage, not a torn write) is kept: no writer cuts it.
 * The lengths are read through fd a MiB at a time: on a virtual machine
 * with shadow page tables the first touch of each mapped page costs
 * microseconds, more than reading it. */
static int complete_end(int fd, const uint8_t *p, size_t len, size_t *end, size_t *torn)
{
	uint8_t *buf;
	size_t off = AUDIT_HDR_LEN, b_off = 0, b_len = 0, want;
	const uint8_t *h;
	ssize_t n;
	uint32_t l;

	*torn = 0;
	*end = len;
	if (len <= AUDIT_HDR_LEN)
		return 0;
	buf = malloc(SCAN_BUF);
	if (!buf)
		return -ENOMEM;
	while (len - off >= 8) {
		if (off < b_off || off + 8 > b_off + b_len) {
			want = len - off < SCAN_BUF ? len - off : SCAN_BUF;
			do
				n = pread(fd, buf, want, (off_t)off);
			while (n < 0 && errno == EINTR);
			if (n < 8)
				break; /* shrank under the lock: not kosa8; the mapping reads what is there */
			b_off = off;
			b_len = (size_t)n;
		}
		h = buf + (off - b_off);
		if (memcmp(h, AUDIT_REC_MAGIC, 4))
			break;
		l = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
		if (l < AUDIT_REC_MIN || l > AUDIT_REC_MAX || l > len - off)
			break;
		off += l;
	}
	free(buf);
	if (off == len || !audit_tail_is_torn(p + off, len - off))
		return 0;
	*torn = len - off;
	*end = off;
	return 0;
}

static size_t last_line_end(const uint8_t *p, size_t len)
{
	while (len && p[len - 1] != '\n')
		len--;
	return len;
}

/* Under a shared lock on the log: its size, and the heads mapped up to their
 * last complete line.  With scan, also where the last complete record ends
 * (complete_end) and the log mapped; without, log_len is the file's size
 * and nothing of the log is read here (audit_log_verify's one pass). */
static int snapshot_open(const char *log_path, size_t max, bool scan, struct audit_snapshot *s)
{
	char heads_path[4096];
	int fd, hfd = -1, err;

	memset(s, 0, sizeof(*s));
	err = audit_heads_path(log_path, heads_path, sizeof(heads_path));
	if (err)
		return err;
	fd = open(log_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused, not waited on */
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_SH) < 0)
		if (errno != EINTR) {
			err = -errno;
			goto out;
		}
	err = scan ? map_fd(fd, max, false, &s->log, &s->log_map)
		   : fd_regular_size(fd, max, &s->log_len);
	if (err)
		goto out;
	hfd = open(heads_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (hfd < 0 && errno != ENOENT) {
		err = -errno;
		goto out;
	}
	err = hfd < 0 ? 0 : map_fd(hfd, max, true, &s->heads, &s->heads_map);
	if (!err && scan)
		err = complete_end(fd, s->log, s->log_map, &s->log_len, &s->torn_bytes);
	if (err)
		goto out;
	s->heads_len = last_line_end(s->heads, s->heads_map);
	flock(fd, LOCK_UN); /* the mappings and the descriptor stay */
	s->have_fd = true;
	s->log_fd = fd;
	fd = -1;
out:
	if (hfd >= 0)
		close(hfd);
	if (fd >= 0)
		close(fd);
	if (err)
		audit_snapshot_free(s);
	return err;
}

int audit_snapshot_read(const char *log_path, size_t max, struct audit_snapshot *s)
{
	return snapshot_open(log_path, max, true, s);
}

int audit_log_verify(const char *log_path, size_t max, const uint8_t pub[AUDIT_PUBKEY_LEN],
		     struct audit_verify_result *res, size_t *torn_bytes)
{
	struct audit_snapshot s;
	int err;

	*torn_bytes = 0;
	err = snapshot_open(log_path, max, false, &s);
	if (err)
		return err;
	/* Bytes below the size seen under the lock are only ever appended to,
	 * except a torn tail, which a writer may cut and write over: a walk
	 * that meets one (or anything else it cannot settle on the spot)
	 * does not end cleanly at that size, and gives -ESTALE. */
	err = audit_verify_fd_clean(s.log_fd, s.log_len, s.heads, s.heads_len, pub, res);
	audit_snapshot_free(&s);
	if (err != -ESTALE)
		return err;
	/* The careful way: complete records found under the lock, a problem
	 * named over a mapping. */
	err = audit_snapshot_read(log_path, max, &s);
	if (err)
		return err;
	err = audit_snapshot_verify(&s, pub, res, NULL);
	*torn_bytes = s.torn_bytes;
	audit_snapshot_free(&s);
	return err;
}

int audit_snapshot_verify(const struct audit_snapshot *s, const uint8_t pub[AUDIT_PUBKEY_LEN],
			  struct audit_verify_result *res, merkle_hash **leaves)
{
	if (!s->have_fd)
		return audit_verify(s->log, s->log_len, s->heads, s->heads_len, pub, res, leaves);
	return audit_verify_fd(s->log_fd, s->log_len, s->heads, s->heads_len, pub, res, leaves);
}

void audit_snapshot_free(struct audit_snapshot *s)
{
	if (s->log)
		munmap((void *)s->log, s->log_map);
	if (s->heads)
		munmap((void *)s->heads, s->heads_map);
	if (s->have_fd)
		close(s->log_fd);
	memset(s, 0, sizeof(*s));
}

int audit_bundle_write(FILE *f, const struct audit_snapshot *s, const uint8_t pub[AUDIT_PUBKEY_LEN])
{
	char hex[2 * AUDIT_PUBKEY_LEN + 1];

	audit_hex(pub, AUDIT_PUBKEY_LEN, hex);
	if (fprintf(f, AUDIT_BUNDLE_MAGIC "pubkey %s\nlog %zu\n", hex, s->log_len) < 0 ||
	    fwrite(s->log, 1, s->log_len, f) != s->log_len ||
	    fprintf(f, "heads %zu\n", s->heads_len) < 0 ||
	    fwrite(s->heads, 1, s->heads_len, f) != s->heads_len || fputs("end\n", f) < 0 ||
	    fflush(f))
		return -EIO;
	return 0;
}

/* Expects "<word> <decimal>\n" at *off; the number must leave room for that
 * many bytes after the line. */
static int section(const uint8_t *buf, size_t len, size_t *off, const char *word, size_t *n)
{
	size_t w = strlen(word), i = *off + w + 1, v = 0, digits = 0;

	if (len - *off < w + 3 || memcmp(buf + *off, word, w) || buf[*off + w] != ' ')
		return -EBADMSG;
	for (; i < len && buf[i] >= '0' && buf[i] <= '9' && digits < 16; i++, digits++)
		v = v * 10 + (size_t)(buf[i] - '0');
	if (!digits || i >= len || buf[i] != '\n' || (digits > 1 && buf[*off + w + 1] == '0'))
		return -EBADMSG;
	i++;
	if (v > len - i)
		return -EBADMSG;
	*off = i;
	*n = v;
	return 0;
}

int audit_bundle_parse(const uint8_t *buf, size_t len, struct audit_bundle *b)
{
	size_t m = strlen(AUDIT_BUNDLE_MAGIC), off = m, n;
	const size_t keyline = 7 + 2 * AUDIT_PUBKEY_LEN + 1; /* "pubkey " hex '\n' */

	if (len < m || memcmp(buf, AUDIT_BUNDLE_MAGIC, m))
		return -EBADMSG;
	if (len - off < keyline || memcmp(buf + off, "pubkey ", 7) || buf[off + keyline - 1] != '\n' ||
	    audit_unhex((const char *)buf + off + 7, 2 * AUDIT_PUBKEY_LEN, b->pub, AUDIT_PUBKEY_LEN))
		return -EBADMSG;
	off += keyline;
	if (section(buf, len, &off, "log", &n))
		return -EBADMSG;
	b->log = buf + off;
	b->log_len = n;
	off += n;
	if (section(buf, len, &off, "heads", &n))
		return -EBADMSG;
	b->heads = buf + off;
	b->heads_len = n;
	off += n;
	if (len - off != 4 || memcmp(buf + off, "end\n", 4))
		return -EBADMSG;
	return 0;
}
