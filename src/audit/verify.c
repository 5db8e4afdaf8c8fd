#include "audit/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/prehash.h"
#include "audit/sign.h"
#include "common/fileio.h"

const char *audit_problem_name(enum audit_problem p)
{
	switch (p) {
	case AUDIT_OK: return "ok";
	case AUDIT_BAD_HEADER: return "bad header";
	case AUDIT_MALFORMED: return "edited (malformed record)";
	case AUDIT_EDITED: return "edited";
	case AUDIT_REORDERED: return "reordered";
	case AUDIT_REMOVED: return "removed";
	case AUDIT_TRUNCATED: return "truncated after a signed head";
	case AUDIT_BAD_SIGNATURE: return "head signature invalid";
	case AUDIT_ROOT_MISMATCH: return "rewritten (tree does not match a signed head)";
	case AUDIT_BAD_HEADS: return "heads file damaged";
	case AUDIT_BAD_TIME: return "edited (time goes backwards)";
	}
	return "unknown";
}

int audit_heads_parse_all(const uint8_t *buf, size_t len, struct audit_head **heads,
			  size_t *bad_line)
{
	struct audit_head *v = NULL, *nv;
	size_t n = 0, cap = 0, off = 0;
	int r;

	while (off < len) {
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		r = audit_head_parse((const char *)buf + off, len - off, &v[n]);
		if (r == -EAGAIN)
			break; /* torn last line: never acknowledged, the writer cuts it */
		if (r < 0) {
			free(v);
			*bad_line = n;
			return -EBADMSG;
		}
		off += (size_t)r;
		n++;
	}
	*heads = v;
	return (int)n;
}

/* The log's bytes: all in memory (log), or read from fd a buffer at a time
 * (log NULL).  Naming a problem may need records anywhere after it, so a
 * streamed walk that meets one stops with -ESTALE and the caller walks
 * again over a mapping. */
struct vctx {
	const uint8_t *log;
	const uint8_t *hdr; /* the header's bytes (len >= AUDIT_HDR_LEN when streamed) */
	size_t len;
	int fd;
	uint8_t *buf;
	size_t buf_len;   /* bytes in buf */
	uint64_t buf_off; /* log offset of buf[0] */
	const uint8_t *pub;
	struct prehash *ph;
	struct audit_head *heads;
	size_t nheads;
	struct audit_verify_result *res;
	merkle_hash *leaves;
	size_t leaves_cap;
	uint64_t last_good_head_size;
	uint64_t good_off;  /* offset of the record at last_good_head_size */
	uint64_t last_time; /* time of the record before the one being checked */
};

static int fail(struct vctx *c, enum audit_problem p, uint64_t seq, uint64_t off,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int fail(struct vctx *c, enum audit_problem p, uint64_t seq, uint64_t off,
		const char *fmt, ...)
{
	va_list ap;

	c->res->problem = p;
	c->res->bad_seq = seq;
	c->res->bad_seq_last = seq;
	c->res->bad_offset = off;
	va_start(ap, fmt);
	vsnprintf(c->res->what, sizeof(c->res->what), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

static uint64_t get_time(const uint8_t *rec)
{
	uint64_t t = 0;

	for (int i = 16; i < 24; i++)
		t = t << 8 | rec[i];
	return t;
}

/* Scans forward from off for the record numbered seq; its position or -1. */
static int64_t find_seq(const struct vctx *c, uint64_t off, uint64_t pos, uint64_t seq)
{
	struct audit_record r;
	int n;

	while (off < c->len && (n = audit_record_parse(c->log + off, c->len - off, &r)) > 0) {
		if (r.seq == seq)
			return (int64_t)pos;
		off += (uint64_t)n;
		pos++;
	}
	return -1;
}

/* The record at position pos does not follow the one before it.  Works out
 * which single change explains what is seen, and names the first record it
 * touched. */
static int classify(struct vctx *c, const struct audit_record *r, uint64_t pos, uint64_t off,
		    uint64_t prev_off, const merkle_hash prev)
{
	bool seq_ok = r->seq == pos, prev_ok = !memcmp(r->prev, prev, AUDIT_HASH_LEN);
	struct audit_record next;
	merkle_hash h;
	int64_t q;

	if (!seq_ok && prev_ok)
		return fail(c, AUDIT_EDITED, pos, off,
			    "record %llu was edited: it now claims sequence number %llu",
			    (unsigned long long)pos, (unsigned long long)r->seq);
	if (seq_ok) {
		if (pos == 0)
			return fail(c, AUDIT_EDITED, 0, off,
				    "record 0 was edited: its prev field is not zero");
		/* An edit of this record's own prev field also changes its hash,
		 * so the next record's link breaks too; an edit of the previous
		 * record breaks only this link. */
		merkle_leaf_hash(r->raw, r->len, h);
		if (off + r->len >= c->len ||
		    audit_record_parse(c->log + off + r->len, c->len - off - r->len, &next) <= 0)
			return -EAGAIN; /* no next record: the heads decide (check_window) */
		if (memcmp(next.prev, h, AUDIT_HASH_LEN))
			return fail(c, AUDIT_EDITED, pos, off,
				    "record %llu was edited: its prev field does not match record %llu",
				    (unsigned long long)pos, (unsigned long long)pos - 1);
		return fail(c, AUDIT_EDITED, pos - 1, prev_off,
			    "record %llu was edited: its hash no longer matches the prev field of record %llu",
			    (unsigned long long)pos - 1, (unsigned long long)pos);
	}
	if (r->seq > pos) {
		q = find_seq(c, off, pos, pos);
		if (q >= 0)
			return fail(c, AUDIT_REORDERED, pos, off,
				    "record %llu was moved: found at position %lld, record %llu stands in its place",
				    (unsigned long long)pos, (long long)q, (unsigned long long)r->seq);
		if (pos == 0)
			fail(c, AUDIT_REMOVED, pos, off,
			     "records 0..%llu were removed: the log starts with record %llu",
			     (unsigned long long)r->seq - 1, (unsigned long long)r->seq);
		else
			fail(c, AUDIT_REMOVED, pos, off,
			     "records %llu..%llu were removed: record %llu follows record %llu",
			     (unsigned long long)pos, (unsigned long long)r->seq - 1,
			     (unsigned long long)r->seq, (unsigned long long)pos - 1);
		c->res->bad_seq_last = r->seq - 1;
		return -EBADMSG;
	}
	return fail(c, AUDIT_REORDERED, pos, off,
		    "record %llu appears again at position %llu (moved or copied)",
		    (unsigned long long)r->seq, (unsigned long long)pos);
}

static int check_head(struct vctx *c, size_t i, const struct merkle_frontier *f, uint64_t off)
{
	const struct audit_head *h = &c->heads[i];
	merkle_hash root;

	c->res->bad_head = i;
	if (prehash_head_sig(c->ph, i))
		return fail(c, AUDIT_BAD_SIGNATURE, h->size ? h->size - 1 : 0, off,
			    "signed head #%zu (size %llu) has an invalid signature", i,
			    (unsigned long long)h->size);
	merkle_frontier_root(f, root);
	if (memcmp(root, h->root, AUDIT_HASH_LEN) && c->last_good_head_size + 1 == h->size)
		return fail(c, AUDIT_EDITED, h->size - 1, c->good_off,
			    "record %llu was edited: the tree no longer matches signed head #%zu",
			    (unsigned long long)h->size - 1, i);
	if (memcmp(root, h->root, AUDIT_HASH_LEN)) {
		fail(c, AUDIT_ROOT_MISMATCH, c->last_good_head_size, c->good_off,
		     "records %llu..%llu do not match signed head #%zu although their chain is intact: "
		     "one of them was changed and the chain rewritten after it",
		     (unsigned long long)c->last_good_head_size, (unsigned long long)h->size - 1, i);
		c->res->bad_seq_last = h->size - 1;
		return -EBADMSG;
	}
	if (h->size && h->time_ns < c->last_time)
		return fail(c, AUDIT_BAD_HEADS, h->size - 1, off,
			    "signed head #%zu was signed before record %llu, which it covers, was written",
			    i, (unsigned long long)h->size - 1);
	c->last_good_head_size = h->size;
	c->good_off = off;
	c->res->heads++;
	c->res->have_head = true;
	c->res->last_head = *h;
	return 0;
}

static int keep_leaf(struct vctx *c, uint64_t pos, const merkle_hash h)
{
	merkle_hash *nv;

	if (pos == c->leaves_cap) {
		c->leaves_cap = c->leaves_cap ? 2 * c->leaves_cap : 1024;
		nv = realloc(c->leaves, c->leaves_cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		c->leaves = nv;
	}
	memcpy(c->leaves[pos], h, AUDIT_HASH_LEN);
	return 0;
}

/* A head line that breaks the heads' own order is named by its signature
 * first: an edited head is "signature invalid", a removed one "missing". */
static int bad_head(struct vctx *c, size_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int bad_head(struct vctx *c, size_t i, const char *fmt, ...)
{
	va_list ap;
	size_t j = i;

	if (!prehash_head_sig(c->ph, i) && i > 0 && prehash_head_sig(c->ph, i - 1))
		j = i - 1; /* head i is genuine, so the one it names was changed */
	if (prehash_head_sig(c->ph, j) || j != i) {
		c->res->bad_head = j;
		return fail(c, AUDIT_BAD_SIGNATURE, c->heads[j].size ? c->heads[j].size - 1 : 0, 0,
			    "signed head #%zu (size %llu) has an invalid signature", j,
			    (unsigned long long)c->heads[j].size);
	}
	fail(c, AUDIT_BAD_HEADS, c->heads[i].size, 0, "%s", "");
	va_start(ap, fmt);
	vsnprintf(c->res->what, sizeof(c->res->what), fmt, ap);
	va_end(ap);
	c->res->bad_head = i;
	return -EBADMSG;
}

/* The head names the log with this header (log id and creation time). */
static bool of_log(const struct audit_head *h, const struct audit_header *hdr)
{
	return !memcmp(h->log_id, hdr->log_id, AUDIT_LOG_ID_LEN) && h->created_ns == hdr->created_ns;
}

/* The heads among themselves (section 6): each names this log, the trusted
 * key, its own line number and the head before it; sizes and times never
 * decrease.  Roots and signatures of good-looking heads come in the walk. */
static int check_heads_order(struct vctx *c)
{
	const struct audit_head *h, *before;
	uint8_t d[AUDIT_HASH_LEN];

	if (c->nheads == 0)
		return fail(c, AUDIT_BAD_HEADS, 0, 0,
			    "there is no signed head: every kosa8 log has at least its first one "
			    "(size 0); the heads file was removed or emptied");
	for (size_t i = 0; i < c->nheads; i++) {
		h = &c->heads[i];
		before = i ? &c->heads[i - 1] : NULL;
		if (memcmp(h->pubkey, c->pub, AUDIT_PUBKEY_LEN)) {
			c->res->bad_head = i;
			return fail(c, AUDIT_BAD_SIGNATURE, h->size ? h->size - 1 : 0, 0,
				    "signed head #%zu names another key than the trusted one", i);
		}
		if (!of_log(h, &c->res->header))
			return bad_head(c, i, "signed head #%zu belongs to another log", i);
		if (h->index > i)
			return bad_head(c, i, "signed head #%zu is missing: the next line is head #%llu",
					i, (unsigned long long)h->index);
		if (h->index < i)
			return bad_head(c, i, "signed head #%llu appears again at line #%zu",
					(unsigned long long)h->index, i);
		if (before)
			audit_head_digest(before, d);
		else
			memset(d, 0, sizeof(d));
		if (memcmp(h->prev, d, AUDIT_HASH_LEN))
			return bad_head(c, i, "signed head #%zu does not follow head #%zu", i, i - 1);
		if (before && h->size < before->size)
			return bad_head(c, i, "signed head #%zu (size %llu) is smaller than the head "
					"before it", i, (unsigned long long)h->size);
		if (before && h->time_ns < before->time_ns)
			return bad_head(c, i, "signed head #%zu was signed before the head before it", i);
	}
	return 0;
}

static int check_header(struct vctx *c)
{
	int r;

	if (c->len == 0)
		return fail(c, AUDIT_BAD_HEADER, 0, 0,
			    "the log is empty (0 bytes): a kosa8 log always starts with its header; "
			    "it was wiped");
	r = audit_header_parse(c->hdr, c->len, &c->res->header);
	if (r == -EAGAIN)
		return fail(c, AUDIT_BAD_HEADER, 0, 0,
			    "the log holds %zu bytes, less than its header: it was cut", c->len);
	if (r == -EPROTONOSUPPORT)
		return fail(c, AUDIT_BAD_HEADER, 0, 0,
			    "the log has another format version; this kosa8 reads version %d",
			    AUDIT_VERSION);
	if (r < 0)
		return fail(c, AUDIT_BAD_HEADER, 0, 0, "not a kosa8 audit log");
	return 0;
}

/* Heads of size pos cover the records before pos: checked once the record
 * at pos (if any) has shown whether its link to them holds, so that a
 * plain edit is named by the chain, exactly, before a root mismatch.  The
 * tree of the first pos records is f (the records before the window)
 * extended by the window's first pos - f->size records. */
static int check_heads_at(struct vctx *c, size_t *hi, uint64_t pos, const struct merkle_frontier *f,
			  const struct prehash_window *w, uint64_t off)
{
	struct merkle_frontier at;
	int err;

	if (*hi == c->nheads || c->heads[*hi].size != pos)
		return 0;
	at = *f;
	prehash_extend(w, (size_t)(pos - f->size), &at);
	for (; *hi < c->nheads && c->heads[*hi].size == pos; (*hi)++)
		if ((err = check_head(c, *hi, &at, off)))
			return err;
	return 0;
}

/* The records of one window, in order: sequence number and chain link of
 * each, then the heads that end just before it.  Every record here is
 * well-formed (the window ends before one that is not). */
static int check_window(struct vctx *c, const struct prehash_window *w, const struct merkle_frontier *f,
			merkle_hash prev, uint64_t *prev_off, size_t *hi, bool want_leaves)
{
	struct audit_record r;
	uint64_t pos = w->first, off;
	const uint8_t *p;
	int err;

	for (size_t i = 0; i < w->n; i++, pos++) {
		off = w->off[i];
		p = w->bytes + (off - w->base);
		if (w->seq[i] != pos || memcmp(p + AUDIT_REC_PREV_OFF, prev, AUDIT_HASH_LEN)) {
			if (!c->log)
				return -ESTALE;
			if (audit_record_parse(c->log + off, c->len - off, &r) > 0 &&
			    (err = classify(c, &r, pos, off, *prev_off, prev)) != -EAGAIN)
				return err;
			/* The last record does not link to the one before: a head
			 * over the records before it that still matches clears
			 * them, and blames this one. */
			if ((err = check_heads_at(c, hi, pos, f, w, off)))
				return err;
			if (c->last_good_head_size == pos)
				return fail(c, AUDIT_EDITED, pos, off,
					    "record %llu was edited: its prev field does not match record %llu",
					    (unsigned long long)pos, (unsigned long long)pos - 1);
			fail(c, AUDIT_EDITED, pos - 1, *prev_off,
			     "record %llu or record %llu was edited: the last record's prev field does "
			     "not match the record before it", (unsigned long long)pos - 1,
			     (unsigned long long)pos);
			c->res->bad_seq_last = pos;
			return -EBADMSG;
		}
		if ((err = check_heads_at(c, hi, pos, f, w, off)))
			return err;
		if (get_time(p) < c->last_time)
			return fail(c, AUDIT_BAD_TIME, pos, off,
				    "record %llu is dated before %s: time never goes backwards in a "
				    "log kosa8 wrote", (unsigned long long)pos,
				    pos ? "the record before it" : "the log's creation");
		c->last_time = get_time(p);
		if (want_leaves && (err = keep_leaf(c, pos, w->leaf[i])))
			return err;
		memcpy(prev, w->leaf[i], AUDIT_HASH_LEN);
		*prev_off = off;
		c->res->records = pos + 1;
		c->res->bytes = off + w->len[i];
	}
	return 0;
}

/* Read buffer: 4 MiB, room for the largest record a log may hold and a few
 * windows of typical ones. */
#define STREAM_BUF (4u << 20)

/* The bytes from off on: in place, or from the read buffer, refilled from
 * off when it holds fewer than `need` of them (the few bytes of a record cut
 * by the buffer's end move down first). */
static int bytes_at(struct vctx *c, uint64_t off, size_t need, const uint8_t **p, size_t *avail)
{
	size_t keep, want;
	ssize_t n;

	if (c->log) {
		*p = c->log + off;
		*avail = c->len - off;
		return 0;
	}
	if (off < c->buf_off || off > c->buf_off + c->buf_len)
		return -EINVAL;
	keep = (size_t)(c->buf_off + c->buf_len - off);
	if (keep < need && c->buf_off + c->buf_len < c->len) {
		memmove(c->buf, c->buf + (off - c->buf_off), keep);
		c->buf_off = off;
		c->buf_len = keep;
		want = c->len - off < STREAM_BUF ? (size_t)(c->len - off) : STREAM_BUF;
		while (c->buf_len < want) {
			n = pread(c->fd, c->buf + c->buf_len, want - c->buf_len,
				  (off_t)(off + c->buf_len));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -ESTALE; /* the file shrank: look again */
			c->buf_len += (size_t)n;
		}
	}
	*p = c->buf + (off - c->buf_off);
	*avail = (size_t)(c->buf_off + c->buf_len - off);
	return 0;
}

static int walk(struct vctx *c, bool want_leaves)
{
	struct merkle_frontier f;
	struct prehash_window w = {0};
	struct audit_record r;
	merkle_hash prev = {0};
	uint64_t off = AUDIT_HDR_LEN, prev_off = 0, pos;
	const uint8_t *p = NULL;
	size_t avail = 0, hi = 0;
	int n, err;

	merkle_frontier_init(&f);
	for (;;) {
		/* A window ends where the buffer does; when not even one record
		 * framed, read on from it (a record is at most AUDIT_REC_MAX). */
		if ((err = bytes_at(c, off, 1, &p, &avail)))
			return err;
		prehash_fill(c->ph, p, avail, off, f.size, &w);
		if (w.n == 0 && avail < AUDIT_REC_MAX && off + avail < c->len) {
			if ((err = bytes_at(c, off, AUDIT_REC_MAX, &p, &avail)))
				return err;
			prehash_fill(c->ph, p, avail, off, f.size, &w);
		}
		if (w.n == 0)
			break;
		if ((err = check_window(c, &w, &f, prev, &prev_off, &hi, want_leaves)))
			return err;
		off = w.off[w.n - 1] + w.len[w.n - 1];
		prehash_extend(&w, w.n, &f);
	}
	/* off is the end of the log, or bytes that do not frame a record */
	pos = f.size;
	if (off < c->len && !c->log)
		return -ESTALE;
	n = off < c->len ? audit_record_parse(c->log + off, c->len - off, &r) : 0;
	if (n < 0 && audit_tail_is_torn(c->log + off, c->len - off)) {
		c->res->torn_tail = true;
		c->res->torn_offset = off;
		n = 0;
	}
	if (n < 0)
		return fail(c, AUDIT_MALFORMED, pos, off,
			    "record %llu at offset %llu was edited: it is no longer a well-formed record",
			    (unsigned long long)pos, (unsigned long long)off);
	w.n = 0;
	w.first = pos;
	if ((err = check_heads_at(c, &hi, pos, &f, &w, off)))
		return err;
	merkle_frontier_root(&f, c->res->root);
	c->res->unsigned_records = pos - c->last_good_head_size;
	if (hi < c->nheads) {
		/* A head past the end counts only if it is genuine. */
		c->res->bad_head = hi;
		if (prehash_head_sig(c->ph, hi))
			return fail(c, AUDIT_BAD_SIGNATURE, pos, off,
				    "signed head #%zu (size %llu) has an invalid signature", hi,
				    (unsigned long long)c->heads[hi].size);
		if (c->res->torn_tail)
			return fail(c, AUDIT_MALFORMED, pos, off,
				    "record %llu at offset %llu is cut off, and signed head #%zu covers it: "
				    "it is no longer a well-formed record", (unsigned long long)pos,
				    (unsigned long long)off, hi);
		fail(c, AUDIT_TRUNCATED, pos, off,
		     "the log was truncated: signed head #%zu covers %llu records, the log holds %llu",
		     hi, (unsigned long long)c->heads[hi].size, (unsigned long long)pos);
		c->res->bad_seq_last = c->heads[hi].size - 1;
		return -EBADMSG;
	}
	return 0;
}

/* Everything after the header checks.  Returns 0, -EBADMSG with res
 * filled in, -ESTALE (streamed: walk again over a mapping), or another
 * negative errno. */
static int run(struct vctx *c, const uint8_t *heads, size_t heads_len, merkle_hash **leaves)
{
	size_t bad = 0;
	int n, err;

	memset(c->res, 0, sizeof(*c->res));
	n = audit_heads_parse_all(heads, heads_len, &c->heads, &bad);
	if (n == -EBADMSG) {
		c->res->bad_head = bad;
		return fail(c, AUDIT_BAD_HEADS, 0, 0, "signed head #%zu is not a well-formed head line",
			    bad);
	}
	if (n < 0)
		return n;
	c->nheads = (size_t)n;
	err = check_header(c);
	if (!err) {
		c->last_time = c->res->header.created_ns;
		c->good_off = AUDIT_HDR_LEN;
		err = prehash_start(&c->ph, prehash_threads(c->len), c->heads, c->nheads, c->pub);
		if (!err)
			err = check_heads_order(c);
		if (!err)
			err = walk(c, leaves != NULL);
		prehash_stop(c->ph);
		c->ph = NULL;
	}
	if (!err && leaves) {
		*leaves = c->leaves;
		c->leaves = NULL;
	}
	free(c->leaves);
	free(c->heads);
	c->leaves = NULL;
	c->heads = NULL;
	c->leaves_cap = 0;
	c->last_good_head_size = 0;
	return err;
}

int audit_verify(const uint8_t *log, size_t log_len, const uint8_t *heads, size_t heads_len,
		 const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		 merkle_hash **leaves)
{
	struct vctx c = {.log = log, .hdr = log, .len = log_len, .fd = -1, .pub = pub, .res = res};

	return run(&c, heads, heads_len, leaves);
}

/* The streamed walk over fd; -ESTALE whenever it would need the mapping. */
static int verify_stream(int fd, size_t log_len, const uint8_t *heads, size_t heads_len,
			 const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
			 merkle_hash **leaves)
{
	uint8_t hdr[AUDIT_HDR_LEN];
	struct vctx c = {.hdr = hdr, .len = log_len, .fd = fd, .pub = pub, .res = res};
	ssize_t n = log_len < AUDIT_HDR_LEN ? 0 : pread(fd, hdr, sizeof(hdr), 0);
	int err;

	/* The header is read on its own; the walk streams what follows. */
	if (n != (ssize_t)sizeof(hdr) || !(c.buf = malloc(STREAM_BUF)))
		return -ESTALE;
	c.buf_off = AUDIT_HDR_LEN;
	err = run(&c, heads, heads_len, leaves);
	free(c.buf);
	return err;
}

int audit_verify_fd_clean(int fd, size_t log_len, const uint8_t *heads, size_t heads_len,
			  const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res)
{
	return verify_stream(fd, log_len, heads, heads_len, pub, res, NULL);
}

int audit_verify_fd(int fd, size_t log_len, const uint8_t *heads, size_t heads_len,
		    const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		    merkle_hash **leaves)
{
	const uint8_t *log;
	int err = verify_stream(fd, log_len, heads, heads_len, pub, res, leaves);

	if (err != -ESTALE)
		return err;
	/* A problem to name, a short log, or no memory for the buffer: the
	 * whole log, mapped. */
	if (log_len > 0) {
		log = mmap(NULL, log_len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (log == MAP_FAILED)
			return -errno;
	} else {
		log = NULL;
	}
	err = audit_verify(log, log_len, heads, heads_len, pub, res, leaves);
	audit_unmap(log, log_len);
	return err;
}

int audit_map_file(const char *path, const uint8_t **p, size_t *len)
{
	void *m;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), err;

	if (fd < 0)
		return -errno;
	*p = NULL;
	if ((err = fd_regular_size(fd, UINT64_MAX, len))) {
		close(fd);
		return err;
	}
	if (*len > 0) {
		m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			close(fd);
			return -errno;
		}
		*p = m;
	}
	close(fd);
	return 0;
}

void audit_unmap(const uint8_t *p, size_t len)
{
	if (p)
		munmap((void *)p, len);
}

int audit_verify_files(const char *log_path, const char *heads_path,
		       const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		       merkle_hash **leaves)
{
	const uint8_t *heads = NULL;
	size_t heads_len = 0, log_len;
	int fd, err;

	fd = open(log_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if ((err = fd_regular_size(fd, UINT64_MAX, &log_len))) {
		close(fd);
		return err;
	}
	err = audit_map_file(heads_path, &heads, &heads_len);
	if (err == -ENOENT)
		err = 0;
	if (!err)
		err = audit_verify_fd(fd, log_len, heads, heads_len, pub, res, leaves);
	audit_unmap(heads, heads_len);
	close(fd);
	return err;
}

int audit_pin_check(const struct audit_head *pin, const uint8_t pub[AUDIT_PUBKEY_LEN],
		    const struct audit_verify_result *res, const struct audit_head *heads,
		    size_t nheads, const merkle_hash *leaves, char *why, size_t cap)
{
	const struct audit_head *now = nheads ? &heads[nheads - 1] : NULL;
	merkle_hash path[MERKLE_MAX_PATH];
	int n;

	if (audit_head_verify(pub, pin) || memcmp(pin->pubkey, pub, AUDIT_PUBKEY_LEN)) {
		snprintf(why, cap, "the pinned head is not signed by the trusted key");
		return -EBADMSG;
	}
	if (!of_log(pin, &res->header)) {
		snprintf(why, cap, "the pinned head belongs to another log: this log was replaced");
		return -EBADMSG;
	}
	if (pin->index >= nheads || pin->size > res->records) {
		snprintf(why, cap, "truncated: the pinned head #%llu covers %llu records; the log now "
			 "has %zu heads and %llu records", (unsigned long long)pin->index,
			 (unsigned long long)pin->size, nheads, (unsigned long long)res->records);
		return -EBADMSG;
	}
	if (memcmp(&heads[pin->index], pin, sizeof(*pin))) {
		snprintf(why, cap, "rewritten: signed head #%llu is not the one pinned",
			 (unsigned long long)pin->index);
		return -EBADMSG;
	}
	n = pin->size ? merkle_consistency_proof(leaves, now->size, pin->size, path) : 0;
	if (n < 0 ||
	    merkle_verify_consistency(pin->size, now->size, pin->root, now->root, path, (size_t)n)) {
		snprintf(why, cap, "rewritten: the log no longer extends the pinned head of size %llu",
			 (unsigned long long)pin->size);
		return -EBADMSG;
	}
	return n;
}
