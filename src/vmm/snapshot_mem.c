/* Memory layers of checkpoints (snapshot_mem.h). */
#include "vmm/snapshot_mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define PAGE 4096u
#define COPY_CHUNK (1u << 20)

/* The directory that holds dir, and dir's own name. */
static void split_dir(const char *dir, char *parent, size_t plen, const char **name)
{
	const char *slash = strrchr(dir, '/');

	if (!slash) {
		snprintf(parent, plen, ".");
		*name = dir;
	} else {
		snprintf(parent, plen, "%.*s", slash == dir ? 1 : (int)(slash - dir), dir);
		*name = slash + 1;
	}
}

/* ---- reading a chain ---- */

/* One state file's memory description, and for a layer its parent and
 * page map. */
static int load_layer(const char *dir, struct snapmem_layer *l, uint8_t parent_id[SNAP_MEM_ID_LEN],
		      char *parent_name, char *err, size_t errlen)
{
	struct snapshot s;
	uint8_t *buf;
	int rc;

	if ((rc = snapshot_load(dir, &buf, &s, err, errlen)))
		return rc;
	snprintf(l->dir, sizeof(l->dir), "%s", dir);
	/* snapshot_parse checked the description and, for a layer, that its
	 * parent and page map are there and sound. */
	snapshot_memory_desc(snapshot_find(&s, SNAP_SEC_MEMORY, 0), &l->md);
	if (l->md.flags & SNAP_MEM_LAYER) {
		snapshot_memory_parent(&s, parent_id, parent_name);
		rc = snapshot_memory_pages(&s, &l->pages);
	}
	snapshot_free(&s);
	free(buf);
	return rc ? snap_fail(err, errlen, rc, "out of memory") : 0;
}

int snapmem_chain_load(const char *dir, struct snapmem_chain *c, char *err, size_t errlen)
{
	char cur[PATH_MAX], up[PATH_MAX], name[SNAP_MAX_PARENT_NAME + 1];
	uint8_t id[SNAP_MEM_ID_LEN] = {0}, want[SNAP_MEM_ID_LEN];
	const char *base;
	int rc;

	memset(c, 0, sizeof(*c));
	snprintf(cur, sizeof(cur), "%s", dir);
	for (;;) {
		struct snapmem_layer *l = &c->l[c->n];
		if (c->n > SNAP_MAX_MEM_DEPTH) {
			rc = snap_fail(err, errlen, -ELOOP, "checkpoint %.200s: memory layers nest deeper than %d",
				  dir, SNAP_MAX_MEM_DEPTH);
			break;
		}
		memcpy(want, id, sizeof(want)); /* what the layer above named */
		if ((rc = load_layer(cur, l, id, name, err, errlen)))
			break;
		c->n++;
		/* The parent must be the very memory the layer was taken over:
		 * the same id, the same size, and lower in the stack. */
		if (c->n > 1 && (memcmp(l->md.id, want, SNAP_MEM_ID_LEN) || l->md.size != c->l[0].md.size ||
				 l->md.depth >= c->l[c->n - 2].md.depth)) {
			rc = snap_fail(err, errlen, -ESTALE,
				  "checkpoint %.200s: the memory it stands on (%.200s) was replaced", dir, cur);
			break;
		}
		if (!(l->md.flags & SNAP_MEM_LAYER))
			return 0;
		split_dir(cur, up, sizeof(up), &base);
		if (snprintf(cur, sizeof(cur), "%s/%s", up, name) >= (int)sizeof(cur)) {
			rc = snap_fail(err, errlen, -ENAMETOOLONG, "checkpoint path is too long");
			break;
		}
		if (access(cur, F_OK) < 0) {
			rc = snap_fail(err, errlen, -ENOENT,
				  "checkpoint %.200s: the checkpoint its memory stands on (%.100s) is gone", dir,
				  name);
			break;
		}
	}
	snapmem_chain_free(c);
	return rc;
}

void snapmem_chain_free(struct snapmem_chain *c)
{
	for (int i = 0; i < c->n; i++)
		free(c->l[i].pages);
	memset(c, 0, sizeof(*c));
}

/* ---- mapping a chain ---- */

/* pread or pwrite of all len bytes (short transfers continue). */
static int pio_full(int fd, uint8_t *p, uint64_t len, uint64_t off, bool write)
{
	while (len) {
		ssize_t n = write ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/* A memory file of a checkpoint, checked to be RAM-sized. */
static int open_memory(const char *dir, uint64_t size, int flags)
{
	char path[PATH_MAX + 16];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/" SNAP_MEMORY_FILE, dir);
	if ((fd = open(path, flags | O_CLOEXEC)) < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* Mappings a restore makes for its layers, at most: each run of a layer's
 * pages is one (plus the split it makes), and the kernel allows a process
 * about 65,000 (vm.max_map_count).  A layer of more runs is read instead. */
#define MAX_LAYER_MAPS 8192

struct apply {
	int fd, rc;
	struct guest_mem *m;
	bool map;        /* map the runs (else read them) */
	uint64_t runs;
};

static void count_run(uint64_t first, uint64_t end, void *arg)
{
	((struct apply *)arg)->runs++;
}

/* Holes in the layer's file read as zeros: a page freed and zeroed since
 * the parent comes back as zeros, mapped or read. */
static void apply_run(uint64_t first, uint64_t end, void *arg)
{
	struct apply *a = arg;

	if (a->rc)
		return;
	if (a->map)
		a->rc = guest_mem_map_layer(a->m, a->fd, first, end);
	else
		a->rc = pio_full(a->fd, a->m->base + first * PAGE, (end - first) * PAGE, first * PAGE,
				 false);
}

/* One layer over the view: its runs mapped copy-on-write (the first map
 * hands the descriptor to m), or read when there are too many of them. */
static int apply_layer(struct guest_mem *m, const struct snapmem_layer *l, uint64_t *maps)
{
	struct apply a = {.fd = open_memory(l->dir, m->size, O_RDONLY), .m = m};
	int nlayers = m->nlayers;

	if (a.fd < 0)
		return a.fd;
	snapshot_page_runs(l->pages, m->size / PAGE, count_run, &a);
	a.map = *maps + a.runs <= MAX_LAYER_MAPS && m->nlayers < GUEST_MEM_MAX_LAYERS;
	if (a.map)
		*maps += a.runs;
	snapshot_page_runs(l->pages, m->size / PAGE, apply_run, &a);
	if (m->nlayers == nlayers)
		close(a.fd); /* not kept: read, or nothing mapped */
	return a.rc;
}

int snapmem_map(struct guest_mem *m, const struct snapmem_chain *c, char *err, size_t errlen)
{
	const struct snapmem_layer *bottom = &c->l[c->n - 1];
	char path[PATH_MAX + 16];
	uint64_t maps = 0;
	int rc;

	snprintf(path, sizeof(path), "%s/" SNAP_MEMORY_FILE, bottom->dir);
	if ((rc = guest_mem_open_file(m, path, bottom->md.size)))
		return snap_fail(err, errlen, rc,
			    "cannot map %.300s (missing, or not the size the checkpoint says): %s", path,
			    strerror(-rc));
	for (int i = c->n - 2; i >= 0; i--) {
		if ((rc = apply_layer(m, &c->l[i], &maps))) {
			guest_mem_destroy(m);
			return snap_fail(err, errlen, rc, "cannot read the memory layer in %.300s: %s",
				    c->l[i].dir, strerror(-rc));
		}
	}
	return 0;
}

/* ---- folding a checkpoint into the layers above it ---- */

struct fold {
	int from, to, rc;
	const uint64_t *has;        /* the child's own pages: never overwritten */
	uint8_t *buf;
	uint64_t copied;
};

static bool all_zero(const uint8_t *p, size_t n)
{
	return !p[0] && !memcmp(p, p + 1, n - 1);
}

/* Copies the parent's pages the child lacks, a chunk at a time.  Pages
 * that are zero stay holes (the child's file never held anything there). */
static void fold_copy(struct fold *f, uint64_t first, uint64_t end)
{
	for (uint64_t p = first; p < end && !f->rc;) {
		uint64_t n = end - p < COPY_CHUNK / PAGE ? end - p : COPY_CHUNK / PAGE;
		if ((f->rc = pio_full(f->from, f->buf, n * PAGE, p * PAGE, false)))
			return;
		for (uint64_t i = 0; i < n && !f->rc; i++) {
			uint8_t *pg = f->buf + i * PAGE;
			if (!all_zero(pg, PAGE) && !(f->rc = pio_full(f->to, pg, PAGE, (p + i) * PAGE, true)))
				f->copied += PAGE;
		}
		p += n;
	}
}

static void fold_run(uint64_t first, uint64_t end, void *arg)
{
	struct fold *f = arg;
	uint64_t p = first;

	while (p < end && !f->rc) {
		uint64_t q = p;
		bool has = f->has[p / 64] >> (p % 64) & 1;
		while (q < end && (bool)(f->has[q / 64] >> (q % 64) & 1) == has)
			q++;
		if (!has)
			fold_copy(f, p, q);
		p = q;
	}
}

/* The child's state file again with new memory sections, written beside it
 * and renamed over it: a crash leaves the old one or the new one. */
static int rewrite_state(const char *dir, const struct snapshot *s, const struct snap_memory_desc *md,
			 const uint8_t *parent_sec, size_t parent_len, const uint64_t *pages)
{
	char path[PATH_MAX + 16], tmp[PATH_MAX + 32];
	uint8_t mdb[SNAP_MEMORY_DESC_LEN];
	struct snap_header h = s->h;
	struct snap_writer w;
	int rc;

	h.version = SNAP_VERSION;
	snap_writer_init(&w, &h);
	for (uint32_t i = 0; i < s->nsections; i++) {
		const struct snap_section *sec = &s->secs[i];
		if (sec->tag != SNAP_SEC_MEMORY && sec->tag != SNAP_SEC_MEMORY_PARENT &&
		    sec->tag != SNAP_SEC_MEMORY_PAGES)
			snap_writer_add(&w, sec->tag, sec->index, sec->data, sec->len);
	}
	snap_memory_desc_encode(md, mdb);
	snap_writer_add(&w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	if (md->flags & SNAP_MEM_LAYER) {
		snap_writer_add(&w, SNAP_SEC_MEMORY_PARENT, 0, parent_sec, parent_len);
		snapshot_add_pages(&w, pages, md->size / PAGE);
	}
	snprintf(path, sizeof(path), "%s/" SNAP_STATE_FILE, dir);
	snprintf(tmp, sizeof(tmp), "%s.fold-%d", path, (int)getpid());
	unlink(tmp);
	if (!(rc = snap_writer_finish(&w)) && !(rc = snapshot_write_new_file(tmp, w.buf, w.len)) &&
	    rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		rc = snapshot_fsync_dir(dir);
	snap_writer_free(&w);
	return rc;
}

/* child stands on parent (already loaded as p): fold parent into it. */
static int detach(const char *child, const struct snapmem_layer *p, const struct snapshot *s,
		  const uint8_t *grand_sec, size_t grand_len, uint64_t *copied)
{
	struct snap_memory_desc md;
	uint64_t *pages = NULL, npages = p->md.size / PAGE;
	struct fold f = {.from = -1, .to = -1};
	int rc;

	snapshot_memory_desc(snapshot_find(s, SNAP_SEC_MEMORY, 0), &md);
	if ((rc = snapshot_memory_pages(s, &pages)))
		return rc;
	f.has = pages;
	if (!(f.buf = malloc(COPY_CHUNK))) {
		rc = -ENOMEM;
		goto out;
	}
	if ((f.from = open_memory(p->dir, md.size, O_RDONLY)) < 0 ||
	    (f.to = open_memory(child, md.size, O_WRONLY)) < 0) {
		rc = f.from < 0 ? f.from : f.to;
		goto out;
	}
	if (p->pages) {
		snapshot_page_runs(p->pages, npages, fold_run, &f);
	} else {
		fold_run(0, npages, &f); /* a full parent: every page the child lacks */
	}
	if ((rc = f.rc) || (fsync(f.to) < 0 && (rc = -errno)))
		goto out;
	*copied += f.copied;
	md.data_bytes += f.copied;
	if (md.data_bytes > md.size)
		md.data_bytes = md.size;
	if (p->pages) {
		for (uint64_t i = 0; i < (npages + 63) / 64; i++)
			pages[i] |= p->pages[i];
		md.depth = p->md.depth;
	} else {
		md.flags &= ~SNAP_MEM_LAYER;
		md.depth = 0;
	}
	rc = rewrite_state(child, s, &md, grand_sec, grand_len, pages);
out:
	if (f.from >= 0)
		close(f.from);
	if (f.to >= 0)
		close(f.to);
	free(f.buf);
	free(pages);
	return rc;
}

/* Whether the checkpoint in path is a layer over the memory with this id
 * in the directory named name. */
static bool stands_on(const struct snapshot *s, const char *name, const uint8_t *id)
{
	char pname[SNAP_MAX_PARENT_NAME + 1];
	uint8_t pid[SNAP_MEM_ID_LEN];

	return !snapshot_memory_parent(s, pid, pname) && !strcmp(pname, name) &&
	       !memcmp(pid, id, SNAP_MEM_ID_LEN);
}

int snapmem_detach_children(const char *dir, uint64_t *copied, char *err, size_t errlen)
{
	char up[PATH_MAX], child[PATH_MAX], pname[SNAP_MAX_PARENT_NAME + 1];
	uint8_t grand_sec[SNAP_MEM_ID_LEN + SNAP_MAX_PARENT_NAME];
	struct snapmem_layer p = {0};
	size_t grand_len = 0;
	const char *name;
	struct dirent *e;
	int rc = 0, n = 0;
	DIR *d;

	*copied = 0;
	/* A checkpoint whose state cannot be read was never a usable parent:
	 * layers over it could not load before its removal either. */
	if (load_layer(dir, &p, grand_sec, pname, NULL, 0))
		return 0;
	if (p.pages) {
		grand_len = SNAP_MEM_ID_LEN + strlen(pname);
		memcpy(grand_sec + SNAP_MEM_ID_LEN, pname, strlen(pname));
	}
	split_dir(dir, up, sizeof(up), &name);
	if (!(d = opendir(up))) {
		rc = snap_fail(err, errlen, -errno, "cannot list %.300s: %s", up, strerror(errno));
		goto out;
	}
	while (!rc && (e = readdir(d))) {
		struct snapshot s;
		uint8_t *buf;
		if (e->d_name[0] == '.' || !strcmp(e->d_name, name) ||
		    snprintf(child, sizeof(child), "%s/%s", up, e->d_name) >= (int)sizeof(child) ||
		    snapshot_load(child, &buf, &s, NULL, 0))
			continue; /* not a checkpoint (temporary directories included) */
		if (stands_on(&s, name, p.md.id)) {
			if ((rc = detach(child, &p, &s, grand_sec, grand_len, copied)))
				snap_fail(err, errlen, rc, "cannot fold %.200s into %.200s: %s", dir, child,
				     strerror(-rc));
			else
				n++;
		}
		snapshot_free(&s);
		free(buf);
	}
	closedir(d);
out:
	free(p.pages);
	return rc ? rc : n;
}
