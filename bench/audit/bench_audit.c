/* Audit log benchmark driver (bench/audit/run.sh builds and runs it).
 *
 *   bench_audit append DIR THREADS RECORDS sync|nosync [GROUP]
 *       RECORDS appends spread over THREADS threads of one process on one
 *       handle; prints "records/s".  sync: each append returns only after
 *       fdatasync (group commit batches the threads); nosync: no fdatasync.
 *       GROUP > 1: each thread hands GROUP events at a time to
 *       audit_log_append_many(), which returns once all are durable.
 *   bench_audit fsync DIR
 *       the disk's own latency for reference: 200 x (write 256 bytes at the
 *       end of a file + fdatasync); prints microseconds per round.
 *   bench_audit gen LOG MEGABYTES [EVERY]
 *       writes a log of about that size (no fsync), a signed head every
 *       EVERY records (default: the library's, AUDIT_HEAD_EVERY_DEFAULT).
 *   bench_audit parts LOG
 *       the CPU cost of one signed head's Ed25519 check (µs, over every head
 *       of LOG) and which SHA-256 rounds run ("sha-ni" or "openssl").
 *   bench_audit verify LOG ROUNDS
 *       reads LOG and its heads under the shared lock and verifies them, best
 *       of ROUNDS; prints MB/s of log bytes (heads included in the work),
 *       by the wall clock and per CPU-second (user + system, all threads).
 *       KOSA8_BENCH_SHA=openssl runs it on OpenSSL's SHA-256 instead of
 *       kosa8's own rounds (src/audit/sha256.c).
 *   bench_audit hash LEN COUNT
 *       CPU nanoseconds per SHA-256(0x00 || LEN bytes), COUNT messages, each
 *       way the verifier could hash: OpenSSL EVP one-shot (EVP_Digest),
 *       OpenSSL SHA256_Init/Update/Final, OpenSSL with the prefix's
 *       midstate copied (SHA256_CTX after Update(prefix), what a prehash
 *       could keep), and kosa8's rounds one, two and four at a time.
 *
 * Records look like what the supervisor writes for an exec: ~215 bytes. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPENSSL_SUPPRESS_DEPRECATED 1 /* SHA256_*: the midstate row */
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "audit/audit.h"
#include "audit/bundle.h"
#include "audit/sha256.h"
#include "audit/sign.h"
#include "audit/verify.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void event(char *det, size_t len, int t, long i)
{
	snprintf(det, len,
		 "{\"argv\":[\"git\",\"commit\",\"-m\",\"fix the parser (thread %d, step %ld)\"],"
		 "\"cwd\":\"/workspace/project\",\"pid\":%ld,\"exit\":0,\"ms\":%ld}",
		 t, i, 1000 + i, i % 977);
}

struct worker {
	struct audit_log *l;
	int id;
	long n;
	int group;
	int err;
};

#define MAX_GROUP 1024

static void *work(void *p)
{
	struct worker *w = p;
	static __thread char det[MAX_GROUP][256];
	static __thread struct audit_event ev[MAX_GROUP];

	for (long i = 0; i < w->n && !w->err; i += w->group) {
		for (int g = 0; g < w->group; g++) {
			event(det[g], sizeof(det[g]), w->id, i + g);
			ev[g] = (struct audit_event){"sb-7f3a2c", "agent", "exec", det[g]};
		}
		w->err = w->group == 1 ? audit_log_append(w->l, &ev[0], NULL)
				       : audit_log_append_many(w->l, ev, (size_t)w->group, NULL);
	}
	return NULL;
}

static int open_log(const char *path, bool sync, unsigned every, struct audit_log **l)
{
	struct audit_opts o = {.path = path, .no_sync = !sync, .head_every = every};
	int err = audit_log_open(&o, l);

	if (err)
		fprintf(stderr, "open %s: %s\n", path, audit_strerror(err));
	return err;
}

static int bench_append(const char *dir, int threads, long records, bool sync, int group)
{
	char path[4096];
	struct audit_log *l;
	pthread_t th[512];
	struct worker w[512];
	double t0, t1;
	int err = 0;

	if (threads < 1 || threads > 512 || group < 1 || group > MAX_GROUP)
		return 2;
	snprintf(path, sizeof(path), "%s/append-%d-%d-%s.log", dir, threads, group,
		 sync ? "sync" : "nosync");
	if (open_log(path, sync, 0, &l))
		return 1;
	t0 = now();
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){l, i, records / threads / group * group, group, 0};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		err |= w[i].err;
	}
	t1 = now();
	audit_log_close(l);
	if (err)
		return 1;
	printf("%.0f\n", (double)(records / threads / group * group * threads) / (t1 - t0));
	return 0;
}

static int fsync_latency(const char *dir)
{
	char path[4096], buf[256] = {0};
	double t0;
	int fd;

	snprintf(path, sizeof(path), "%s/fsync-probe", dir);
	fd = open(path, O_CREAT | O_WRONLY | O_APPEND | O_TRUNC, 0600);
	if (fd < 0)
		return 1;
	t0 = now();
	for (int i = 0; i < 200; i++)
		if (write(fd, buf, sizeof(buf)) != sizeof(buf) || fdatasync(fd))
			return 1;
	printf("%.0f\n", (now() - t0) / 200 * 1e6);
	close(fd);
	unlink(path);
	return 0;
}

static int gen(const char *path, long mb, unsigned every)
{
	struct audit_log *l;
	char det[256];
	struct audit_event ev = {"sb-7f3a2c", "agent", "exec", det};
	long target = mb * 1000000L;

	if (open_log(path, false, every, &l))
		return 1;
	for (long i = 0; i < target / 240 + 1; i++) {
		event(det, sizeof(det), 0, i);
		if (audit_log_append(l, &ev, NULL))
			return 1;
	}
	audit_log_close(l);
	return 0;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int verify(const char *path, int rounds)
{
	uint8_t pub[AUDIT_PUBKEY_LEN];
	char dir[4096], pubpath[4200];
	struct audit_snapshot s;
	struct audit_verify_result r;
	double best = 1e9, best_cpu = 1e9;
	size_t torn;

	if (audit_key_dir(dir, sizeof(dir)))
		return 1;
	snprintf(pubpath, sizeof(pubpath), "%s/%s", dir, AUDIT_PUB_FILE);
	if (audit_pubkey_load(pubpath, pub))
		return 1;
	for (int i = 0; i < rounds; i++) {
		double t0 = now(), c0 = cpu_seconds(), t1;
		/* what `kosa8 audit verify` runs: lock, size, one pass */
		if (audit_log_verify(path, 1UL << 36, pub, &r, &torn)) {
			fprintf(stderr, "verify failed: %s\n", r.what);
			return 1;
		}
		t1 = now();
		if (t1 - t0 < best)
			best = t1 - t0;
		if (cpu_seconds() - c0 < best_cpu)
			best_cpu = cpu_seconds() - c0;
		if (i == 0)
			fprintf(stderr, "log %llu bytes, %llu records (%.0f bytes each), %llu heads\n",
				(unsigned long long)r.bytes, (unsigned long long)r.records,
				(double)r.bytes / (double)r.records, (unsigned long long)r.heads);
	}
	audit_snapshot_read(path, 1UL << 36, &s);
	/* wall-clock MB/s, then MB per CPU-second (all threads together) */
	printf("%.0f %.0f\n", (double)s.log_len / best / 1e6, (double)s.log_len / best_cpu / 1e6);
	audit_snapshot_free(&s);
	return 0;
}

static int parts(const char *path)
{
	struct audit_snapshot s;
	struct audit_head *h;
	struct audit_head_checker *c;
	size_t bad;
	double c0;
	int n;

	if (audit_snapshot_read(path, 1UL << 36, &s))
		return 1;
	n = audit_heads_parse_all(s.heads, s.heads_len, &h, &bad);
	if (n <= 0 || audit_head_checker_new(h[0].pubkey, &c))
		return 1;
	c0 = cpu_seconds();
	for (int i = 0; i < n; i++)
		if (audit_head_check(c, &h[i]))
			return 1;
	printf("%.0f %s\n", (cpu_seconds() - c0) / n * 1e6, audit_sha256_impl());
	audit_head_checker_free(c);
	free(h);
	audit_snapshot_free(&s);
	return 0;
}

/* One way to hash COUNT messages of LEN bytes; CPU ns per message. */
enum hash_way { H_EVP, H_LOW, H_MID, H_OWN1, H_OWN2, H_OWN4, H_WAYS };

static double hash_way(enum hash_way way, const uint8_t *buf, size_t len, long count)
{
	uint8_t out[4][32], pre = 0;
	static volatile uint8_t sink;
	SHA256_CTX mid, c;
	double c0;

	SHA256_Init(&mid);
	SHA256_Update(&mid, &pre, 1);
	c0 = cpu_seconds();
	for (long i = 0; i < count;) {
		/* Each message differs in its first byte, as records do. */
		const uint8_t *d[4] = {buf + (i & 15), buf + ((i + 1) & 15), buf + ((i + 2) & 15),
				       buf + ((i + 3) & 15)};
		const size_t l[4] = {len, len, len, len};
		uint8_t *o[4] = {out[0], out[1], out[2], out[3]};
		switch (way) {
		case H_EVP: {
			uint8_t m[4096];
			m[0] = 0;
			memcpy(m + 1, d[0], len);
			EVP_Digest(m, len + 1, out[0], NULL, EVP_sha256(), NULL);
			i++;
			break;
		}
		case H_LOW:
			SHA256_Init(&c);
			SHA256_Update(&c, &pre, 1);
			SHA256_Update(&c, d[0], len);
			SHA256_Final(out[0], &c);
			i++;
			break;
		case H_MID:
			c = mid;
			SHA256_Update(&c, d[0], len);
			SHA256_Final(out[0], &c);
			i++;
			break;
		case H_OWN1:
			audit_sha256_pre(0x00, d[0], len, out[0]);
			i++;
			break;
		case H_OWN2:
			audit_sha256_pre2(0x00, d[0], len, d[1], len, out[0], out[1]);
			i += 2;
			break;
		case H_OWN4:
			audit_sha256_pre4(0x00, d, l, o);
			i += 4;
			break;
		default:
			i = count;
		}
		sink ^= out[0][0];
	}
	return (cpu_seconds() - c0) / (double)count * 1e9;
}

/* Every way, round after round (best of 3 each), so that a busy machine
 * slows them alike. */
static int hash_bench(size_t len, long count)
{
	static const char *const names[H_WAYS] = {"openssl EVP_Digest", "openssl SHA256_Init/Update/Final",
						 "openssl, prefix midstate copied", "kosa8 one at a time",
						 "kosa8 two at a time", "kosa8 four at a time"};
	double best[H_WAYS];
	uint8_t buf[4096 + 16];

	if (len > 4000 || count < 4)
		return 2;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	if (!audit_sha256_use_cpu(true))
		fprintf(stderr, "no SHA instructions: kosa8's rows are OpenSSL underneath\n");
	for (int round = 0; round < 3; round++)
		for (int w = 0; w < H_WAYS; w++) {
			double ns = hash_way((enum hash_way)w, buf, len, count);
			if (!round || ns < best[w])
				best[w] = ns;
		}
	printf("| way | bytes | CPU ns per message |\n|---|---:|---:|\n");
	for (int w = 0; w < H_WAYS; w++)
		printf("| %s | %zu | %.0f |\n", names[w], len, best[w]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "hash"))
		return hash_bench((size_t)atol(argv[2]), atol(argv[3]));
	if (getenv("KOSA8_BENCH_SHA") && !strcmp(getenv("KOSA8_BENCH_SHA"), "openssl"))
		audit_sha256_use_cpu(false);
	if ((argc == 6 || argc == 7) && !strcmp(argv[1], "append"))
		return bench_append(argv[2], atoi(argv[3]), atol(argv[4]), !strcmp(argv[5], "sync"),
				    argc == 7 ? atoi(argv[6]) : 1);
	if (argc == 3 && !strcmp(argv[1], "fsync"))
		return fsync_latency(argv[2]);
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "gen"))
		return gen(argv[2], atol(argv[3]), argc == 5 ? (unsigned)atol(argv[4]) : 0);
	if (argc == 3 && !strcmp(argv[1], "parts"))
		return parts(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "verify"))
		return verify(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: see the top of bench/audit/bench_audit.c\n");
	return 2;
}
