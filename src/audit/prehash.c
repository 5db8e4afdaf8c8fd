#include "audit/prehash.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit/format.h"

/* Records per window: about 1 MB of typical records, which stays in the
 * caches between hashing and the in-order checks that follow. */
#define WINDOW 4096
#define MAX_THREADS 8
#define MIN_PARALLEL_BYTES (4u << 20)

struct helper {
	struct prehash *ph;
	pthread_t th;
	sem_t go, done;
};

/* Threads take the window in chunks from a shared counter, so a helper that
 * the scheduler holds back (a busy machine) delays the window by one chunk
 * at most, not by a fixed share. */
#define CHUNK 64

struct prehash {
	unsigned threads;
	bool stop;
	const uint8_t *log;
	uint64_t off[WINDOW];
	uint32_t len[WINDOW];
	merkle_hash h[WINDOW];
	size_t n, next;
	size_t claim; /* next chunk to take, shared (atomic builtins) */
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

static void hash_chunks(struct prehash *ph)
{
	size_t c, lo, hi;

	while ((c = __atomic_fetch_add(&ph->claim, 1, __ATOMIC_RELAXED)) * CHUNK < ph->n) {
		lo = c * CHUNK;
		hi = lo + CHUNK < ph->n ? lo + CHUNK : ph->n;
		for (size_t i = lo; i < hi; i++)
			merkle_leaf_hash(ph->log + ph->off[i], ph->len[i], ph->h[i]);
	}
}

static void *helper_main(void *arg)
{
	struct helper *hp = arg;

	for (;;) {
		while (sem_wait(&hp->go) < 0)
			;
		if (hp->ph->stop)
			return NULL;
		hash_chunks(hp->ph);
		sem_post(&hp->done);
	}
}

int prehash_start(struct prehash **out, unsigned threads)
{
	struct prehash *ph;
	unsigned i;

	*out = NULL;
	if (threads <= 1)
		return 0;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return -ENOMEM;
	ph->threads = threads > MAX_THREADS ? MAX_THREADS : threads;
	for (i = 0; i + 1 < ph->threads; i++) {
		struct helper *hp = &ph->helpers[i];
		hp->ph = ph;
		sem_init(&hp->go, 0, 0);
		sem_init(&hp->done, 0, 0);
		if (pthread_create(&hp->th, NULL, helper_main, hp)) {
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
	}
	free(ph);
}

/* Parses the next window's framing (whole, well-formed records only) and
 * hashes it, a share per thread. */
static void fill(struct prehash *ph, const uint8_t *log, size_t len, uint64_t off)
{
	struct audit_record r;
	size_t n = 0;
	int k;

	while (n < WINDOW && off < len && (k = audit_record_parse(log + off, len - off, &r)) > 0) {
		ph->off[n] = off;
		ph->len[n] = r.len;
		off += (uint64_t)k;
		n++;
	}
	ph->log = log;
	ph->n = n;
	ph->next = 0;
	ph->claim = 0;
	/* sem_post/sem_wait order the window's data for the helpers and
	 * their hashes for us. */
	for (unsigned i = 0; i + 1 < ph->threads; i++)
		sem_post(&ph->helpers[i].go);
	hash_chunks(ph);
	for (unsigned i = 0; i + 1 < ph->threads; i++)
		while (sem_wait(&ph->helpers[i].done) < 0)
			;
}

bool prehash_take(struct prehash *ph, const uint8_t *log, size_t len, uint64_t off,
		  merkle_hash out)
{
	if (!ph)
		return false;
	if (ph->next == ph->n || ph->log != log)
		fill(ph, log, len, off);
	if (ph->next < ph->n && ph->off[ph->next] == off) {
		memcpy(out, ph->h[ph->next++], AUDIT_HASH_LEN);
		return true;
	}
	return false;
}
