#include "audit/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit/merkle.h"
#include "audit/sign.h"
#include "audit/upgrade.h"
#include "common/log.h"
#include "common/util.h"

/* A thread waiting for its records to be written; on its own stack.  Each
 * has its own condition variable, so that finishing a batch wakes the
 * threads whose records it held and no others, and handing the lead on
 * wakes exactly one. */
struct waiter {
	pthread_cond_t cv;
	size_t left; /* its records not yet written */
	int err;     /* the first error among them */
	bool lead;   /* it is to write the next batch */
};

/* One queued record. */
struct pending {
	const struct audit_event *ev;
	size_t size;
	uint64_t seq;
	struct waiter *w;
	struct pending *next;
};

/* Largest batch one leader writes at once: bounds its buffer. */
#define BATCH_BYTES (4 * MiB)

struct audit_log {
	char path[PATH_MAX];
	char heads_path[PATH_MAX];
	int fd, hfd, sfd; /* log, heads, the writer's state cache (-1: none) */
	unsigned head_every;
	uint64_t head_ns;
	bool sync;
	bool broken; /* open failed: close must not write */
	bool created; /* this handle created the log */
	bool from_state; /* the records were taken from PATH.state, not read */
	bool lazy_close; /* close signs only a head that is due */
	bool mac_ok;     /* mac_key derived: PATH.state may be used */
	char *archived;  /* details of the audit.archived record still to write */
	EVP_PKEY *key;
	uint8_t mac_key[AUDIT_HASH_LEN]; /* for PATH.state (audit_key_mac_key) */
	struct audit_header hdr;

	/* The files as this handle last saw them while holding the lock. */
	uint64_t end, hend, count, last_time, last_off;
	merkle_hash last_hash;
	struct merkle_frontier tree;
	bool have_head;
	struct audit_head head;

	/* Group commit: one leader at a time does the I/O for the queue. */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* for threads that want the lead without a record */
	bool busy;         /* some thread holds the lead */
	unsigned others;   /* how many of those wait */
	struct pending *qhead, **qtail;
	uint8_t *buf;
	size_t cap;
	struct audit_head *fresh; /* heads signed in the current batch */
	size_t nfresh, fresh_cap;
};

const char *audit_strerror(int err)
{
	switch (err) {
	case -ENOSPC: return "no space left on device: nothing was written, the log is intact";
	case -EFBIG: return "file size limit reached: nothing was written, the log is intact";
	case -EDQUOT: return "disk quota exceeded: nothing was written, the log is intact";
	case -EBADMSG: return "the log is damaged or was tampered with (run 'kosa8 audit verify')";
	case -EPROTONOSUPPORT: return "the log has a format version this kosa8 does not know";
	case -EPERM: return "the signing key is readable by others or not owned by you (chmod 600)";
	case -EINVAL: return "invalid event (type and actor required, no control characters, "
			     "details a JSON object)";
	case -E2BIG: return "event too large";
	default: return strerror(-err);
	}
}

int audit_default_path(char *buf, size_t len)
{
	const char *env = getenv("KOSA8_AUDIT_LOG");
	char dir[PATH_MAX];
	int n, err;

	if (env && *env) {
		n = snprintf(buf, len, "%s", env);
	} else {
		err = kosa8_state_dir(dir, sizeof(dir));
		if (err)
			return err;
		n = snprintf(buf, len, "%s/audit.log", dir);
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int audit_heads_path(const char *log_path, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s.heads", log_path);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int lock_file(struct audit_log *l)
{
	while (flock(l->fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static void unlock_file(struct audit_log *l)
{
	flock(l->fd, LOCK_UN);
}

/* Under the lock: reads the header.  A log is created whole (create_log),
 * so a file shorter than its header was cut or wiped: that is evidence,
 * never rewritten. */
static int read_header(struct audit_log *l)
{
	uint8_t buf[AUDIT_HDR_LEN];
	ssize_t n = pread(l->fd, buf, sizeof(buf), 0);
	int err;

	if (n < 0)
		return -errno;
	err = audit_header_parse(buf, (size_t)n, &l->hdr);
	if (err == -EAGAIN) {
		log_err("audit: %s holds %zd bytes, less than its header: it was cut or wiped; "
			"refusing to write to it (it is kept as it is)", l->path, n);
		return -EBADMSG;
	}
	l->end = AUDIT_HDR_LEN;
	l->last_time = l->hdr.created_ns; /* record times start there */
	return err;
}

/* A new log appears whole, with its header, or not at all: linked into
 * place from a temporary file (link() fails if another writer created it
 * first, whose log is then used). */
static int create_log(struct audit_log *l)
{
	char tmp[PATH_MAX];
	int fd = audit_new_file(l->path, tmp, sizeof(tmp), &l->hdr), err = 0;

	if (fd < 0)
		return fd;
	if (link(tmp, l->path) < 0 && errno != EEXIST)
		err = -errno;
	if (!err)
		sync_dir_of(l->path);
	unlink(tmp);
	close(fd);
	return err;
}

static int cut_tail(int fd, uint64_t off, const char *path, uint64_t size)
{
	log_warn("audit: %s: cutting an incomplete last entry (%llu bytes at offset %llu), "
		 "left by an interrupted write", path, (unsigned long long)(size - off),
		 (unsigned long long)off);
	if (ftruncate(fd, (off_t)off) < 0 || fdatasync(fd) < 0)
		return -errno;
	return 0;
}

/* Takes in records other writers appended since this handle last looked. */
static int scan_records(struct audit_log *l, const uint8_t *m, uint64_t size, uint64_t *cut)
{
	struct audit_record r;
	merkle_hash h;
	uint64_t off = l->end;
	int n;

	*cut = UINT64_MAX;
	while (off < size) {
		n = audit_record_parse(m + off, size - off, &r);
		if (n < 0 && audit_tail_is_torn(m + off, size - off)) {
			*cut = off; /* holding the lock: its writer is gone */
			break;
		}
		if (n < 0 || r.seq != l->count || memcmp(r.prev, l->last_hash, AUDIT_HASH_LEN)) {
			log_err("audit: %s: record at offset %llu does not continue the chain",
				l->path, (unsigned long long)off);
			return -EBADMSG;
		}
		merkle_leaf_hash(r.raw, r.len, h);
		merkle_frontier_add(&l->tree, h);
		memcpy(l->last_hash, h, AUDIT_HASH_LEN);
		l->count++;
		l->last_time = r.time_ns;
		l->last_off = off;
		off += (uint64_t)n;
		l->end = off;
	}
	return 0;
}

/* *cut: where a torn tail starts (UINT64_MAX: none); cut by catch_up()
 * once it knows no signed head covers what lies there. */
static int catch_up_records(struct audit_log *l, uint64_t *cut, uint64_t *size_out)
{
	struct stat st;
	uint64_t size;
	void *m;
	int err;

	*cut = UINT64_MAX;
	if (fstat(l->fd, &st) < 0)
		return -errno;
	size = (uint64_t)st.st_size;
	*size_out = size;
	if (size < l->end) {
		log_err("audit: %s shrank under us (%llu < %llu bytes)", l->path,
			(unsigned long long)size, (unsigned long long)l->end);
		return -EBADMSG;
	}
	if (size == l->end)
		return 0;
	m = mmap(NULL, size, PROT_READ, MAP_SHARED, l->fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	err = scan_records(l, m, size, cut);
	munmap(m, size);
	return err;
}

static int take_heads(struct audit_log *l, const char *buf, size_t len, size_t *used)
{
	struct audit_head h;
	size_t off = 0;
	int n;

	while (off < len) {
		n = audit_head_parse(buf + off, len - off, &h);
		if (n == -EAGAIN)
			break;
		if (n < 0 || memcmp(h.log_id, l->hdr.log_id, AUDIT_LOG_ID_LEN) ||
		    h.created_ns != l->hdr.created_ns ||
		    (l->have_head && (h.size < l->head.size || h.index != l->head.index + 1))) {
			log_err("audit: %s: damaged head line at offset %llu", l->heads_path,
				(unsigned long long)(l->hend + off));
			return -EBADMSG;
		}
		l->head = h;
		l->have_head = true;
		off += (size_t)n;
	}
	*used = off;
	return 0;
}

/* Where the last whole head line starts, read from the file's tail: a
 * writer needs only the newest head (verify checks them all), so opening
 * a log costs the same however many heads it has.  0 (read it all) when
 * the tail holds no whole line after a line break. */
static uint64_t last_line_start(int fd, uint64_t size)
{
	char buf[2 * AUDIT_HEAD_LINE_MAX];
	uint64_t base = size > sizeof(buf) ? size - sizeof(buf) : 0;
	ssize_t n = pread(fd, buf, (size_t)(size - base), (off_t)base);
	char *end, *start;

	if (n <= 0 || base == 0)
		return 0;
	end = memrchr(buf, '\n', (size_t)n);
	if (!end)
		return 0;
	start = end > buf ? memrchr(buf, '\n', (size_t)(end - buf)) : NULL;
	return start ? base + (uint64_t)(start - buf) + 1 : 0;
}

static int catch_up_heads(struct audit_log *l)
{
	struct stat st;
	uint64_t size;
	size_t used = 0;
	char *buf;
	ssize_t n;
	int err;

	if (fstat(l->hfd, &st) < 0)
		return -errno;
	size = (uint64_t)st.st_size;
	if (size < l->hend)
		return -EBADMSG;
	if (size == l->hend)
		return 0;
	if (l->hend == 0)
		l->hend = last_line_start(l->hfd, size);
	buf = malloc(size - l->hend);
	if (!buf)
		return -ENOMEM;
	n = pread(l->hfd, buf, size - l->hend, (off_t)l->hend);
	err = n < 0 ? -errno : (uint64_t)n != size - l->hend ? -EIO : 0;
	if (!err)
		err = take_heads(l, buf, (size_t)n, &used);
	free(buf);
	if (err)
		return err;
	l->hend += used;
	if (l->hend < size)
		err = cut_tail(l->hfd, l->hend, l->heads_path, size);
	return err;
}

static int catch_up(struct audit_log *l)
{
	uint64_t cut, size;
	int err = catch_up_records(l, &cut, &size);

	if (!err)
		err = catch_up_heads(l);
	if (!err && l->have_head && l->head.size > l->count) {
		log_err("audit: %s holds %llu records but a signed head covers %llu: truncated",
			l->path, (unsigned long long)l->count, (unsigned long long)l->head.size);
		err = -EBADMSG;
	}
	if (!err && cut != UINT64_MAX)
		err = cut_tail(l->fd, cut, l->path, size);
	return err;
}

static uint64_t signed_time(const struct audit_log *l);

/* Signs a head over the tree as it stands, to be written after the records. */
static int add_head(struct audit_log *l, uint64_t t)
{
	struct audit_head *h;

	if (l->nfresh == l->fresh_cap) {
		size_t cap = l->fresh_cap ? 2 * l->fresh_cap : 8;
		struct audit_head *nv = realloc(l->fresh, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->fresh = nv;
		l->fresh_cap = cap;
	}
	h = &l->fresh[l->nfresh];
	memset(h, 0, sizeof(*h));
	memcpy(h->log_id, l->hdr.log_id, AUDIT_LOG_ID_LEN);
	h->created_ns = l->hdr.created_ns;
	/* Each head names the one before it: none can go missing unseen. */
	if (l->nfresh || l->have_head) {
		const struct audit_head *before = l->nfresh ? &l->fresh[l->nfresh - 1] : &l->head;
		h->index = before->index + 1;
		audit_head_digest(before, h->prev);
	}
	h->size = l->count;
	/* times never go backwards, the clock may: a head is no older than
	 * the records it covers or the head before it */
	if (t < l->last_time)
		t = l->last_time;
	if (t < signed_time(l))
		t = signed_time(l);
	h->time_ns = t;
	merkle_frontier_root(&l->tree, h->root);
	if (audit_head_sign(l->key, h))
		return -EIO;
	l->nfresh++;
	return 0;
}

static uint64_t signed_size(const struct audit_log *l)
{
	if (l->nfresh)
		return l->fresh[l->nfresh - 1].size;
	return l->have_head ? l->head.size : 0;
}

static uint64_t signed_time(const struct audit_log *l)
{
	if (l->nfresh)
		return l->fresh[l->nfresh - 1].time_ns;
	return l->have_head ? l->head.time_ns : 0;
}

/* Writes the heads signed in this batch; a failure here loses no record
 * (they are durable already) and the heads are signed again next time. */
static int write_heads(struct audit_log *l)
{
	char line[AUDIT_HEAD_LINE_MAX];
	char *buf;
	size_t len = 0;
	int err = 0, n;

	if (!l->nfresh)
		return 0;
	buf = malloc(l->nfresh * AUDIT_HEAD_LINE_MAX);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < l->nfresh; i++) {
		n = audit_head_format(&l->fresh[i], line, sizeof(line));
		memcpy(buf + len, line, (size_t)n);
		len += (size_t)n;
	}
	err = write_all(l->hfd, buf, len);
	if (!err && l->sync && fdatasync(l->hfd) < 0)
		err = -errno;
	if (err) {
		if (ftruncate(l->hfd, (off_t)l->hend) < 0)
			log_warn("audit: could not undo a failed head write on %s", l->heads_path);
		log_warn("audit: %s: could not write a signed head: %s", l->heads_path,
			 strerror(-err));
	} else {
		l->hend += len;
		l->head = l->fresh[l->nfresh - 1];
		l->have_head = true;
	}
	free(buf);
	l->nfresh = 0;
	return err;
}

static int grow_buf(struct audit_log *l, size_t need)
{
	uint8_t *nb;

	if (need <= l->cap)
		return 0;
	nb = realloc(l->buf, need);
	if (!nb)
		return -ENOMEM;
	l->buf = nb;
	l->cap = need;
	return 0;
}

/* Encodes the batch after the current end, chaining and hashing as it
 * goes, and signs the heads that fall due inside it. */
static int encode_batch(struct audit_log *l, struct pending *batch, uint64_t t, size_t *len)
{
	merkle_hash h;
	size_t off = 0, need = 0;
	int n, err;

	for (struct pending *p = batch; p; p = p->next)
		need += p->size;
	if ((err = grow_buf(l, need)))
		return err;
	for (struct pending *p = batch; p; p = p->next) {
		n = audit_record_encode(l->buf + off, l->cap - off, l->count, t, l->last_hash, p->ev);
		if (n < 0)
			return n;
		merkle_leaf_hash(l->buf + off, (size_t)n, h);
		merkle_frontier_add(&l->tree, h);
		memcpy(l->last_hash, h, AUDIT_HASH_LEN);
		p->seq = l->count++;
		l->last_off = l->end + off;
		off += (size_t)n;
		if (l->count - signed_size(l) >= l->head_every && (err = add_head(l, t)))
			return err;
	}
	if (l->count > signed_size(l) && t - signed_time(l) >= l->head_ns)
		err = add_head(l, t);
	*len = off;
	return err;
}

/* The writer's state cache, PATH.state: where the records end, the last
 * record's hash and time, and the tree's right edge, as of the last batch.
 * With it a writer that opens the log reads only what was appended since
 * (and the last head line), so `kosa8 audit append` costs the same at the
 * millionth record as at the first.  It is a cache, not evidence: verify
 * never reads it; a writer uses it only when it matches the log (log id,
 * the last record it names is there and hashes to what it says, and the
 * tree equals the newest head's when they cover the same records), else
 * it reads the whole log as before.  The cache carries a MAC under the
 * signing key (audit_key_mac_key): its tree cannot be checked against the
 * records after the newest head without reading them, so a cache written
 * by someone without the key (a forged tree) would make the writer sign a
 * root of their choosing; a cache without a valid MAC is not used. */
struct state_file {
	char magic[4]; /* "K8AS" */
	uint8_t log_id[AUDIT_LOG_ID_LEN];
	uint64_t count, end, last_off, last_time;
	merkle_hash last_hash;
	struct merkle_frontier tree;
	uint8_t mac[AUDIT_HASH_LEN]; /* of every byte before it */
};

static void state_save(struct audit_log *l)
{
	struct state_file st;

	if (l->sfd < 0)
		return;
	memset(&st, 0, sizeof(st));
	memcpy(st.magic, "K8AS", 4);
	memcpy(st.log_id, l->hdr.log_id, AUDIT_LOG_ID_LEN);
	st.count = l->count;
	st.end = l->end;
	st.last_off = l->last_off;
	st.last_time = l->last_time;
	memcpy(st.last_hash, l->last_hash, AUDIT_HASH_LEN);
	st.tree = l->tree;
	if (audit_mac(l->mac_key, &st, offsetof(struct state_file, mac), st.mac) ||
	    pwrite(l->sfd, &st, sizeof(st), 0) != (ssize_t)sizeof(st))
		log_debug("audit: %s.state not written; the next writer reads the whole log", l->path);
}

/* Under the lock, right after the header: takes the cache if it matches. */
static void state_load(struct audit_log *l)
{
	struct state_file st;
	struct audit_record r;
	struct stat fs;
	merkle_hash h, mac;
	uint8_t *rec;
	uint64_t len;
	bool ok;

	if (l->sfd < 0 || pread(l->sfd, &st, sizeof(st), 0) != (ssize_t)sizeof(st) ||
	    audit_mac(l->mac_key, &st, offsetof(struct state_file, mac), mac) ||
	    CRYPTO_memcmp(mac, st.mac, sizeof(mac)) || memcmp(st.magic, "K8AS", 4) || memcmp(st.log_id, l->hdr.log_id, AUDIT_LOG_ID_LEN) ||
	    fstat(l->fd, &fs) < 0 || st.end > (uint64_t)fs.st_size || st.tree.size != st.count ||
	    st.count == 0 || st.last_off < AUDIT_HDR_LEN || st.last_off >= st.end ||
	    st.end - st.last_off > AUDIT_REC_MAX)
		return;
	len = st.end - st.last_off;
	rec = malloc(len);
	ok = rec && pread(l->fd, rec, len, (off_t)st.last_off) == (ssize_t)len &&
	     audit_record_parse(rec, len, &r) == (int)len && r.seq == st.count - 1 &&
	     r.time_ns == st.last_time;
	if (ok) {
		merkle_leaf_hash(rec, len, h);
		ok = !memcmp(h, st.last_hash, AUDIT_HASH_LEN);
	}
	free(rec);
	if (!ok)
		return;
	l->count = st.count;
	l->end = st.end;
	l->last_off = st.last_off;
	l->last_time = st.last_time;
	memcpy(l->last_hash, st.last_hash, AUDIT_HASH_LEN);
	l->tree = st.tree;
	l->from_state = true;
}

/* After catch_up: a cached tree that disagrees with a head over the same
 * records is dropped, and the log read from its start. */
static bool state_agrees(struct audit_log *l)
{
	merkle_hash root;

	if (!l->from_state || !l->have_head || l->head.size != l->count)
		return true;
	merkle_frontier_root(&l->tree, root);
	return !memcmp(root, l->head.root, AUDIT_HASH_LEN);
}

struct saved {
	uint64_t end, count, last_time, last_off;
	merkle_hash last_hash;
	struct merkle_frontier tree;
};

static void save(const struct audit_log *l, struct saved *s)
{
	s->end = l->end;
	s->count = l->count;
	s->last_time = l->last_time;
	s->last_off = l->last_off;
	memcpy(s->last_hash, l->last_hash, AUDIT_HASH_LEN);
	s->tree = l->tree;
}

static void restore(struct audit_log *l, const struct saved *s)
{
	l->end = s->end;
	l->count = s->count;
	l->last_time = s->last_time;
	l->last_off = s->last_off;
	memcpy(l->last_hash, s->last_hash, AUDIT_HASH_LEN);
	l->tree = s->tree;
	l->nfresh = 0;
}

/* The leader's I/O, under the file lock.  The records reach the disk before
 * any head that covers them. */
static int write_locked(struct audit_log *l, struct pending *batch)
{
	struct saved s;
	uint64_t t;
	size_t len = 0;
	int err;

	save(l, &s);
	t = now_ns();
	if (t < l->last_time)
		t = l->last_time; /* times never go backwards along the chain */
	err = encode_batch(l, batch, t, &len);
	if (!err)
		err = write_all(l->fd, l->buf, len);
	if (!err && l->sync && fdatasync(l->fd) < 0)
		err = -errno;
	if (err) {
		/* Leave the file as it was: what is not acknowledged is not there. */
		if (ftruncate(l->fd, (off_t)s.end) < 0)
			log_warn("audit: could not undo a failed write on %s; the next "
				 "writer will cut it", l->path);
		restore(l, &s);
		return err;
	}
	l->end += len;
	l->last_time = t;
	write_heads(l);
	state_save(l);
	return 0;
}

static int write_batch(struct audit_log *l, struct pending *batch)
{
	int err = lock_file(l);

	if (err)
		return err;
	err = catch_up(l);
	if (!err)
		err = write_locked(l, batch);
	unlock_file(l);
	return err;
}

static struct pending *take_batch(struct audit_log *l)
{
	struct pending *first = l->qhead, *p = first, *last = first;
	size_t bytes = 0;

	while (p && (p == first || bytes + p->size <= BATCH_BYTES)) {
		bytes += p->size;
		last = p;
		p = p->next;
	}
	last->next = NULL;
	l->qhead = p;
	if (!p)
		l->qtail = &l->qhead;
	return first;
}

/* With l->mu held and the lead taken: passes the lead on, to a thread that
 * wants it without records first (sign, count), else to the thread of the
 * first queued record, else drops it. */
static void pass_lead(struct audit_log *l)
{
	if (!l->others && l->qhead) {
		l->qhead->w->lead = true;
		pthread_cond_signal(&l->qhead->w->cv);
		return;
	}
	l->busy = false;
	if (l->others)
		pthread_cond_broadcast(&l->cv);
}

/* With l->mu held and the lead: writes one batch from the queue, wakes the
 * threads it completes, passes the lead on. */
static void lead_batch(struct audit_log *l)
{
	struct pending *batch = take_batch(l), *p, *next;
	int err;

	pthread_mutex_unlock(&l->mu);
	err = write_batch(l, batch);
	pthread_mutex_lock(&l->mu);
	for (p = batch; p; p = next) {
		struct waiter *w = p->w;
		next = p->next; /* p may be gone once w wakes */
		if (err && !w->err)
			w->err = err;
		if (--w->left == 0)
			pthread_cond_signal(&w->cv);
	}
	pass_lead(l);
}

/* Queues items (checked already) and returns once all are written. */
static int append_items(struct audit_log *l, struct pending *items, size_t n)
{
	struct waiter w = {.left = n};

	pthread_cond_init(&w.cv, NULL);
	pthread_mutex_lock(&l->mu);
	for (size_t i = 0; i < n; i++) {
		items[i].w = &w;
		*l->qtail = &items[i];
		l->qtail = &items[i].next;
	}
	if (!l->busy) {
		l->busy = true;
		w.lead = true;
	}
	while (w.left) {
		if (w.lead) {
			w.lead = false;
			lead_batch(l);
		} else {
			pthread_cond_wait(&w.cv, &l->mu);
		}
	}
	pthread_mutex_unlock(&l->mu);
	pthread_cond_destroy(&w.cv);
	return w.err;
}

int audit_log_append(struct audit_log *l, const struct audit_event *ev, uint64_t *seq)
{
	struct pending me = {.ev = ev};
	int n = audit_event_check(ev), err;

	if (n < 0)
		return n;
	me.size = (size_t)n;
	err = append_items(l, &me, 1);
	if (!err && seq)
		*seq = me.seq;
	return err;
}

int audit_log_append_many(struct audit_log *l, const struct audit_event *evs, size_t n,
			  uint64_t *first_seq)
{
	struct pending *items;
	int err = 0, size;

	if (n == 0)
		return 0;
	items = calloc(n, sizeof(*items));
	if (!items)
		return -ENOMEM;
	for (size_t i = 0; i < n && !err; i++) {
		size = audit_event_check(&evs[i]);
		err = size < 0 ? size : 0;
		items[i].ev = &evs[i];
		items[i].size = (size_t)size;
	}
	if (!err)
		err = append_items(l, items, n);
	if (!err && first_seq)
		*first_seq = items[0].seq;
	free(items);
	return err;
}

static void leader_enter(struct audit_log *l)
{
	pthread_mutex_lock(&l->mu);
	l->others++;
	while (l->busy)
		pthread_cond_wait(&l->cv, &l->mu);
	l->others--;
	l->busy = true;
	pthread_mutex_unlock(&l->mu);
}

static void leader_leave(struct audit_log *l)
{
	pthread_mutex_lock(&l->mu);
	pass_lead(l);
	pthread_mutex_unlock(&l->mu);
}

/* force: sign whenever records wait; else only when head_secs passed. */
static int sign_if_due(struct audit_log *l, bool force, struct audit_head *out)
{
	uint64_t t;
	int err;

	leader_enter(l);
	err = lock_file(l);
	if (err)
		goto out;
	err = catch_up(l);
	t = now_ns();
	if (!err && (l->count > signed_size(l) || (!l->have_head && force)) &&
	    (force || t - signed_time(l) >= l->head_ns)) {
		err = add_head(l, t < l->last_time ? l->last_time : t);
		if (!err)
			err = write_heads(l);
	}
	if (!err && out && l->have_head)
		*out = l->head;
	unlock_file(l);
out:
	leader_leave(l);
	return err;
}

int audit_log_sign_head(struct audit_log *l, struct audit_head *head)
{
	return sign_if_due(l, true, head);
}

int audit_log_tick(struct audit_log *l)
{
	return sign_if_due(l, false, NULL);
}

static int open_companions(struct audit_log *l)
{
	char state[PATH_MAX];

	l->hfd = open(l->heads_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (l->hfd < 0)
		return -errno;
	/* no MAC key, no cache: one without a MAC is never trusted */
	if (l->mac_ok && snprintf(state, sizeof(state), "%s.state", l->path) < (int)sizeof(state))
		l->sfd = open(state, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	return 0;
}

static void close_files(struct audit_log *l)
{
	if (l->fd >= 0)
		close(l->fd);
	if (l->hfd >= 0)
		close(l->hfd);
	if (l->sfd >= 0)
		close(l->sfd);
	l->fd = l->hfd = l->sfd = -1;
}

static int open_files(struct audit_log *l)
{
	char dir[PATH_MAX];
	int err;

	snprintf(dir, sizeof(dir), "%s", l->path);
	err = mkdir_p(dirname(dir), 0700);
	if (err)
		return err;
	l->fd = open(l->path, O_RDWR | O_APPEND | O_CLOEXEC);
	if (l->fd < 0 && errno == ENOENT) {
		if ((err = create_log(l)))
			return err;
		l->created = true;
		l->fd = open(l->path, O_RDWR | O_APPEND | O_CLOEXEC);
	}
	if (l->fd < 0)
		return -errno;
	return open_companions(l);
}

/* Under the lock on a format-1 log: it is moved aside and a new log, already
 * locked, takes its place (upgrade.c); its first record names the old one. */
static int archive_v1(struct audit_log *l)
{
	int nfd, err = audit_v1_archive(l->path, l->fd, &nfd, &l->archived);

	if (err)
		return err;
	close_files(l); /* drops the old file's lock: its waiters find it moved */
	l->fd = nfd;
	l->created = true;
	err = open_companions(l);
	return err ? err : read_header(l);
}

/* The audit.archived record, first in the new log, and a head over it. */
static int write_archived(struct audit_log *l)
{
	struct audit_event ev = {"", "kosa8", AUDIT_ARCHIVED_TYPE, l->archived};
	struct pending p = {.ev = &ev};
	int n = audit_event_check(&ev), err;

	if (n < 0)
		return n;
	p.size = (size_t)n;
	err = write_locked(l, &p);
	if (!err)
		err = add_head(l, l->last_time);
	if (!err)
		err = write_heads(l);
	free(l->archived);
	l->archived = NULL;
	return err;
}

/* Under the lock, after catch_up: the first head (size 0) signs the header
 * of a new log, so a log is never without heads.  Records and no head: the
 * heads were removed, and a writer must not cover that up. */
static int first_head(struct audit_log *l)
{
	int err;

	if (l->have_head)
		return 0;
	if (l->count) {
		log_err("audit: %s holds %llu records but %s holds no signed head: the heads were "
			"removed; refusing to write (run 'kosa8 audit verify')", l->path,
			(unsigned long long)l->count, l->heads_path);
		return -EBADMSG;
	}
	err = add_head(l, now_ns());
	return err ? err : write_heads(l);
}

/* A file this handle opened that PATH no longer names: another writer
 * moved a format-1 log aside while this one waited for its lock. */
static bool moved_away(struct audit_log *l)
{
	struct stat a, b;

	return fstat(l->fd, &a) == 0 && stat(l->path, &b) == 0 &&
	       (a.st_ino != b.st_ino || a.st_dev != b.st_dev);
}

static int init_log(struct audit_log *l)
{
	int err = lock_file(l);

	if (err)
		return err;
	err = moved_away(l) ? -ESTALE : read_header(l);
	if (err == -EPROTONOSUPPORT)
		err = archive_v1(l);
	if (!err) {
		state_load(l);
		err = catch_up(l);
	}
	if (!err && !state_agrees(l)) {
		/* start again from the header, without the cache */
		l->count = l->last_off = 0;
		l->end = AUDIT_HDR_LEN;
		l->last_time = l->hdr.created_ns;
		memset(l->last_hash, 0, AUDIT_HASH_LEN);
		merkle_frontier_init(&l->tree);
		l->from_state = false;
		err = catch_up(l);
	}
	if (!err)
		err = first_head(l);
	if (!err && l->archived)
		err = write_archived(l);
	if (!err)
		state_save(l);
	unlock_file(l);
	return err;
}

/* A new log: say which key signs it, once, for the user to keep elsewhere:
 * a key pinned outside the writer's reach is what makes the log evidence. */
static void announce_key(struct audit_log *l)
{
	uint8_t pub[AUDIT_PUBKEY_LEN];
	char hex[2 * AUDIT_PUBKEY_LEN + 1];

	if (audit_key_public(l->key, pub))
		return;
	audit_hex(pub, sizeof(pub), hex);
	log_warn("audit: created the log %s; its heads are signed by key ed25519 %s: keep this "
		 "key where the log's writer cannot change it, then 'kosa8 audit verify --pubkey %s' "
		 "shows who signed", l->path, hex, hex);
}

int audit_log_open(const struct audit_opts *o, struct audit_log **out)
{
	struct audit_log *l = calloc(1, sizeof(*l));
	int err, n;

	if (!l)
		return -ENOMEM;
	l->fd = l->hfd = l->sfd = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	l->qtail = &l->qhead;
	l->head_every = o && o->head_every ? o->head_every : AUDIT_HEAD_EVERY_DEFAULT;
	l->head_ns = (o && o->head_secs ? o->head_secs : AUDIT_HEAD_SECS_DEFAULT) * 1000000000ULL;
	l->sync = !(o && o->no_sync);
	l->lazy_close = o && o->lazy_close;
	merkle_frontier_init(&l->tree);
	if (o && o->path) {
		n = snprintf(l->path, sizeof(l->path), "%s", o->path);
		err = n < 0 || (size_t)n >= sizeof(l->path) ? -ENAMETOOLONG : 0;
	} else {
		err = audit_default_path(l->path, sizeof(l->path));
	}
	if (!err)
		err = audit_heads_path(l->path, l->heads_path, sizeof(l->heads_path));
	if (!err)
		err = audit_key_load_or_create(o ? o->key_dir : NULL, &l->key);
	if (!err)
		l->mac_ok = audit_key_mac_key(l->key, l->mac_key) == 0;
	for (int tries = 0; !err && tries < 3; tries++) {
		err = open_files(l);
		if (!err)
			err = init_log(l);
		if (err != -ESTALE)
			break;
		close_files(l);
		err = tries < 2 ? 0 : -ESTALE;
	}
	if (err) {
		l->broken = true; /* nothing to sign on close */
		audit_log_close(l);
		return err;
	}
	if (l->created)
		announce_key(l);
	*out = l;
	return 0;
}

void audit_log_close(struct audit_log *l)
{
	if (!l)
		return;
	if (!l->broken && l->count > signed_size(l) &&
	    (l->lazy_close ? audit_log_tick(l) : audit_log_sign_head(l, NULL)))
		log_warn("audit: %s: could not sign the final head", l->path);
	close_files(l);
	free(l->archived);
	OPENSSL_cleanse(l->mac_key, sizeof(l->mac_key));
	EVP_PKEY_free(l->key);
	free(l->buf);
	free(l->fresh);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	free(l);
}

uint64_t audit_log_count(struct audit_log *l)
{
	uint64_t n;

	leader_enter(l); /* the count belongs to whoever does the I/O */
	n = l->count;
	leader_leave(l);
	return n;
}

const char *audit_log_path(const struct audit_log *l)
{
	return l->path;
}

int audit_log_public_key(struct audit_log *l, uint8_t pub[AUDIT_PUBKEY_LEN])
{
	return audit_key_public(l->key, pub);
}
