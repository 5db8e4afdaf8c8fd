#include "audit/prehash.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit/sha256.h"
#include "audit/sign.h"

#define MAX_THREADS 8
#define MIN_PARALLEL_BYTES (4u << 20)

/* Threads take the window's work as jobs from a shared counter: first the
 * signatures (the biggest jobs), then the records in chunks of 2^CHUNK_LOG
 * positions, each hashed up to its own subtree.  A helper that the
 * scheduler holds back (a busy machine) delays the window by one job at
 * most, not by a fixed share.  The levels above the chunks are few nodes,
 * left to the calling thread. */
#define CHUNK_LOG 6
#define CHUNK (1u << CHUNK_LOG)

enum { SIG_UNKNOWN, SIG_OK, SIG_BAD };

struct helper {
	struct prehash *ph;
	struct audit_head_checker *checker;
	pthread_t th;
	sem_t go, done;
};

struct prehash {
	unsigned threads;
	bool stop;
	/* the heads and what is known of their signatures */
	const struct audit_head *heads;
	size_t nheads, next_head;
	uint8_t *sig;
	struct audit_head_checker *checker; /* the calling thread's */
	/* the current window and its jobs */
	struct prehash_window w;
	size_t h0, nsig, nchunks;
	size_t claim; /* next job to take, shared (atomic builtins) */
	uint64_t off[PREHASH_WINDOW], seq[PREHASH_WINDOW];
	uint32_t len[PREHASH_WINDOW];
	merkle_hash *lv[PREHASH_WINDOW_LOG + 1]; /* = w.level, writable */
	merkle_hash tree[2 * PREHASH_WINDOW + PREHASH_WINDOW_LOG + 1];
	struct helper helpers[MAX_THREADS - 1];
};

/* CPUs nobody else is using, going by the load average (like make -l):
 * helpers on CPUs that other work keeps busy only add waiting. */
static long idle_cpus(long cpus)
{
	double load[1];

	if (getloadavg(load, 1) != 1)
		return cpus;
	return cpus - (long)(load[0] + 0.5);
}

unsigned prehash_threads(size_t len)
{
	const char *env = getenv("KOSA8_VERIFY_THREADS");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (env && *env)
		cpus = atol(env);
	else if (len < MIN_PARALLEL_BYTES)
		return 1;
	else
		cpus = idle_cpus(cpus);
	if (cpus < 1)
		return 1;
	return cpus > MAX_THREADS ? MAX_THREADS : (unsigned)cpus;
}

static merkle_hash *node(struct prehash *ph, unsigned k, uint64_t j)
{
	return &ph->lv[k][j - ph->w.lo[k]];
}

/* Nodes a .. b-1 of height k from their children, four or two at a time.  Siblings
 * lie side by side, so a node's input is 64 contiguous bytes. */
static void hash_level(struct prehash *ph, unsigned k, uint64_t a, uint64_t b)
{
	uint64_t j = a;

	for (; j + 3 < b; j += 4) {
		const uint8_t *in[4] = {*node(ph, k - 1, 2 * j), *node(ph, k - 1, 2 * j + 2),
					*node(ph, k - 1, 2 * j + 4), *node(ph, k - 1, 2 * j + 6)};
		const size_t len[4] = {2 * AUDIT_HASH_LEN, 2 * AUDIT_HASH_LEN, 2 * AUDIT_HASH_LEN,
				       2 * AUDIT_HASH_LEN};
		uint8_t *const out[4] = {*node(ph, k, j), *node(ph, k, j + 1), *node(ph, k, j + 2),
					 *node(ph, k, j + 3)};

		audit_sha256_pre4(0x01, in, len, out);
	}
	for (; j + 1 < b; j += 2)
		audit_sha256_pre2(0x01, *node(ph, k - 1, 2 * j), 2 * AUDIT_HASH_LEN,
				  *node(ph, k - 1, 2 * j + 2), 2 * AUDIT_HASH_LEN, *node(ph, k, j),
				  *node(ph, k, j + 1));
	if (j < b)
		audit_sha256_pre(0x01, *node(ph, k - 1, 2 * j), 2 * AUDIT_HASH_LEN, *node(ph, k, j));
}

static const uint8_t *rec(const struct prehash *ph, size_t i)
{
	return ph->w.bytes + (ph->off[i] - ph->w.base);
}

/* Positions lo .. hi-1 (global), inside one aligned block of CHUNK. */
static void hash_chunk(struct prehash *ph, uint64_t lo, uint64_t hi)
{
	merkle_hash *leaf = ph->lv[0];
	size_t i = (size_t)(lo - ph->w.first), end = (size_t)(hi - ph->w.first);

	for (; i + 3 < end; i += 4) {
		const uint8_t *in[4] = {rec(ph, i), rec(ph, i + 1), rec(ph, i + 2), rec(ph, i + 3)};
		const size_t len[4] = {ph->len[i], ph->len[i + 1], ph->len[i + 2], ph->len[i + 3]};
		uint8_t *const out[4] = {leaf[i], leaf[i + 1], leaf[i + 2], leaf[i + 3]};

		audit_sha256_pre4(0x00, in, len, out);
	}
	for (; i + 1 < end; i += 2)
		audit_sha256_pre2(0x00, rec(ph, i), ph->len[i], rec(ph, i + 1), ph->len[i + 1],
				  leaf[i], leaf[i + 1]);
	if (i < end)
		audit_sha256_pre(0x00, rec(ph, i), ph->len[i], leaf[i]);
	/* The nodes of height k whose leaves all lie in lo..hi-1. */
	for (unsigned k = 1; k <= CHUNK_LOG; k++)
		hash_level(ph, k, (lo + (1ULL << k) - 1) >> k, hi >> k);
}

static void do_job(struct prehash *ph, struct audit_head_checker *checker, size_t j)
{
	uint64_t end = ph->w.first + ph->w.n, lo, hi;

	if (j < ph->nsig) {
		j += ph->h0;
		ph->sig[j] = checker && !audit_head_check(checker, &ph->heads[j]) ? SIG_OK : SIG_BAD;
		return;
	}
	j -= ph->nsig;
	lo = ((ph->w.first >> CHUNK_LOG) + j) << CHUNK_LOG;
	hi = lo + CHUNK < end ? lo + CHUNK : end;
	hash_chunk(ph, lo > ph->w.first ? lo : ph->w.first, hi);
}

static void do_jobs(struct prehash *ph, struct audit_head_checker *checker)
{
	size_t j;

	while ((j = __atomic_fetch_add(&ph->claim, 1, __ATOMIC_RELAXED)) < ph->nsig + ph->nchunks)
		do_job(ph, checker, j);
}

static void *helper_main(void *arg)
{
	struct helper *hp = arg;

	for (;;) {
		while (sem_wait(&hp->go) < 0)
			;
		if (hp->ph->stop)
			return NULL;
		do_jobs(hp->ph, hp->checker);
		sem_post(&hp->done);
	}
}

int prehash_start(struct prehash **out, unsigned threads, const struct audit_head *heads,
		  size_t nheads, const uint8_t pub[AUDIT_PUBKEY_LEN])
{
	struct prehash *ph;
	unsigned i;

	*out = NULL;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return -ENOMEM;
	ph->heads = heads;
	ph->nheads = nheads;
	ph->sig = calloc(nheads ? nheads : 1, 1);
	/* Without a checker a head's signature counts as bad: the verdict
	 * must never be "valid" by accident of memory. */
	if (!ph->sig || audit_head_checker_new(pub, &ph->checker)) {
		free(ph->sig);
		free(ph);
		return -ENOMEM;
	}
	ph->threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
	for (i = 0; i + 1 < ph->threads; i++) {
		struct helper *hp = &ph->helpers[i];
		hp->ph = ph;
		sem_init(&hp->go, 0, 0);
		sem_init(&hp->done, 0, 0);
		if (audit_head_checker_new(pub, &hp->checker) ||
		    pthread_create(&hp->th, NULL, helper_main, hp)) {
			audit_head_checker_free(hp->checker);
			sem_destroy(&hp->go);
			sem_destroy(&hp->done);
			ph->threads = i + 1; /* run with the helpers that started */
			break;
		}
	}
	*out = ph;
	return 0;
}

void prehash_stop(struct prehash *ph)
{
	if (!ph)
		return;
	ph->stop = true;
	for (unsigned i = 0; i + 1 < ph->threads; i++) {
		sem_post(&ph->helpers[i].go);
		pthread_join(ph->helpers[i].th, NULL);
		sem_destroy(&ph->helpers[i].go);
		sem_destroy(&ph->helpers[i].done);
		audit_head_checker_free(ph->helpers[i].checker);
	}
	audit_head_checker_free(ph->checker);
	free(ph->sig);
	free(ph);
}

static size_t frame(struct prehash *ph, const uint8_t *bytes, size_t len, uint64_t base)
{
	struct audit_record r;
	size_t n = 0, at = 0;
	int k;

	while (n < PREHASH_WINDOW && at < len && (k = audit_record_parse(bytes + at, len - at, &r)) > 0) {
		ph->off[n] = base + at;
		ph->seq[n] = r.seq;
		ph->len[n] = r.len;
		at += (size_t)k;
		n++;
	}
	return n;
}

/* Where each level's nodes go: the tree array holds the levels one after
 * the other, each sized for the most a window can have. */
static void lay_out(struct prehash *ph)
{
	struct prehash_window *w = &ph->w;
	uint64_t end = w->first + w->n;
	size_t at = 0;

	for (unsigned k = 0; k <= PREHASH_WINDOW_LOG; k++) {
		w->lo[k] = (w->first + (1ULL << k) - 1) >> k;
		w->count[k] = end >> k > w->lo[k] ? (size_t)((end >> k) - w->lo[k]) : 0;
		ph->lv[k] = &ph->tree[at];
		w->level[k] = ph->lv[k];
		at += (PREHASH_WINDOW >> k) + 1;
	}
	w->leaf = w->level[0];
}

void prehash_fill(struct prehash *ph, const uint8_t *bytes, size_t len, uint64_t base,
		  uint64_t first, struct prehash_window *w)
{
	uint64_t end;

	ph->w.first = first;
	ph->w.bytes = bytes;
	ph->w.base = base;
	ph->w.n = frame(ph, bytes, len, base);
	ph->w.off = ph->off;
	ph->w.seq = ph->seq;
	ph->w.len = ph->len;
	lay_out(ph);
	end = first + ph->w.n;
	/* signatures of the heads that the checks of this window reach */
	ph->h0 = ph->next_head;
	while (ph->next_head < ph->nheads && ph->heads[ph->next_head].size < end)
		ph->next_head++;
	ph->nsig = ph->w.n ? ph->next_head - ph->h0 : 0;
	ph->nchunks = ph->w.n ? (size_t)(((end + CHUNK - 1) >> CHUNK_LOG) - (first >> CHUNK_LOG)) : 0;
	ph->claim = 0;
	/* sem_post/sem_wait order the window's data for the helpers and
	 * their results for us. */
	for (unsigned i = 0; i + 1 < ph->threads; i++)
		sem_post(&ph->helpers[i].go);
	do_jobs(ph, ph->checker);
	for (unsigned i = 0; i + 1 < ph->threads; i++)
		while (sem_wait(&ph->helpers[i].done) < 0)
			;
	for (unsigned k = CHUNK_LOG + 1; k <= PREHASH_WINDOW_LOG; k++)
		hash_level(ph, k, ph->w.lo[k], ph->w.lo[k] + ph->w.count[k]);
	*w = ph->w;
}

void prehash_extend(const struct prehash_window *w, size_t t, struct merkle_frontier *f)
{
	uint64_t s = f->size, end = w->first + t;
	unsigned k;

	/* [s, end) as the fewest aligned complete subtrees, left to right:
	 * each as large as both the alignment of s and the room left allow. */
	while (s < end) {
		k = s ? (unsigned)__builtin_ctzll(s) : PREHASH_WINDOW_LOG;
		if (k > PREHASH_WINDOW_LOG)
			k = PREHASH_WINDOW_LOG;
		while (s + (1ULL << k) > end)
			k--;
		merkle_frontier_add_subtree(f, k, w->level[k][(s >> k) - w->lo[k]]);
		s += 1ULL << k;
	}
}

int prehash_head_sig(struct prehash *ph, size_t i)
{
	if (ph->sig[i] == SIG_UNKNOWN)
		ph->sig[i] = audit_head_check(ph->checker, &ph->heads[i]) ? SIG_BAD : SIG_OK;
	return ph->sig[i] == SIG_OK ? 0 : -EBADMSG;
}
