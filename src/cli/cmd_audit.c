/* kosa8 audit: show, verify, prove and export the tamper-evident audit log.
 * The work is in src/audit/; this file turns it into commands and text. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit/audit.h"
#include "audit/bundle.h"
#include "audit/merkle.h"
#include "audit/sign.h"
#include "audit/verify.h"
#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/log.h"
#include "common/termsafe.h"
#include "common/util.h"

#define MAX_LOG (64 * GiB)

struct aopts {
	char log[PATH_MAX];
	const char *sandbox, *type, *actor, *details, *pubkey, *bundle, *out, *size;
	const char *trusted, *pin_head;
	uint64_t since, until;
	bool follow, json;
	char *pos[3];
	int npos;
};

/* ---- small helpers ---- */

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ULL);
	struct tm tm;
	size_t n;

	gmtime_r(&s, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03uZ", (unsigned)(ns / 1000000ULL % 1000));
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* "2026-12-02T09:00:00Z" (UTC), "@1764666000", or an age: "15m" ago. */
static int parse_time(const char *s, uint64_t *ns)
{
	static const char *const fmts[] = {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S",
					   "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"};
	struct tm tm;
	char *end;
	unsigned long long v;

	if (s[0] == '@' || (s[0] >= '0' && s[0] <= '9' && !strchr(s, '-'))) {
		errno = 0;
		v = strtoull(s + (s[0] == '@'), &end, 10);
		if (errno || end == s + (s[0] == '@') || v > 1ULL << 34)
			return -EINVAL;
		if (s[0] == '@' && !*end) {
			*ns = v * 1000000000ULL;
			return 0;
		}
		switch (*end) {
		case 's': break;
		case 'm': v *= 60; break;
		case 'h': v *= 3600; break;
		case 'd': v *= 86400; break;
		default: return -EINVAL;
		}
		if (end[1] || s[0] == '@' || v * 1000000000ULL > now_ns())
			return -EINVAL;
		*ns = now_ns() - v * 1000000000ULL;
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(fmts); i++) {
		memset(&tm, 0, sizeof(tm));
		end = strptime(s, fmts[i], &tm);
		if (end && !*end) {
			time_t t = timegm(&tm);
			if (t < 0)
				return -EINVAL;
			*ns = (uint64_t)t * 1000000000ULL;
			return 0;
		}
	}
	return -EINVAL;
}

/* Untrusted bytes from a record, escaped for the terminal (common/termsafe.h)
 * unless --raw. */
static bool raw_out;

static void put_clean(FILE *f, const char *s, size_t n)
{
	if (raw_out)
		fwrite(s, 1, n, f);
	else
		term_write(f, s, n, TERM_FINAL);
}

/* The key a check trusts, and why: printed with every verdict, because a
 * log signed by a key nobody pinned shows integrity, not authorship. */
struct trust {
	uint8_t pub[AUDIT_PUBKEY_LEN];
	bool pinned;
	char why[PATH_MAX + 64];
};

/* Only the user (or root) may write what pins the key: the file, checked
 * on the descriptor that is then read, and the folder it is in (else a
 * file could be renamed over it), unless that folder is sticky like /tmp.
 * The descriptor, or -errno (-EPERM said why). */
static int open_trusted(const char *path)
{
	char *real = realpath(path, NULL), *slash;
	struct stat st, dir;
	bool ok;
	int fd, e;

	if (!real)
		return -errno;
	fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	e = errno;
	slash = strrchr(real, '/');
	*slash = '\0';
	ok = fd >= 0 && fstat(fd, &st) == 0 && stat(*real ? real : "/", &dir) == 0 &&
	     !(st.st_mode & 022) && (st.st_uid == geteuid() || st.st_uid == 0) &&
	     (dir.st_uid == geteuid() || dir.st_uid == 0) &&
	     (!(dir.st_mode & 022) || (dir.st_mode & S_ISVTX));
	free(real);
	if (fd < 0)
		return -e;
	if (!ok) {
		close(fd);
		fprintf(stderr, "kosa8 audit: %s may be written by others (the file or its folder): "
			"not used as trusted keys\n", path);
		return -EPERM;
	}
	return fd;
}

/* trusted-keys: one key a line (64 hex digits, then anything), '#'
 * comments.  Refused when others may write it: a pin anyone can change
 * pins nothing.  Picks the key `want` names if listed, else the first. */
static int read_trusted_keys(const char *path, const uint8_t *want, struct trust *t)
{
	uint8_t *buf = NULL, k[AUDIT_PUBKEY_LEN];
	size_t len;
	int fd, err, found = 0;
	char *text, *line, *save = NULL;

	if ((fd = open_trusted(path)) < 0)
		return fd;
	err = read_fd(fd, 1 * MiB, &buf, &len);
	close(fd);
	if (err)
		return err;
	text = strndup((const char *)buf, len);
	free(buf);
	if (!text)
		return -ENOMEM;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		line += strspn(line, " \t");
		if (*line == '#' || *line == '\0')
			continue;
		if (strspn(line, "0123456789abcdefABCDEF") != 2 * AUDIT_PUBKEY_LEN ||
		    audit_unhex(line, 2 * AUDIT_PUBKEY_LEN, k, sizeof(k)))
			continue;
		if (!found || (want && !memcmp(k, want, sizeof(k)))) {
			memcpy(t->pub, k, sizeof(k));
			found = 1;
		}
	}
	free(text);
	if (!found)
		return -ENOENT;
	t->pinned = true;
	snprintf(t->why, sizeof(t->why), "pinned in %s", path);
	return 0;
}

/* --pubkey, else a trusted-keys file (--trusted-keys, $KOSA8_AUDIT_TRUSTED_KEYS,
 * <config dir>/audit/trusted-keys), else the public half of your own
 * signing key, derived from the private key (never a .pub.pem beside it):
 * not pinned.  `want` (may be NULL): the key the log's heads name. */
static int trusted_key(const struct aopts *o, const uint8_t *want, const uint8_t *fallback,
		       struct trust *t)
{
	char dir[PATH_MAX - 64], path[PATH_MAX];
	const char *tk = o->trusted ? o->trusted : getenv("KOSA8_AUDIT_TRUSTED_KEYS");
	EVP_PKEY *k = NULL;
	int err;

	memset(t, 0, sizeof(*t));
	if (o->pubkey) {
		err = audit_pubkey_load(o->pubkey, t->pub);
		if (err == -ENOENT || err == -EINVAL)
			err = audit_pubkey_parse((const uint8_t *)o->pubkey, strlen(o->pubkey), t->pub);
		if (err)
			fprintf(stderr, "kosa8 audit: cannot read public key %s: %s\n", o->pubkey,
				err == -EINVAL ? "not an Ed25519 public key (PEM file or 64 hex digits)"
					       : strerror(-err));
		t->pinned = true;
		snprintf(t->why, sizeof(t->why), "pinned by --pubkey");
		return err;
	}
	err = audit_key_dir(dir, sizeof(dir));
	if (err)
		return err;
	if (!tk || !*tk) {
		snprintf(path, sizeof(path), "%s/trusted-keys", dir);
		tk = path;
	}
	err = read_trusted_keys(tk, want, t);
	if (err != -ENOENT || o->trusted)
		return err;
	if (fallback) {
		memcpy(t->pub, fallback, AUDIT_PUBKEY_LEN);
		snprintf(t->why, sizeof(t->why), "NOT pinned: the key named inside the bundle");
		return 0;
	}
	err = audit_key_load_or_create(dir, &k);
	if (!err)
		err = audit_key_public(k, t->pub);
	EVP_PKEY_free(k);
	if (err) {
		fprintf(stderr, "kosa8 audit: no trusted key: pass --pubkey KEY (%s)\n",
			audit_strerror(err));
		return err;
	}
	snprintf(t->why, sizeof(t->why), "NOT pinned: your own signing key in %s", dir);
	return 0;
}

static void print_trust(const struct trust *t)
{
	char hex[2 * AUDIT_PUBKEY_LEN + 1];

	audit_hex(t->pub, AUDIT_PUBKEY_LEN, hex);
	printf("  trusted key: ed25519 %s (%s)\n", hex, t->why);
	if (!t->pinned)
		printf("  note: integrity only: the log is intact and signed by this key, but nothing "
		       "pinned the key, so whoever can write the key folder and the log could have "
		       "re-signed both; pin it with --pubkey or a trusted-keys file\n");
}

/* The key the first head line of a heads file names (a hint for picking
 * among trusted keys; the check itself never trusts it). */
static const uint8_t *named_key(const uint8_t *heads, size_t len, struct audit_head *h)
{
	return heads && audit_head_parse((const char *)heads, len, h) > 0 ? h->pubkey : NULL;
}

/* The first head line of the log's heads file: which key it names. */
static const uint8_t *log_named_key(const char *log, struct audit_head *h)
{
	char path[PATH_MAX];
	uint8_t buf[AUDIT_HEAD_LINE_MAX];
	ssize_t n = -1;
	int fd;

	if (audit_heads_path(log, path, sizeof(path)) == 0 &&
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = pread(fd, buf, sizeof(buf), 0);
		close(fd);
	}
	return n > 0 ? named_key(buf, (size_t)n, h) : NULL;
}

/* Mapped logs: if someone truncates the file while we read it (no kosa8
 * writer does: they only ever cut what the snapshot leaves out), the kernel
 * sends SIGBUS.  Say what happened instead of dying on a signal. */
static void on_sigbus(int sig)
{
	static const char msg[] = "kosa8 audit: the log file shrank while it was being read: "
				  "someone truncated it (not kosa8); run verify again\n";
	ssize_t n = write(2, msg, sizeof(msg) - 1);

	(void)n;
	_exit(1);
}

static int load_snapshot(const struct aopts *o, struct audit_snapshot *s)
{
	signal(SIGBUS, on_sigbus);
	int err = audit_snapshot_read(o->log, MAX_LOG, s);

	if (err == -ENOENT)
		fprintf(stderr, "kosa8 audit: no audit log at %s\n", o->log);
	else if (err)
		fprintf(stderr, "kosa8 audit: cannot read %s: %s\n", o->log, strerror(-err));
	return err;
}

static void head_line(const struct audit_head *h, char *buf, size_t len)
{
	int n = audit_head_format(h, buf, len);

	if (n > 0)
		buf[n - 1] = '\0'; /* without its '\n' */
}

/* ---- show ---- */

/* --type net matches "net" and every "net.*" type: a family by its prefix. */
static bool type_matches(const char *want, const struct audit_record *r)
{
	size_t n = strlen(want);

	if (n > r->type_len || memcmp(want, r->type, n))
		return false;
	return n == r->type_len || r->type[n] == '.';
}

static bool matches(const struct aopts *o, const struct audit_record *r)
{
	if (o->sandbox && (strlen(o->sandbox) != r->sandbox_len ||
			   memcmp(o->sandbox, r->sandbox, r->sandbox_len)))
		return false;
	if (o->type && !type_matches(o->type, r))
		return false;
	return r->time_ns >= o->since && r->time_ns <= o->until;
}

static void print_json(const struct audit_record *r)
{
	cJSON *j = cJSON_CreateObject();
	cJSON *d = cJSON_ParseWithLength(r->details, r->details_len);
	char t[40], *s, *sb = strndup(r->sandbox, r->sandbox_len);
	char *ac = strndup(r->actor, r->actor_len), *ty = strndup(r->type, r->type_len);

	fmt_time(r->time_ns, t, sizeof(t));
	cJSON_AddNumberToObject(j, "seq", (double)r->seq);
	cJSON_AddStringToObject(j, "time", t);
	cJSON_AddStringToObject(j, "sandbox", sb ? sb : "");
	cJSON_AddStringToObject(j, "actor", ac ? ac : "");
	cJSON_AddStringToObject(j, "type", ty ? ty : "");
	if (d)
		cJSON_AddItemToObject(j, "details", d);
	else
		cJSON_AddNullToObject(j, "details");
	s = cJSON_PrintUnformatted(j);
	if (s && raw_out)
		puts(s);
	else if (s) {
		term_write(stdout, s, strlen(s), TERM_JSON | TERM_FINAL);
		putchar('\n');
	}
	free(s);
	free(sb);
	free(ac);
	free(ty);
	cJSON_Delete(j);
}

static void print_record(const struct aopts *o, const struct audit_record *r)
{
	char t[40];

	if (o->json) {
		print_json(r);
		return;
	}
	fmt_time(r->time_ns, t, sizeof(t));
	printf("%6llu %s ", (unsigned long long)r->seq, t);
	if (r->sandbox_len)
		put_clean(stdout, r->sandbox, r->sandbox_len);
	else
		fputc('-', stdout);
	fputc(' ', stdout);
	put_clean(stdout, r->actor, r->actor_len);
	fputc(' ', stdout);
	put_clean(stdout, r->type, r->type_len);
	fputc(' ', stdout);
	put_clean(stdout, r->details, r->details_len);
	fputc('\n', stdout);
}

/* Prints the whole records in buf[0..len); returns the bytes consumed. */
static size_t show_buf(const struct aopts *o, const uint8_t *buf, size_t len, bool *bad)
{
	struct audit_record r;
	size_t off = 0;
	int n;

	while (off < len) {
		n = audit_record_parse(buf + off, len - off, &r);
		if (n == -EAGAIN)
			break;
		if (n < 0) {
			*bad = true;
			break;
		}
		if (matches(o, &r))
			print_record(o, &r);
		off += (size_t)n;
	}
	return off;
}

/* Reads records from off on without any lock (a reader must not hold up
 * writers while a pager waits), in chunks; with --follow, forever. */
static int stream(const struct aopts *o, int fd, uint64_t off)
{
	const size_t chunk = 16 * MiB; /* > AUDIT_REC_MAX: a whole record fits */
	uint8_t *buf = malloc(chunk);
	bool bad = false;
	struct stat st;
	ssize_t len;
	size_t used;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (fstat(fd, &st) < 0) {
			err = -errno;
			break;
		}
		len = (uint64_t)st.st_size > off ? pread(fd, buf, chunk, (off_t)off) : 0;
		if (len < 0) {
			err = -errno;
			break;
		}
		used = show_buf(o, buf, (size_t)len, &bad);
		off += used;
		if (bad) {
			fprintf(stderr, "kosa8 audit: malformed record at offset %llu; run "
					"'kosa8 audit verify'\n", (unsigned long long)off);
			err = -EBADMSG;
			break;
		}
		if (used > 0)
			continue;
		if (!o->follow)
			break; /* the end, or an incomplete record being written */
		fflush(stdout);
		usleep(200 * 1000);
	}
	fflush(stdout);
	free(buf);
	return err;
}

static int do_show(struct aopts *o)
{
	uint8_t hdr[AUDIT_HDR_LEN];
	struct audit_header h;
	ssize_t n;
	int fd = open(o->log, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0) {
		fprintf(stderr, "kosa8 audit: no audit log at %s (%s)\n", o->log, strerror(errno));
		return 2;
	}
	n = pread(fd, hdr, sizeof(hdr), 0);
	if (n < 0 || (n == AUDIT_HDR_LEN && audit_header_parse(hdr, (size_t)n, &h))) {
		fprintf(stderr, "kosa8 audit: %s is not a kosa8 audit log\n", o->log);
		close(fd);
		return 2;
	}
	err = stream(o, fd, AUDIT_HDR_LEN);
	close(fd);
	return err == -EBADMSG ? 1 : err ? 2 : 0;
}

/* ---- verify ---- */

static void print_ok(const struct audit_verify_result *r, const char *what)
{
	char id[2 * AUDIT_LOG_ID_LEN + 1], root[2 * AUDIT_HASH_LEN + 1], t[40];

	audit_hex(r->header.log_id, AUDIT_LOG_ID_LEN, id);
	audit_hex(r->root, AUDIT_HASH_LEN, root);
	printf("OK: %s: %llu records, %llu signed heads verified (log id %s)\n", what,
	       (unsigned long long)r->records, (unsigned long long)r->heads, id);
	printf("  root over all records: %s\n", root);
	if (r->have_head) {
		fmt_time(r->last_head.time_ns, t, sizeof(t));
		printf("  newest signed head: size %llu, signed %s\n",
		       (unsigned long long)r->last_head.size, t);
	}
	if (r->unsigned_records)
		printf("  NOT signed: records %llu..%llu: the last %llu records are not yet covered "
		       "by a signed head: only the chain protects them, so whoever can write the log "
		       "could have written them ('kosa8 audit sign' signs one)\n",
		       (unsigned long long)(r->records - r->unsigned_records),
		       (unsigned long long)r->records - 1, (unsigned long long)r->unsigned_records);
	if (r->torn_tail)
		printf("  note: an incomplete last record at offset %llu (an interrupted write, "
		       "never acknowledged; the next writer cuts it)\n",
		       (unsigned long long)r->torn_offset);
}

static void print_fail(const struct audit_verify_result *r, const char *what)
{
	printf("FAILED: %s: %s\n", what, audit_problem_name(r->problem));
	if (r->problem == AUDIT_BAD_SIGNATURE || r->problem == AUDIT_BAD_HEADS)
		printf("  first bad: signed head #%llu\n", (unsigned long long)r->bad_head);
	else if (r->bad_seq_last > r->bad_seq)
		printf("  first bad record: %llu (somewhere in %llu..%llu), offset %llu\n",
		       (unsigned long long)r->bad_seq, (unsigned long long)r->bad_seq,
		       (unsigned long long)r->bad_seq_last, (unsigned long long)r->bad_offset);
	else
		printf("  first bad record: %llu, offset %llu\n", (unsigned long long)r->bad_seq,
		       (unsigned long long)r->bad_offset);
	printf("  %s\n", r->what);
}

/* The verdict of a verify: printed, and the exit code for it. */
static int verify_report(int err, const struct audit_verify_result *r, const char *what)
{
	if (err == -EBADMSG) {
		print_fail(r, what);
		return 1;
	}
	if (err) {
		fprintf(stderr, "kosa8 audit: verify: %s\n", strerror(-err));
		return 2;
	}
	print_ok(r, what);
	return 0;
}

/* ---- proofs ---- */

/* A verified snapshot with its leaf hashes and heads, for proofs. */
struct proved {
	struct audit_snapshot s;
	struct audit_verify_result r;
	merkle_hash *leaves;
	struct audit_head *heads;
	size_t nheads;
	uint8_t pub[AUDIT_PUBKEY_LEN];
};

static void proved_free(struct proved *p)
{
	free(p->leaves);
	free(p->heads);
	audit_snapshot_free(&p->s);
}

/* t: the trusted key, or NULL to find it (trusted_key). */
static int load_proved(const struct aopts *o, const struct trust *t, struct proved *p)
{
	struct audit_head first;
	struct trust own;
	size_t bad;
	int err, n;

	memset(p, 0, sizeof(*p));
	if (!t && trusted_key(o, log_named_key(o->log, &first), NULL, &own))
		return 2;
	memcpy(p->pub, t ? t->pub : own.pub, AUDIT_PUBKEY_LEN);
	if (load_snapshot(o, &p->s))
		return 2;
	err = audit_snapshot_verify(&p->s, p->pub, &p->r, &p->leaves);
	if (err == -EBADMSG) {
		print_fail(&p->r, o->log);
		printf("  no proof from a log that fails verification\n");
		return 1;
	}
	n = err ? err : audit_heads_parse_all(p->s.heads, p->s.heads_len, &p->heads, &bad);
	if (n < 0) {
		fprintf(stderr, "kosa8 audit: %s\n", strerror(-n));
		return 2;
	}
	p->nheads = (size_t)n;
	return 0;
}

/* ---- verify ---- */

static int verify_bundle(const struct aopts *o)
{
	struct audit_bundle b;
	struct audit_verify_result r;
	struct audit_head first;
	struct trust t;
	uint8_t *buf = NULL;
	size_t len;
	int err = read_file(o->bundle, MAX_LOG, &buf, &len), rc = 2;

	if (err) {
		fprintf(stderr, "kosa8 audit: cannot read bundle %s: %s\n", o->bundle, strerror(-err));
		return 2;
	}
	if (audit_bundle_parse(buf, len, &b)) {
		fprintf(stderr, "kosa8 audit: %s is not a kosa8 audit bundle\n", o->bundle);
		goto out;
	}
	if (trusted_key(o, named_key(b.heads, b.heads_len, &first), b.pub, &t))
		goto out;
	err = audit_verify(b.log, b.log_len, b.heads, b.heads_len, t.pub, &r, NULL);
	rc = verify_report(err, &r, o->bundle);
	print_trust(&t);
out:
	free(buf);
	return rc;
}

/* A file an auditor saved holding one head line (`kosa8 audit head`):
 * exactly that line and nothing after it, so a file that holds more is
 * not silently read as its first line.  0, or -EINVAL with the message. */
static int read_head_file(const char *path, struct audit_head *h)
{
	uint8_t *buf = NULL;
	size_t len;
	int n = -EINVAL;

	if (!read_file(path, 4096, &buf, &len))
		n = audit_head_parse((const char *)buf, len, h);
	free(buf);
	if (n <= 0 || (size_t)n != len) {
		fprintf(stderr, "kosa8 audit: %s does not hold exactly one head line\n", path);
		return -EINVAL;
	}
	return 0;
}

/* --head FILE: the log must still hold the head h an auditor saved, and
 * extend it.  Prints the failure; on success *nproof is the proof's length. */
static int check_pinned(const struct aopts *o, const struct proved *p, const struct audit_head *h,
			int *nproof)
{
	char why[256];
	int n = audit_pin_check(h, p->pub, &p->r, p->heads, p->nheads, p->leaves, why, sizeof(why));

	if (n < 0) {
		printf("FAILED: %s: %s\n", o->pin_head, why);
		return 1;
	}
	*nproof = n;
	return 0;
}

/* A format-1 log (one an upgrade moved aside, or one not yet upgraded):
 * say so plainly instead of a header failure. */
static bool format1_log(const char *path)
{
	uint8_t hdr[AUDIT_HDR_LEN];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : pread(fd, hdr, sizeof(hdr), 0);

	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)sizeof(hdr) || audit_header_version(hdr, sizeof(hdr)) != 1)
		return false;
	fprintf(stderr, "kosa8 audit: %s: format 1 log: written by kosa8 before format 2; this "
		"kosa8 verifies format 2 only (kosa8 42588ff or earlier verifies it).  When a "
		"writer moved it aside, the first record (audit.archived) of the log that replaced "
		"it holds its SHA-256 and that of its heads, under signed heads\n", path);
	return true;
}

/* verify --head: the saved head is read before anything is checked, and
 * "OK" is printed only when the log also holds and extends it. */
static int verify_pinned(struct aopts *o, const struct trust *t)
{
	struct audit_head h;
	struct proved p;
	int rc, n = 0;

	if (read_head_file(o->pin_head, &h))
		return 2;
	rc = load_proved(o, t, &p);
	if (!rc)
		rc = check_pinned(o, &p, &h, &n);
	if (!rc) {
		print_ok(&p.r, o->log);
		printf("  pinned: head #%llu (size %llu) from %s is in the log, and the newest head "
		       "extends it (consistency proof of %d hashes)\n", (unsigned long long)h.index,
		       (unsigned long long)h.size, o->pin_head, n);
	}
	print_trust(t);
	proved_free(&p);
	return rc;
}

static int do_verify(struct aopts *o)
{
	struct audit_verify_result r;
	struct audit_head first;
	struct trust t;
	size_t torn = 0;
	int err, rc;

	if (o->bundle)
		return verify_bundle(o);
	if (format1_log(o->log))
		return 2;
	if (trusted_key(o, log_named_key(o->log, &first), NULL, &t))
		return 2;
	if (o->pin_head)
		return verify_pinned(o, &t);
	/* One pass over the log (audit_log_verify), the snapshot's length
	 * pass only when the log does not end in a complete record. */
	signal(SIGBUS, on_sigbus);
	err = audit_log_verify(o->log, MAX_LOG, t.pub, &r, &torn);
	if (err == -ENOENT) {
		fprintf(stderr, "kosa8 audit: no audit log at %s\n", o->log);
		return 2;
	}
	if (err && err != -EBADMSG && err != -ENOMEM) {
		fprintf(stderr, "kosa8 audit: cannot read %s: %s\n", o->log, strerror(-err));
		return 2;
	}
	rc = verify_report(err, &r, o->log);
	print_trust(&t);
	if (torn)
		printf("  note: an incomplete last record (%zu bytes, an interrupted write, never "
		       "acknowledged) was left out; the next writer cuts it\n", torn);
	return rc;
}

/* A head by tree size ("latest" for the newest), from the verified heads. */
static const struct audit_head *find_head(const struct proved *p, const char *spec)
{
	char *end;
	unsigned long long size;

	if (!p->nheads)
		return NULL;
	if (!strcmp(spec, "latest"))
		return &p->heads[p->nheads - 1];
	errno = 0;
	size = strtoull(spec, &end, 10);
	if (errno || end == spec || *end)
		return NULL;
	for (size_t i = p->nheads; i-- > 0;)
		if (p->heads[i].size == size)
			return &p->heads[i];
	return NULL;
}

static const uint8_t *record_at(const struct audit_snapshot *s, uint64_t seq, uint32_t *len)
{
	struct audit_record r;
	size_t off = AUDIT_HDR_LEN;
	int n;

	while (off < s->log_len && (n = audit_record_parse(s->log + off, s->log_len - off, &r)) > 0) {
		if (r.seq == seq) {
			*len = r.len;
			return r.raw;
		}
		off += (size_t)n;
	}
	return NULL;
}

static cJSON *hex_array(const merkle_hash *path, int n)
{
	cJSON *a = cJSON_CreateArray();
	char hex[2 * AUDIT_HASH_LEN + 1];

	for (int i = 0; i < n; i++) {
		audit_hex(path[i], AUDIT_HASH_LEN, hex);
		cJSON_AddItemToArray(a, cJSON_CreateString(hex));
	}
	return a;
}

static FILE *create_private(const char *path);

/* Prints a JSON document to -o FILE (created 0600) or stdout. */
static int print_doc(const struct aopts *o, cJSON *j)
{
	char *s = cJSON_Print(j);
	FILE *f = o->out ? create_private(o->out) : stdout;
	int err = s && f ? 0 : -EIO;

	if (!err)
		fprintf(f, "%s\n", s);
	if (f && f != stdout && fclose(f))
		err = -EIO;
	free(s);
	cJSON_Delete(j);
	return err;
}

static int do_prove(struct aopts *o)
{
	struct proved p;
	const struct audit_head *h;
	merkle_hash path[MERKLE_MAX_PATH];
	const uint8_t *leaf;
	uint32_t leaf_len = 0;
	char *end, line[AUDIT_HEAD_LINE_MAX], *hex;
	unsigned long long seq;
	int rc, n;
	cJSON *j;

	errno = 0;
	seq = strtoull(o->pos[0], &end, 10);
	if (errno || end == o->pos[0] || *end) {
		fprintf(stderr, "kosa8 audit prove: SEQ must be a record number\n");
		return 2;
	}
	if ((rc = load_proved(o, NULL, &p)))
		goto out;
	rc = 1;
	h = find_head(&p, o->size ? o->size : "latest");
	if (o->size && !h) {
		fprintf(stderr, "kosa8 audit prove: no signed head has size %s (the newest has size "
			"%llu; 'kosa8 audit head' prints it)\n", o->size,
			p.nheads ? (unsigned long long)p.heads[p.nheads - 1].size : 0ULL);
		goto out;
	}
	if (!h || h->size <= seq) {
		if (o->size)
			fprintf(stderr, "kosa8 audit prove: the signed head of size %llu covers records "
				"0..%lld, not record %llu\n", (unsigned long long)h->size,
				(long long)h->size - 1, seq);
		else
			fprintf(stderr, "kosa8 audit prove: no signed head covers record %llu yet "
				"(the log holds %llu records; 'kosa8 audit sign' signs one now)\n", seq,
				(unsigned long long)p.r.records);
		goto out;
	}
	n = merkle_inclusion_proof(p.leaves, h->size, seq, path);
	leaf = record_at(&p.s, seq, &leaf_len);
	if (n < 0 || !leaf || !(hex = malloc(2 * (size_t)leaf_len + 1)))
		goto out;
	audit_hex(leaf, leaf_len, hex);
	head_line(h, line, sizeof(line));
	j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "type", "kosa8-audit-inclusion-proof-v1");
	cJSON_AddNumberToObject(j, "leaf_index", (double)seq);
	cJSON_AddNumberToObject(j, "tree_size", (double)h->size);
	cJSON_AddStringToObject(j, "head", line);
	cJSON_AddStringToObject(j, "leaf", hex);
	cJSON_AddItemToObject(j, "audit_path", hex_array(path, n));
	free(hex);
	rc = print_doc(o, j) ? 2 : 0;
out:
	proved_free(&p);
	return rc;
}

static const char *jstr(const cJSON *j, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* JSON numbers are doubles: accept only exact, non-negative integers. */
static int ju64(const cJSON *j, const char *name, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
	    (double)(uint64_t)v->valuedouble != v->valuedouble)
		return -EINVAL;
	*out = (uint64_t)v->valuedouble;
	return 0;
}

static int proof_path(const cJSON *a, merkle_hash path[MERKLE_MAX_PATH])
{
	int n = 0;
	const cJSON *e;

	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > MERKLE_MAX_PATH)
		return -EINVAL;
	cJSON_ArrayForEach(e, a) {
		if (!cJSON_IsString(e) ||
		    audit_unhex(e->valuestring, strlen(e->valuestring), path[n], AUDIT_HASH_LEN))
			return -EINVAL;
		n++;
	}
	return n;
}

static int check_proof_doc(const cJSON *j, const uint8_t *pub, struct audit_head *h,
			   struct audit_record *r, uint8_t **leaf, const char **why)
{
	merkle_hash path[MERKLE_MAX_PATH], lh;
	const char *hl = jstr(j, "head"), *lx = jstr(j, "leaf"), *t = jstr(j, "type");
	char line[AUDIT_HEAD_LINE_MAX + 1];
	uint64_t idx, size;
	size_t ll;
	int n;

	*why = "not a kosa8 inclusion proof";
	if (!t || strcmp(t, "kosa8-audit-inclusion-proof-v1") || !hl || !lx ||
	    ju64(j, "leaf_index", &idx) || ju64(j, "tree_size", &size) ||
	    (n = proof_path(cJSON_GetObjectItemCaseSensitive(j, "audit_path"), path)) < 0 ||
	    strlen(hl) >= AUDIT_HEAD_LINE_MAX || strlen(lx) % 2 || strlen(lx) > 2 * AUDIT_REC_MAX)
		return -EINVAL;
	snprintf(line, sizeof(line), "%s\n", hl);
	ll = strlen(lx) / 2;
	*leaf = malloc(ll ? ll : 1);
	if (audit_head_parse(line, strlen(line), h) != (int)strlen(line) || !*leaf ||
	    audit_unhex(lx, 2 * ll, *leaf, ll) ||
	    audit_record_parse(*leaf, ll, r) != (int)ll)
		return -EINVAL;
	*why = "the head's signature does not verify with the trusted key";
	if (audit_head_verify(pub, h))
		return -EBADMSG;
	*why = "the record's number or the tree size disagree with the proof";
	if (r->seq != idx || h->size != size)
		return -EBADMSG;
	*why = "the audit path does not lead from the record to the signed root";
	merkle_leaf_hash(*leaf, ll, lh);
	return merkle_verify_inclusion(idx, size, lh, path, (size_t)n, h->root);
}

static int do_check_proof(struct aopts *o)
{
	uint8_t *buf = NULL, *leaf = NULL;
	struct audit_head h;
	struct audit_record r;
	struct trust tr;
	const char *why = "";
	char t[40];
	size_t len;
	cJSON *j = NULL;
	int err, rc = 2;

	if (trusted_key(o, NULL, NULL, &tr))
		return 2;
	err = read_file(o->pos[0], 64 * MiB, &buf, &len);
	if (err) {
		fprintf(stderr, "kosa8 audit: cannot read %s: %s\n", o->pos[0], strerror(-err));
		return 2;
	}
	j = cJSON_ParseWithLength((const char *)buf, len);
	err = j ? check_proof_doc(j, tr.pub, &h, &r, &leaf, &why) : -EINVAL;
	if (err == -EINVAL) {
		fprintf(stderr, "kosa8 audit: %s: %s\n", o->pos[0], why);
	} else if (err) {
		printf("FAILED: %s: %s\n", o->pos[0], why);
		rc = 1;
	} else {
		fmt_time(h.time_ns, t, sizeof(t));
		printf("OK: record %llu (", (unsigned long long)r.seq);
		put_clean(stdout, r.type, r.type_len);
		printf(", sandbox ");
		put_clean(stdout, r.sandbox, r.sandbox_len);
		printf(") is in the log whose head of size %llu was signed %s\n",
		       (unsigned long long)h.size, t);
		rc = 0;
	}
	cJSON_Delete(j);
	free(leaf);
	free(buf);
	return rc;
}

/* OLD/NEW: a tree size of a head in the heads file, "latest", or a file
 * holding a head line (one saved earlier, e.g. with 'kosa8 audit head'). */
static int resolve_head(const struct proved *p, const char *spec, struct audit_head *out)
{
	const struct audit_head *h = find_head(p, spec);

	if (h) {
		*out = *h;
		return 0;
	}
	if (strspn(spec, "0123456789") == strlen(spec) || !strcmp(spec, "latest")) {
		fprintf(stderr, "kosa8 audit: no signed head of size %s\n", spec);
		return -ENOENT;
	}
	if (access(spec, F_OK)) {
		fprintf(stderr, "kosa8 audit: no signed head of size %s, and no such file\n", spec);
		return -ENOENT;
	}
	return read_head_file(spec, out);
}

static int consistency_check(const struct aopts *o, const struct proved *p,
			     const struct audit_head *a, const struct audit_head *b)
{
	merkle_hash path[MERKLE_MAX_PATH];
	char hex[2 * AUDIT_HASH_LEN + 1];
	int n;
	cJSON *j;

	if (audit_head_verify(p->pub, a) || audit_head_verify(p->pub, b) ||
	    memcmp(a->log_id, p->r.header.log_id, AUDIT_LOG_ID_LEN)) {
		printf("FAILED: a head is not signed by the trusted key for this log\n");
		return 1;
	}
	if (a->size > b->size || b->size > p->r.records) {
		printf("FAILED: head of size %llu is not a prefix of head of size %llu "
		       "(the log holds %llu records)\n", (unsigned long long)a->size,
		       (unsigned long long)b->size, (unsigned long long)p->r.records);
		return 1;
	}
	n = a->size ? merkle_consistency_proof(p->leaves, b->size, a->size, path) : 0;
	if (n < 0 || merkle_verify_consistency(a->size, b->size, a->root, b->root, path, (size_t)n)) {
		printf("FAILED: the log no longer holds the tree that the head of size %llu signed: "
		       "records before it were changed\n", (unsigned long long)a->size);
		return 1;
	}
	if (o->json) {
		j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "type", "kosa8-audit-consistency-proof-v1");
		cJSON_AddNumberToObject(j, "old_size", (double)a->size);
		cJSON_AddNumberToObject(j, "new_size", (double)b->size);
		audit_hex(a->root, AUDIT_HASH_LEN, hex);
		cJSON_AddStringToObject(j, "old_root", hex);
		audit_hex(b->root, AUDIT_HASH_LEN, hex);
		cJSON_AddStringToObject(j, "new_root", hex);
		cJSON_AddItemToObject(j, "proof", hex_array(path, n));
		if (print_doc(o, j))
			return 2;
	} else {
		printf("OK: the signed head of size %llu is a prefix of the signed head of size %llu "
		       "(consistency proof of %d hashes checked)\n", (unsigned long long)a->size,
		       (unsigned long long)b->size, n);
	}
	return 0;
}

static int do_consistency(struct aopts *o)
{
	struct proved p;
	struct audit_head a, b;
	int rc = load_proved(o, NULL, &p);

	if (!rc) {
		rc = 2;
		if (!resolve_head(&p, o->pos[0], &a) && !resolve_head(&p, o->pos[1], &b))
			rc = consistency_check(o, &p, &a, &b);
	}
	proved_free(&p);
	return rc;
}

/* ---- export, append, sign, head, pubkey ---- */

/* Output files hold the log's content: mode 0600 like the log, never over
 * an existing file. */
static FILE *create_private(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");

	if (!f) {
		fprintf(stderr, "kosa8 audit: cannot create %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	return f;
}

static int do_export(struct aopts *o)
{
	struct audit_snapshot s;
	struct audit_head first;
	struct trust t;
	FILE *f = stdout;
	int err;

	if (trusted_key(o, log_named_key(o->log, &first), NULL, &t) || load_snapshot(o, &s))
		return 2;
	if (o->out && !(f = create_private(o->out))) {
		audit_snapshot_free(&s);
		return 2;
	}
	err = audit_bundle_write(f, &s, t.pub);
	if (f != stdout && fclose(f))
		err = -EIO;
	if (err)
		fprintf(stderr, "kosa8 audit: writing the bundle failed\n");
	else if (o->out)
		fprintf(stderr, "kosa8 audit: exported %zu bytes of records and %zu of heads to %s\n"
				"  check it elsewhere with: kosa8 audit verify --bundle %s --pubkey KEY\n",
			s.log_len, s.heads_len, o->out, o->out);
	audit_snapshot_free(&s);
	return err ? 2 : 0;
}

/* lazy: sign on close only when a head is due (append); sign signs anyway. */
static int open_writer(const struct aopts *o, bool lazy, struct audit_log **l)
{
	struct audit_opts ao = {.path = o->log, .lazy_close = lazy};
	int err = audit_log_open(&ao, l); /* a new log's key is announced there */

	if (err)
		fprintf(stderr, "kosa8 audit: cannot open %s: %s\n", o->log, audit_strerror(err));
	return err;
}

static int do_append(struct aopts *o)
{
	struct audit_event ev = {o->sandbox, o->actor, o->type, o->details};
	struct audit_log *l;
	char actor[300];
	struct passwd *pw;
	uint64_t seq;
	int err;

	if (!o->type) {
		fprintf(stderr, "kosa8 audit append: --type is required\n");
		return 2;
	}
	if (!o->actor) {
		pw = getpwuid(getuid());
		snprintf(actor, sizeof(actor), "cli:%s", pw ? pw->pw_name : "unknown");
		ev.actor = actor;
	}
	if ((err = audit_event_check(&ev)) < 0) {
		fprintf(stderr, "kosa8 audit append: %s\n", audit_strerror(err));
		return 2;
	}
	if (open_writer(o, true, &l))
		return 2;
	err = audit_log_append(l, &ev, &seq);
	audit_log_close(l);
	if (err) {
		fprintf(stderr, "kosa8 audit append: %s\n", audit_strerror(err));
		return 2;
	}
	printf("%llu\n", (unsigned long long)seq);
	return 0;
}

static int do_sign(struct aopts *o)
{
	struct audit_log *l;
	struct audit_head h;
	char line[AUDIT_HEAD_LINE_MAX];
	int err;

	if (open_writer(o, false, &l))
		return 2;
	err = audit_log_sign_head(l, &h);
	audit_log_close(l);
	if (err) {
		fprintf(stderr, "kosa8 audit sign: %s\n", audit_strerror(err));
		return 2;
	}
	head_line(&h, line, sizeof(line));
	puts(line);
	return 0;
}

static int do_head(struct aopts *o)
{
	struct audit_snapshot s;
	struct audit_head *heads = NULL;
	char line[AUDIT_HEAD_LINE_MAX];
	size_t bad;
	int n;

	if (load_snapshot(o, &s))
		return 2;
	n = audit_heads_parse_all(s.heads, s.heads_len, &heads, &bad);
	audit_snapshot_free(&s);
	if (n <= 0) {
		fprintf(stderr, "kosa8 audit head: %s\n",
			n == 0 ? "no signed head yet" : "the heads file is damaged");
		free(heads);
		return n == 0 ? 1 : 2;
	}
	head_line(&heads[n - 1], line, sizeof(line));
	puts(line);
	free(heads);
	return 0;
}

static int do_pubkey(struct aopts *o)
{
	EVP_PKEY *k = NULL;
	uint8_t pub[AUDIT_PUBKEY_LEN];
	char pem[512];
	int err = audit_key_load_or_create(NULL, &k);

	if (!err)
		err = audit_key_public(k, pub);
	if (!err)
		err = audit_pubkey_pem(pub, pem, sizeof(pem)) < 0 ? -EIO : 0;
	EVP_PKEY_free(k);
	if (err) {
		fprintf(stderr, "kosa8 audit pubkey: %s\n", audit_strerror(err));
		return 2;
	}
	fputs(pem, stdout);
	return 0;
}

/* ---- arguments ---- */

static int parse_args(int argc, char **argv, struct aopts *o)
{
	static const struct option opts[] = {
		{"log", required_argument, NULL, 'L'},    {"sandbox", required_argument, NULL, 's'},
		{"type", required_argument, NULL, 't'},   {"actor", required_argument, NULL, 'a'},
		{"details", required_argument, NULL, 'd'}, {"since", required_argument, NULL, 'S'},
		{"until", required_argument, NULL, 'U'},  {"follow", no_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},         {"pubkey", required_argument, NULL, 'k'},
		{"bundle", required_argument, NULL, 'b'}, {"output", required_argument, NULL, 'o'},
		{"size", required_argument, NULL, 'n'},   {"help", no_argument, NULL, 'h'},
		{"raw", no_argument, NULL, 'r'},         {"head", required_argument, NULL, 'H'},
		{"trusted-keys", required_argument, NULL, 'T'},
		{NULL, 0, NULL, 0},
	};
	const char *log = NULL;
	int c;

	o->until = UINT64_MAX;
	optind = 0;
	opterr = 0;
	while (optind < argc || optind == 0) {
		/* "+": stop at each operand, take it, go on with the options. */
		c = getopt_long(argc, argv, "+o:fh", opts, NULL);
		if (c == -1) {
			if (optind >= argc)
				break;
			if (o->npos == (int)ARRAY_SIZE(o->pos))
				return -1;
			o->pos[o->npos++] = argv[optind++];
			continue;
		}
		switch (c) {
		case 'L': log = optarg; break;
		case 's': o->sandbox = optarg; break;
		case 't': o->type = optarg; break;
		case 'a': o->actor = optarg; break;
		case 'd': o->details = optarg; break;
		case 'f': o->follow = true; break;
		case 'j': o->json = true; break;
		case 'r': raw_out = true; break;
		case 'H': o->pin_head = optarg; break;
		case 'T': o->trusted = optarg; break;
		case 'k': o->pubkey = optarg; break;
		case 'b': o->bundle = optarg; break;
		case 'o': o->out = optarg; break;
		case 'n': o->size = optarg; break;
		case 'S':
		case 'U':
			if (parse_time(optarg, c == 'S' ? &o->since : &o->until)) {
				fprintf(stderr, "kosa8 audit: bad time '%s' (2026-12-02T09:00:00Z, "
						"@UNIXSECONDS, or an age like 15m)\n", optarg);
				return -1;
			}
			break;
		case 'h': cli_print_help(stdout, cli_find(cli_commands, "audit"), NULL); exit(0);
		default:
			fprintf(stderr, "kosa8 audit: unknown or incomplete option '%s'\n",
				argv[optind - 1]);
			return -1;
		}
	}
	if (log) {
		if (snprintf(o->log, sizeof(o->log), "%s", log) >= (int)sizeof(o->log))
			return -1;
	} else if (audit_default_path(o->log, sizeof(o->log))) {
		return -1;
	}
	return 0;
}

struct sub {
	const char *name;
	int npos;
	int (*run)(struct aopts *o);
};

static const struct sub subs[] = {
	{"show", 0, do_show},       {"verify", 0, do_verify},
	{"prove", 1, do_prove},     {"check-proof", 1, do_check_proof},
	{"consistency", 2, do_consistency}, {"export", 0, do_export},
	{"append", 0, do_append},   {"sign", 0, do_sign},
	{"head", 0, do_head},       {"pubkey", 0, do_pubkey},
};

int cmd_audit(int argc, char **argv)
{
	struct aopts o = {0};

	if (argc < 2)
		return cli_usage_error("audit", NULL);
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		if (strcmp(argv[1], subs[i].name))
			continue;
		const struct cli_cmd *audit = cli_find(cli_commands, "audit");
		const char *bad = cli_unlisted_opt(audit, cli_find(audit->subs, subs[i].name), argc - 1,
						   argv + 1);

		/* One getopt serves every subcommand: the table says which
		 * options each takes (verify must not ignore --since). */
		if (bad) {
			fprintf(stderr, "kosa8 audit %s: no option '%s' here (see 'kosa8 audit %s --help')\n",
				subs[i].name, bad, subs[i].name);
			return 2;
		}
		if (parse_args(argc - 1, argv + 1, &o))
			return 2;
		if (o.npos != subs[i].npos) {
			fprintf(stderr, "kosa8 audit %s: expected %d argument(s), see --help\n",
				subs[i].name, subs[i].npos);
			return 2;
		}
		return subs[i].run(&o);
	}
	fprintf(stderr, "kosa8 audit: unknown command '%s' (see 'kosa8 audit --help')\n", argv[1]);
	return 2;
}
