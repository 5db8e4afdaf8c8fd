/* The I/O paths of a chain: reads fall through the layers, writes allocate
 * in the top, discards punch holes, flush orders data before map.
 *
 * Requests arrive as iovecs (guest memory in pieces, as virtio-blk hands
 * them over) and reach the kernel as preadv/pwritev of file-contiguous runs,
 * so a request costs one system call per run of clusters, not per piece. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "disk/disk.h"
#include "disk/format.h"
#include "disk/layer.h"

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Bytes of the disk cluster c covers (the last one may be short). */
static uint64_t cluster_len(const struct disk_layer *l, uint64_t c)
{
	return min_u64(disk_layer_csz(l), l->h.size - (c << l->h.cluster_bits));
}

/* ---- iovec cursor ---- */

struct iocur {
	const struct iovec *iov;
	int cnt;
	int i;       /* current element */
	size_t skip; /* bytes of iov[i] already consumed */
};

static void cur_norm(struct iocur *c)
{
	while (c->i < c->cnt && c->skip == c->iov[c->i].iov_len) {
		c->i++;
		c->skip = 0;
	}
}

/* Appends up to len bytes of the cursor to out[*n] (at most max pieces,
 * merging adjacent ones); returns the bytes taken. */
static size_t cur_take(struct iocur *c, size_t len, struct iovec *out, int *n, int max)
{
	size_t got = 0;

	for (cur_norm(c); got < len && c->i < c->cnt; cur_norm(c)) {
		uint8_t *p = (uint8_t *)c->iov[c->i].iov_base + c->skip;
		size_t k = c->iov[c->i].iov_len - c->skip;
		if (k > len - got)
			k = len - got;
		if (*n && (uint8_t *)out[*n - 1].iov_base + out[*n - 1].iov_len == p) {
			out[*n - 1].iov_len += k;
		} else if (*n < max) {
			out[(*n)++] = (struct iovec){p, k};
		} else {
			break;
		}
		c->skip += k;
		got += k;
	}
	return got;
}

/* How many pieces the next len bytes span (stops counting past max). */
static int cur_pieces(const struct iocur *c, size_t len, int max)
{
	struct iocur t = *c;
	int n = 0;

	for (cur_norm(&t); len && t.i < t.cnt && n <= max; cur_norm(&t)) {
		size_t k = t.iov[t.i].iov_len - t.skip;
		k = k < len ? k : len;
		t.skip += k;
		len -= k;
		n++;
	}
	return n;
}

static void cur_copy_out(struct iocur *c, uint8_t *dst, size_t len)
{
	for (cur_norm(c); len && c->i < c->cnt; cur_norm(c)) {
		size_t k = c->iov[c->i].iov_len - c->skip;
		k = k < len ? k : len;
		memcpy(dst, (uint8_t *)c->iov[c->i].iov_base + c->skip, k);
		c->skip += k;
		dst += k;
		len -= k;
	}
}

static void cur_zero(struct iocur *c, size_t len)
{
	for (cur_norm(c); len && c->i < c->cnt; cur_norm(c)) {
		size_t k = c->iov[c->i].iov_len - c->skip;
		k = k < len ? k : len;
		memset((uint8_t *)c->iov[c->i].iov_base + c->skip, 0, k);
		c->skip += k;
		len -= k;
	}
}

/* preadv/pwritev until done; short transfers advance the (copied) iovec. */
static int xfer_full(int fd, struct iovec *iov, int n, uint64_t off, bool write)
{
	while (n) {
		ssize_t k = write ? pwritev(fd, iov, n, (off_t)off) : preadv(fd, iov, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EIO; /* the file shrank under us */
		off += (uint64_t)k;
		while (n && (size_t)k >= iov->iov_len) {
			k -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (uint8_t *)iov->iov_base + k;
			iov->iov_len -= (size_t)k;
		}
	}
	return 0;
}

/* ---- reads ---- */

/* Reads len bytes at file offset foff of fd into the cursor.  The pieces
 * live on the caller's stack, not in the disk: reads run concurrently. */
static int read_file_into(int fd, struct iocur *c, uint64_t len, uint64_t foff)
{
	struct iovec iov[DISK_RUN_IOV];

	while (len) {
		int n = 0;
		size_t got = cur_take(c, len, iov, &n, DISK_RUN_IOV);
		int rc = xfer_full(fd, iov, n, foff, false);
		if (rc)
			return rc;
		if (!got)
			return -EINVAL; /* cannot happen: lengths were checked */
		len -= got;
		foff += got;
	}
	return 0;
}

/* How many bytes from off share one kind of entry in l (and, for present
 * clusters, sit back to back in the file): one preadv or memset for all. */
static uint64_t run_length(const struct disk_layer *l, uint64_t off, uint64_t len, uint64_t *ent)
{
	uint64_t csz = disk_layer_csz(l), c = off >> l->h.cluster_bits;
	uint64_t e = disk_layer_get(l, c), run = min_u64(len, csz - (off & (csz - 1)));
	uint64_t next = DISK_ENT_IS_PRESENT(e) ? e + csz : e;

	while (run < len && disk_layer_get(l, ++c) == next) {
		run += min_u64(len - run, csz);
		if (DISK_ENT_IS_PRESENT(e))
			next += csz;
	}
	*ent = e;
	return run;
}

static int raw_read(const struct disk_layer *l, struct iocur *c, uint64_t len,
		    uint64_t off)
{
	uint64_t have = off < l->file_size ? min_u64(len, l->file_size - off) : 0;
	int rc = have ? read_file_into(l->fd, c, have, off) : 0;

	cur_zero(c, len - have); /* a base shorter than the disk reads as zeros */
	return rc;
}

/* Reads [off, off+len) as layer lvl and those below it see it. */
static int layer_read(struct disk *d, int lvl, struct iocur *c, uint64_t len, uint64_t off)
{
	const struct disk_layer *l;
	uint64_t tail = 0;
	int rc = 0;

	if (lvl < 0) {
		cur_zero(c, len);
		return 0;
	}
	l = d->layers[lvl];
	if (l->raw)
		return raw_read(l, c, len, off);
	if (off >= l->h.size) { /* a lower layer may be smaller than the disk */
		cur_zero(c, len);
		return 0;
	}
	if (len > l->h.size - off) {
		tail = len - (l->h.size - off);
		len = l->h.size - off;
	}
	while (len && !rc) {
		uint64_t e, run = run_length(l, off, len, &e);
		if (DISK_ENT_IS_PRESENT(e))
			rc = read_file_into(l->fd, c, run,
					    DISK_ENT_OFFSET(e) + (off & (disk_layer_csz(l) - 1)));
		else if (e == DISK_ENT_ZERO)
			cur_zero(c, run);
		else
			rc = layer_read(d, lvl - 1, c, run, off);
		off += run;
		len -= run;
	}
	cur_zero(c, tail);
	return rc;
}

/* ---- request checks ---- */

static int check_range(const struct disk *d, uint64_t len, uint64_t off)
{
	uint64_t size = disk_top(d)->h.size; /* not disk_size: io.c calls nothing of disk.c */

	return off > size || len > size - off ? -ERANGE : 0;
}

static int iov_len(const struct iovec *iov, int cnt, uint64_t *len)
{
	*len = 0;
	if (cnt < 0 || cnt > IOV_MAX || (cnt && !iov))
		return -EINVAL;
	for (int i = 0; i < cnt; i++) {
		if ((!iov[i].iov_base && iov[i].iov_len) || iov[i].iov_len > UINT64_MAX - *len)
			return -EINVAL;
		*len += iov[i].iov_len;
	}
	return 0;
}

static int check_writable(const struct disk *d)
{
	if (!d->writable)
		return -EROFS;
	return d->broken ? -EIO : 0;
}

int disk_readv(struct disk *d, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct iocur c = {iov, iovcnt, 0, 0};
	uint64_t len;
	int rc = d ? iov_len(iov, iovcnt, &len) : -EINVAL;

	if (!rc)
		rc = check_range(d, len, off);
	return rc ? rc : layer_read(d, (int)d->n - 1, &c, len, off);
}

int disk_read(struct disk *d, void *buf, size_t len, uint64_t off)
{
	struct iovec v = {buf, len};

	return disk_readv(d, &v, 1, off);
}

/* ---- writes ---- */

/* A write run: file-contiguous bytes waiting for one pwritev, and the new
 * mappings that enter the map only if it succeeds. */
static int run_flush(struct disk *d)
{
	struct disk_run *r = &d->run;
	struct disk_layer *top = disk_top(d);
	int rc;

	if (!r->len)
		return 0;
	rc = xfer_full(top->fd, r->iov, r->niov, r->foff, true);
	d->st.data_writes++;
	d->st.data_bytes += r->len;
	d->unsynced = true;
	for (unsigned i = r->nmap; i-- > 0;) {
		/* Cannot fail: the map sector was made ready in write_cluster(). */
		if (rc)
			disk_layer_release(top, r->off[i], true);
		else
			disk_layer_set(top, r->cluster[i], r->off[i] | DISK_ENT_PRESENT);
	}
	r->len = 0;
	r->niov = 0;
	r->nmap = 0;
	return rc;
}

/* Makes sure setting cluster c later cannot fail for lack of memory. */
static int map_ready(struct disk_layer *l, uint64_t c)
{
	return disk_layer_set(l, c, disk_layer_get(l, c));
}

/* Writes d->bounce as the whole new top cluster c at file offset foff. */
static int write_bounce(struct disk *d, uint64_t c, uint64_t foff)
{
	struct disk_layer *top = disk_top(d);
	uint64_t csz = disk_layer_csz(top);
	int rc = disk_pwrite_full(top->fd, d->bounce, csz, foff);

	d->st.data_writes++;
	d->st.data_bytes += csz;
	d->unsynced = true;
	if (rc) {
		disk_layer_release(top, foff, true);
		return rc;
	}
	return disk_layer_set(top, c, foff | DISK_ENT_PRESENT);
}

/* Adds len bytes from the cursor, to land at file offset foff, to the run.
 * A request has at most IOV_MAX pieces, so they always fit an empty run. */
static int run_add(struct disk *d, struct iocur *src, uint64_t foff, uint64_t len, bool map,
		   uint64_t c)
{
	struct disk_run *r = &d->run;
	int need = cur_pieces(src, len, DISK_RUN_IOV), rc = 0;

	if (!r->len || r->foff + r->len != foff || r->niov + need > DISK_RUN_IOV ||
	    r->nmap == DISK_RUN_MAP) {
		rc = run_flush(d);
		if (rc)
			return rc;
		r->foff = foff;
	}
	cur_take(src, len, r->iov, &r->niov, DISK_RUN_IOV);
	r->len += len;
	if (map) {
		r->cluster[r->nmap] = c;
		r->off[r->nmap++] = foff;
	}
	return 0;
}

/* A write that covers part of a cluster the top does not hold: the rest of
 * the cluster comes from below (or is zero), then the whole cluster goes to
 * a fresh place in the top. */
static int copy_up(struct disk *d, struct iocur *src, uint64_t c, uint64_t e, uint64_t in,
		   uint64_t chunk)
{
	struct disk_layer *top = disk_top(d);
	uint64_t csz = disk_layer_csz(top), clen = cluster_len(top, c), off;
	struct iovec v = {d->bounce, clen};
	struct iocur below = {&v, 1, 0, 0};
	int rc;

	memset(d->bounce, 0, csz);
	if (e != DISK_ENT_ZERO) {
		rc = layer_read(d, (int)d->n - 2, &below, clen, c << top->h.cluster_bits);
		if (rc)
			return rc;
		d->st.copy_ups++;
	}
	cur_copy_out(src, d->bounce + in, chunk);
	rc = map_ready(top, c);
	if (!rc)
		rc = disk_layer_alloc(top, &off);
	if (rc)
		return rc;
	d->st.clusters_alloc++;
	return write_bounce(d, c, off);
}

static int write_cluster(struct disk *d, struct iocur *src, uint64_t off, uint64_t chunk)
{
	struct disk_layer *top = disk_top(d);
	uint64_t c = off >> top->h.cluster_bits, in = off & (disk_layer_csz(top) - 1);
	uint64_t e = disk_layer_get(top, c), noff;
	int rc;

	if (DISK_ENT_IS_PRESENT(e))
		return run_add(d, src, DISK_ENT_OFFSET(e) + in, chunk, false, c);
	if (in || chunk != disk_layer_csz(top)) { /* includes a short last cluster */
		rc = run_flush(d);
		return rc ? rc : copy_up(d, src, c, e, in, chunk);
	}
	rc = map_ready(top, c);
	if (!rc)
		rc = disk_layer_alloc(top, &noff);
	if (rc)
		return rc;
	d->st.clusters_alloc++;
	rc = run_add(d, src, noff, chunk, true, c);
	if (rc)
		disk_layer_release(top, noff, true);
	return rc;
}

static int write_range(struct disk *d, struct iocur *src, uint64_t len, uint64_t off)
{
	struct disk_layer *top = disk_top(d);
	int rc = 0, rc2;

	while (len && !rc) {
		uint64_t c = off >> top->h.cluster_bits;
		uint64_t chunk = min_u64(len, cluster_len(top, c) - (off & (disk_layer_csz(top) - 1)));
		rc = write_cluster(d, src, off, chunk);
		off += chunk;
		len -= chunk;
	}
	rc2 = run_flush(d);
	return rc ? rc : rc2;
}

int disk_writev(struct disk *d, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct iocur c = {iov, iovcnt, 0, 0};
	uint64_t len;
	int rc = d ? iov_len(iov, iovcnt, &len) : -EINVAL;

	if (!rc)
		rc = check_range(d, len, off);
	if (!rc)
		rc = check_writable(d);
	return rc ? rc : write_range(d, &c, len, off);
}

int disk_write(struct disk *d, const void *buf, size_t len, uint64_t off)
{
	struct iovec v = {(void *)buf, len};

	return disk_writev(d, &v, 1, off);
}

/* ---- discard ---- */

static int discard_cluster(struct disk *d, uint64_t c)
{
	struct disk_layer *top = disk_top(d);
	bool nothing_below = d->n == 1 && top->h.parent_kind == DISK_PARENT_NONE;
	uint64_t e = disk_layer_get(top, c), want = nothing_below ? DISK_ENT_ABSENT : DISK_ENT_ZERO;
	int rc;

	if (e == want)
		return 0;
	rc = map_ready(top, c);
	if (rc)
		return rc;
	if (DISK_ENT_IS_PRESENT(e)) {
		/* The map may still name this cluster after a crash: it then
		 * reads as the zeros the discard asked for.  It is reused only
		 * once a flush has made the new entry durable. */
		if (fallocate(top->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)DISK_ENT_OFFSET(e), (off_t)disk_layer_csz(top)) == 0)
			d->st.punches++;
		else if (errno != EOPNOTSUPP)
			return -errno;
		d->unsynced = true;
		rc = disk_layer_release(top, DISK_ENT_OFFSET(e), false);
		if (rc)
			return rc;
	}
	return disk_layer_set(top, c, want);
}

int disk_discard(struct disk *d, uint64_t off, uint64_t len)
{
	struct disk_layer *top;
	int rc = d ? check_range(d, len, off) : -EINVAL;

	if (!rc)
		rc = check_writable(d);
	if (rc)
		return rc;
	top = disk_top(d);
	while (len && !rc) {
		uint64_t c = off >> top->h.cluster_bits, clen = cluster_len(top, c);
		uint64_t in = off & (disk_layer_csz(top) - 1), chunk = min_u64(len, clen - in);
		struct iovec v = {d->zeros, chunk};
		struct iocur z = {&v, 1, 0, 0};
		if (!in && chunk == clen)
			rc = discard_cluster(d, c);
		else
			rc = write_range(d, &z, chunk, off);
		off += chunk;
		len -= chunk;
	}
	return rc;
}

/* ---- flush ---- */

static int sync_fd(struct disk *d, int fd)
{
	d->st.syncs++;
	return fdatasync(fd) < 0 ? -errno : 0;
}

/* Data first, then the map that points at it: after a crash the map never
 * names a cluster whose contents did not reach the disk. */
int disk_flush(struct disk *d)
{
	struct disk_layer *top;
	int rc;

	if (!d)
		return -EINVAL;
	if (!d->writable)
		return 0;
	if (d->broken)
		return -EIO;
	top = disk_top(d);
	if (!d->unsynced && !top->dirty.n)
		return 0;
	rc = sync_fd(d, top->fd);
	if (!rc && top->dirty.n) {
		rc = disk_layer_write_map(top, &d->st);
		if (!rc)
			rc = sync_fd(d, top->fd);
	}
	if (!rc)
		rc = disk_layer_commit_frees(top);
	if (rc) {
		/* After a failed fsync Linux may have dropped the dirty pages
		 * and would report the next fsync as a success: stop here. */
		d->broken = true;
		log_err("disk %s: flush failed (%s); refusing further writes", top->path, strerror(-rc));
		return rc;
	}
	d->unsynced = false;
	return 0;
}
