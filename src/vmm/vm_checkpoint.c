/* Pause, checkpoint and restore of a whole VM: vCPUs, in-kernel devices,
 * the VMM's devices, the disk chain and guest memory (snapshot.h for the
 * files, docs/snapshot-format.md for the format). */
#include "vmm/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sha256.h"
#include "common/util.h"
#include "disk/disk.h"
#include "vmm/snapshot_mem.h"

static uint64_t now_us(void) { return mono_ns() / 1000u; }

void vm_cpu_fingerprint(const struct cpuid_leaf *leaves, size_t n, uint8_t fp[SNAP_FP_LEN])
{
	struct sha256 c;

	sha256_init(&c);
	for (size_t i = 0; i < n; i++) {
		/* Little-endian words, so the hash does not depend on struct padding. */
		uint32_t w[7] = {leaves[i].function, leaves[i].index, leaves[i].flags,
				 leaves[i].eax, leaves[i].ebx, leaves[i].ecx, leaves[i].edx};
		uint8_t b[28];
		for (int j = 0; j < 7; j++)
			for (int k = 0; k < 4; k++)
				b[j * 4 + k] = (uint8_t)(w[j] >> (8 * k));
		sha256_update(&c, b, sizeof(b));
	}
	sha256_final(&c, fp);
}

/* ---- pause ---- */

static bool stopping(struct vm *vm)
{
	return __atomic_load_n(&vm->stop_reason, __ATOMIC_ACQUIRE) != VM_STOP_NONE;
}

int vm_pause(struct vm *vm)
{
	struct timespec deadline;

	if (vm->pause_depth++ > 0)
		return 0;
	pthread_mutex_lock(&vm->pause_lock);
	__atomic_store_n(&vm->pause_req, 1, __ATOMIC_RELEASE);
	while (vm->parked < vm->nrunning && !stopping(vm)) {
		/* Kicked again on every round: a vCPU between its check of
		 * pause_req and KVM_RUN gets the immediate exit, one inside
		 * KVM_RUN (halted guests too) the signal. */
		for (int i = 0; i < vm->cfg.ncpus; i++)
			if (vm->vcpus[i].started)
				accel_vcpu_kick(vm->vcpus[i].accel);
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_nsec += 50 * 1000 * 1000;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&vm->pause_cond, &vm->pause_lock, &deadline);
	}
	pthread_mutex_unlock(&vm->pause_lock);
	if (stopping(vm))
		return -ECANCELED;
	vm_devices_pause(vm);
	return 0;
}

void vm_resume(struct vm *vm)
{
	if (vm->pause_depth == 0 || --vm->pause_depth > 0)
		return;
	if (!stopping(vm))
		vm_devices_resume(vm);
	pthread_mutex_lock(&vm->pause_lock);
	__atomic_store_n(&vm->pause_req, 0, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&vm->pause_cond);
	pthread_mutex_unlock(&vm->pause_lock);
}

bool vm_paused(const struct vm *vm) { return vm->pause_depth > 0; }

/* ---- checkpoint ---- */

static int save_accel(struct snap_writer *w, uint32_t base, uint32_t index,
		      const struct accel_state *st)
{
	for (int i = 0; i < st->n; i++)
		snap_writer_add(w, base | st->recs[i].tag, index, st->recs[i].data, st->recs[i].len);
	return w->err;
}

static int save_cpus(struct vm *vm, struct snap_writer *w, const char **why)
{
	struct accel_state st;
	int err;

	for (int i = 0; i < vm->cfg.ncpus; i++) {
		if ((err = accel_vcpu_save(vm->vcpus[i].accel, &st))) {
			*why = "KVM would not give a vCPU's state";
			return err;
		}
		err = save_accel(w, SNAP_SEC_VCPU, (uint32_t)i, &st);
		accel_state_free(&st);
		if (err)
			return err;
	}
	if ((err = accel_vm_save(vm->accel, &st))) {
		*why = "KVM would not give the interrupt controllers', PIT's or clock's state";
		return err;
	}
	err = save_accel(w, SNAP_SEC_VM, 0, &st);
	accel_state_free(&st);
	return err;
}

/* Records the chain (absolute paths, bottom first) whose top is frozen into
 * the checkpoint, then freezes it and moves the VM onto new_top. */
static int save_disk(struct vm *vm, struct disk *d, struct snap_writer *w, const char *dir,
		     const char *new_top, char *msg, size_t msglen)
{
	char real[PATH_MAX], def_top[PATH_MAX], derr[DISK_ERR_LEN], *chain = NULL, *base;
	size_t len = 0, cap = 0;
	unsigned n = disk_layer_count(d);
	int err = 0;

	for (unsigned i = 0; i < n; i++) {
		size_t l;
		const char *lp = disk_layer_path(d, i);
		/* The layers' paths are absolute already when the VMM is jailed
		 * (it binds them at their own paths); realpath would need
		 * readlink, which its seccomp filter does not allow. */
		if (lp[0] == '/' && strlen(lp) < sizeof(real) && !strstr(lp, "/."))
			memcpy(real, lp, strlen(lp) + 1);
		else if (!realpath(lp, real)) {
			err = -errno;
			snprintf(msg, msglen, "disk layer %.200s: %s", disk_layer_path(d, i), strerror(errno));
			goto out;
		}
		l = strlen(real);
		if (len + l + 2 > cap) {
			char *nc = realloc(chain, cap = (len + l + 2) * 2);
			if (!nc) {
				err = -ENOMEM;
				goto out;
			}
			chain = nc;
		}
		memcpy(chain + len, real, l);
		len += l;
		chain[len++] = '\n';
	}
	if (!new_top) {
		/* Next to the old top, named after the checkpoint. */
		char tmp[PATH_MAX], tmp2[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s", real);
		snprintf(tmp2, sizeof(tmp2), "%s", dir);
		base = basename(tmp2);
		if (snprintf(def_top, sizeof(def_top), "%s/%s.k8d", dirname(tmp), base) >=
		    (int)sizeof(def_top)) {
			snprintf(msg, msglen, "the new disk delta's path would be too long");
			err = -ENAMETOOLONG;
			goto out;
		}
		new_top = def_top;
	}
	if (strlen(new_top) >= sizeof(vm->disk_top)) {
		snprintf(msg, msglen, "the new disk delta's path is too long");
		err = -ENAMETOOLONG;
		goto out;
	}
	snap_writer_add(w, SNAP_SEC_DISK, 0, chain, len);
	if ((err = disk_snapshot(d, new_top, derr, sizeof(derr)))) {
		snprintf(msg, msglen, "disk: %.400s", derr);
		goto out;
	}
	memcpy(vm->disk_top, new_top, strlen(new_top) + 1);
out:
	free(chain);
	return err;
}

/* ---- memory: whole, or a layer of what was written since ---- */

static void or_bits(uint64_t *dst, uint64_t at, const uint64_t *src, uint64_t n)
{
	for (uint64_t w = 0; w < (n + 63) / 64; w++)
		for (uint64_t x = src[w]; x; x &= x - 1) {
			uint64_t p = at + w * 64 + (uint64_t)__builtin_ctzll(x);
			dst[p / 64] |= 1ULL << (p % 64);
		}
}

/* The pages written since the interval began, into pages (one bit per page
 * of RAM): the VMM's own writes and KVM's log of the guest's, per memory
 * slot.  Both start a new interval. */
static int take_dirty(struct vm *vm, uint64_t *pages)
{
	struct guest_mem *m = &vm->mem;

	for (uint64_t i = 0; i < guest_mem_bitmap_words(m); i++)
		pages[i] = __atomic_exchange_n(&m->dirty[i], 0, __ATOMIC_RELAXED);
	for (int i = 0; i < m->nregions; i++) {
		const struct guest_region *r = &m->regions[i];
		uint64_t n = r->size / 4096, *log = calloc((n + 63) / 64, sizeof(uint64_t));
		int err = log ? accel_dirty_log(vm->accel, (uint32_t)i, log) : -ENOMEM;
		if (!err)
			or_bits(pages, (uint64_t)(r->host - m->base) / 4096, log, n);
		free(log);
		if (err)
			return err;
	}
	return 0;
}

/* After a failed checkpoint the pages taken count as written still. */
static void give_back_dirty(struct vm *vm, const uint64_t *pages)
{
	for (uint64_t i = 0; pages && i < guest_mem_bitmap_words(&vm->mem); i++)
		__atomic_fetch_or(&vm->mem.dirty[i], pages[i], __ATOMIC_RELAXED);
}

/* A name for this memory view, unique without a random source (the filter
 * keeps getrandom for vCPU threads): the clocks and a counter. */
static void new_mem_id(uint8_t id[SNAP_MEM_ID_LEN])
{
	static uint64_t counter;
	struct timespec rt, mono;

	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	put_le64(id, (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec);
	put_le64(id + 8, ((uint64_t)mono.tv_sec * 1000000000u + (uint64_t)mono.tv_nsec) ^
			       (++counter << 48) ^ ((uint64_t)getpid() << 32));
}

/* Whether a layer can stand on vm->mem_parent: it is a sibling of dir (a
 * layer names its parent by name only), still holds the memory it held,
 * and the stack is not at its height limit.  name gets its name. */
static bool parent_usable(struct vm *vm, const char *dir, char *name, size_t len)
{
	const char *a = strrchr(vm->mem_parent, '/'), *b = strrchr(dir, '/');
	struct snap_memory_desc md;
	struct snapshot s;
	uint8_t *buf;
	bool ok;

	if (!vm->mem_parent[0] || !a || !b || a - vm->mem_parent != b - dir ||
	    strncmp(vm->mem_parent, dir, (size_t)(a - vm->mem_parent)) ||
	    vm->mem_parent_depth >= SNAP_MAX_MEM_DEPTH || !snapshot_name_ok(a + 1) ||
	    strlen(a + 1) >= len)
		return false;
	if (snapshot_load(vm->mem_parent, &buf, &s, NULL, 0))
		return false; /* removed (checkpoint rm), or damaged: a full one then */
	ok = !snapshot_memory_desc(snapshot_find(&s, SNAP_SEC_MEMORY, 0), &md) &&
	     !memcmp(md.id, vm->mem_parent_id, SNAP_MEM_ID_LEN) && md.size == vm->mem.size;
	snapshot_free(&s);
	free(buf);
	snprintf(name, len, "%s", a + 1);
	return ok;
}

/* RAM that is a private view of a file (a template start, a restore, an
 * earlier live fork) has no memfd to freeze: its data is copied into a new
 * one, which RAM then is (guest_mem_adopt).  A copy in memory, not a file
 * the forks would wait for; the view's own copied pages are freed by the
 * remap.  The new memfd is charged to this VMM like a booted VM's RAM. */
static int unshare_memory(struct vm *vm, char *msg, size_t msglen)
{
	uint64_t bytes = 0, t0 = now_us();
	int fd = memfd_create("kosa8-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING), err = 0;

	if (fd < 0)
		err = -errno;
	else if (ftruncate(fd, (off_t)vm->mem.size) < 0)
		err = -errno;
	else if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		err = -errno;
	if (!err)
		err = snapshot_copy_private(fd, &vm->mem, &bytes);
	if (!err)
		err = guest_mem_adopt(&vm->mem, fd);
	if (err) {
		if (fd >= 0)
			close(fd);
		snprintf(msg, msglen, "cannot copy guest memory for a live fork: %s", strerror(-err));
		return err;
	}
	log_info("live fork: RAM was a private view; %llu bytes copied to a memfd in %.1f ms",
		 (unsigned long long)bytes, (double)(now_us() - t0) / 1000.0);
	return 0;
}

/* A live fork's memory: nothing is written now.  RAM's memfd is frozen as
 * it is (guest_mem_freeze) and becomes this checkpoint's full memory, which
 * the forks map by the fd and vm_checkpoint_live_finish writes to the file
 * afterwards.  The dirty interval starts here, as for any checkpoint. */
static int freeze_memory(struct vm *vm, struct snap_writer *w, struct snap_memory_desc *md,
			 uint64_t **pages, char *msg, size_t msglen)
{
	uint8_t mdb[SNAP_MEMORY_DESC_LEN];
	int sealed, err;

	if (vm->mem.memfd < 0 && (err = unshare_memory(vm, msg, msglen)))
		return err;
	if (vm->mem.dirty) {
		if (!(*pages = calloc(guest_mem_bitmap_words(&vm->mem), sizeof(uint64_t))))
			return -ENOMEM;
		/* Only the interval restarts here: this memory is full whatever
		 * the log says, so a failed log read changes nothing. */
		take_dirty(vm, *pages);
	}
	if ((sealed = guest_mem_freeze(&vm->mem)) < 0) {
		snprintf(msg, msglen, "cannot freeze guest memory: %s", strerror(-sealed));
		return sealed;
	}
	if (!sealed)
		log_warn("checkpoint: the kernel would not seal the frozen memory against writes");
	/* An upper bound: the file written later leaves out pages of zeros. */
	md->data_bytes = snapshot_memfd_data_bytes(vm->mem.file_fd, vm->mem.size);
	snap_memory_desc_encode(md, mdb);
	snap_writer_add(w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	return 0;
}

/* Writes the memory file into tmp and adds its sections.  *pages gets the
 * pages taken from the dirty log (NULL if none): the caller gives them
 * back if the checkpoint fails. */
static int save_memory(struct vm *vm, struct snap_writer *w, const char *tmp, const char *dir,
		       bool live, struct snap_memory_desc *md, uint64_t **pages, char *msg,
		       size_t msglen)
{
	uint8_t mdb[SNAP_MEMORY_DESC_LEN], psec[SNAP_MEM_ID_LEN + SNAP_MAX_PARENT_NAME];
	char path[PATH_MAX + 16], name[SNAP_MAX_PARENT_NAME + 1];
	bool layer = false;
	int err;

	*pages = NULL;
	new_mem_id(md->id);
	if (live)
		return freeze_memory(vm, w, md, pages, msg, msglen);
	if (vm->mem.dirty) {
		*pages = calloc(guest_mem_bitmap_words(&vm->mem), sizeof(uint64_t));
		if (!*pages)
			return -ENOMEM;
		if ((err = take_dirty(vm, *pages)))
			log_warn("checkpoint: KVM's dirty log failed (%s): writing all of memory",
				 strerror(-err));
		else
			layer = parent_usable(vm, dir, name, sizeof(name));
	}
	snprintf(path, sizeof(path), "%s/%s", tmp, SNAP_MEMORY_FILE);
	if (layer) {
		md->flags = SNAP_MEM_LAYER;
		md->depth = vm->mem_parent_depth + 1;
		err = snapshot_write_memory_layer(path, &vm->mem, *pages, &md->data_bytes);
	} else {
		err = snapshot_write_memory(path, &vm->mem, &md->data_bytes);
	}
	if (err) {
		snprintf(msg, msglen, "cannot write guest memory: %s", strerror(-err));
		return err;
	}
	snap_memory_desc_encode(md, mdb);
	snap_writer_add(w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	if (layer) {
		memcpy(psec, vm->mem_parent_id, SNAP_MEM_ID_LEN);
		memcpy(psec + SNAP_MEM_ID_LEN, name, strlen(name));
		snap_writer_add(w, SNAP_SEC_MEMORY_PARENT, 0, psec, SNAP_MEM_ID_LEN + strlen(name));
		snapshot_add_pages(w, *pages, vm->mem.size / 4096);
	}
	return 0;
}

static int write_checkpoint(struct vm *vm, const char *tmp, const char *dir, const char *new_top,
			    bool live, struct snap_memory_desc *md, uint64_t **pages, char *msg,
			    size_t msglen)
{
	struct snap_header h = {.version = SNAP_VERSION, .arch = SNAP_ARCH_HOST,
				.ncpus = (uint32_t)vm->cfg.ncpus,
				.mem_size = vm->mem.size};
	struct snap_writer w;
	char path[PATH_MAX + 16];
	const char *why = NULL;
	int err;

	memcpy(h.cpu_fp, vm->cpu_fp, SNAP_FP_LEN);
	snap_writer_init(&w, &h);
	if ((err = save_cpus(vm, &w, &why))) {
		snprintf(msg, msglen, "%s: %s", why ? why : "vCPU state", strerror(-err));
		goto out;
	}
	vm_devices_save(vm, &w);
	if (vm_disk(vm) && (err = save_disk(vm, vm_disk(vm), &w, dir, new_top, msg, msglen)))
		goto out;
	if ((err = save_memory(vm, &w, tmp, dir, live, md, pages, msg, msglen)))
		goto out;
	if ((err = snap_writer_finish(&w))) {
		snprintf(msg, msglen, "cannot build the state file: %s", strerror(-err));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/%s", tmp, SNAP_STATE_FILE);
	if ((err = snapshot_write_new_file(path, w.buf, w.len)) || (err = snapshot_fsync_dir(tmp)))
		snprintf(msg, msglen, "cannot write the state file: %s", strerror(-err));
out:
	snap_writer_free(&w);
	return err;
}

/* The next interval starts at this checkpoint (or at the restored one). */
static void set_mem_parent(struct vm *vm, const char *dir, const struct snap_memory_desc *md)
{
	if (strlen(dir) >= sizeof(vm->mem_parent)) {
		vm->mem_parent[0] = '\0';
		return;
	}
	memcpy(vm->mem_parent, dir, strlen(dir) + 1);
	memcpy(vm->mem_parent_id, md->id, SNAP_MEM_ID_LEN);
	vm->mem_parent_depth = md->depth;
}

static void remove_tmp(const char *tmp)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/%s", tmp, SNAP_MEMORY_FILE);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s", tmp, SNAP_STATE_FILE);
	unlink(path);
	rmdir(tmp);
}

/* The checkpoint is built in "<dir>.tmp-<pid>" and renamed to dir only when
 * complete and durable: a kill at any point leaves at most a temporary
 * directory, never a checkpoint that looks whole and is not.  (A live one
 * is renamed before its memory file exists: see vm_checkpoint_live.) */
static int take_checkpoint(struct vm *vm, const char *dir, const char *new_top, bool live,
			   struct vm_ckpt_info *info, char *msg, size_t msglen)
{
	char tmp[PATH_MAX], parent[PATH_MAX];
	uint64_t t0 = now_us(), t_paused, t_done, *pages = NULL;
	struct snap_memory_desc md = {.size = vm->mem.size, .page_size = 4096};
	struct stat st;
	int err;

	if (strlen(dir) + 32 >= sizeof(tmp) || strlen(dir) >= sizeof(vm->live_dir)) {
		snprintf(msg, msglen, "checkpoint path is too long");
		return -ENAMETOOLONG;
	}
	if (lstat(dir, &st) == 0) {
		snprintf(msg, msglen, "%.300s exists already; a checkpoint needs a new directory", dir);
		return -EEXIST;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", dir, (int)getpid());
	if (mkdir(tmp, 0750) < 0) {
		err = -errno;
		snprintf(msg, msglen, "cannot create %.300s: %s", tmp, strerror(errno));
		return err;
	}
	if ((err = vm_pause(vm))) {
		snprintf(msg, msglen, "the VM is stopping");
		vm_resume(vm);
		remove_tmp(tmp);
		return err;
	}
	t_paused = now_us();
	err = write_checkpoint(vm, tmp, dir, new_top, live, &md, &pages, msg, msglen);
	if (!err && (err = rename_noreplace(tmp, dir)))
		snprintf(msg, msglen, "cannot rename the checkpoint into place: %s", strerror(-err));
	if (err)
		give_back_dirty(vm, pages);
	else if (!live)
		set_mem_parent(vm, dir, &md);
	free(pages);
	vm_resume(vm);
	t_done = now_us();
	if (err) {
		remove_tmp(tmp);
		return err;
	}
	snprintf(parent, sizeof(parent), "%s", dir);
	snapshot_fsync_dir(dirname(parent));
	if (live) {
		memcpy(vm->live_dir, dir, strlen(dir) + 1);
		vm->live_md = md;
		vm->live_pending = true;
	}
	snprintf(msg, msglen,
		 "checkpoint %.300s memory_bytes=%llu memory=%s depth=%u paused_ms=%.1f total_ms=%.1f live=%d disk=%.300s",
		 dir, (unsigned long long)md.data_bytes, md.flags & SNAP_MEM_LAYER ? "layer" : "full",
		 md.depth, (double)(t_done - t_paused) / 1000.0, (double)(t_done - t0) / 1000.0,
		 (int)live, vm_disk(vm) ? vm->disk_top : "none");
	if (info)
		*info = (struct vm_ckpt_info){.memory_bytes = md.data_bytes,
					      .paused_ms = (double)(t_done - t_paused) / 1000.0,
					      .layer = md.flags & SNAP_MEM_LAYER, .live = live};
	return 0;
}

int vm_checkpoint(struct vm *vm, const char *dir, const char *new_top, struct vm_ckpt_info *info,
		  char *msg, size_t msglen)
{
	return take_checkpoint(vm, dir, new_top, false, info, msg, msglen);
}

int vm_checkpoint_live(struct vm *vm, const char *dir, const char *new_top, int *memfd,
		       struct vm_ckpt_info *info, char *msg, size_t msglen)
{
	int err;

	*memfd = -1;
	if (!(err = take_checkpoint(vm, dir, new_top, true, info, msg, msglen)))
		*memfd = vm->mem.file_fd;
	return err;
}

int vm_checkpoint_live_finish(struct vm *vm)
{
	char part[PATH_MAX + 16], path[PATH_MAX + 16];
	uint64_t t0 = now_us(), bytes = 0;
	int err;

	if (!vm->live_pending)
		return 0;
	vm->live_pending = false;
	snprintf(part, sizeof(part), "%s/%s.part", vm->live_dir, SNAP_MEMORY_FILE);
	snprintf(path, sizeof(path), "%s/%s", vm->live_dir, SNAP_MEMORY_FILE);
	err = snapshot_write_frozen(part, vm->mem.file_fd, vm->mem.size, &bytes);
	if (!err)
		err = rename_noreplace(part, path);
	if (!err)
		err = snapshot_fsync_dir(vm->live_dir);
	if (err) {
		unlink(part);
		log_err("checkpoint %s: cannot write its memory: %s (it cannot be restored from disk)",
			vm->live_dir, strerror(-err));
		return err;
	}
	/* Only now can a later checkpoint be a layer over this one. */
	set_mem_parent(vm, vm->live_dir, &vm->live_md);
	log_info("checkpoint %s: memory written after the fork, %llu bytes in %.1f ms", vm->live_dir,
		 (unsigned long long)bytes, (double)(now_us() - t0) / 1000.0);
	return 0;
}

/* ---- restore ---- */

static int restore_fail(struct vm *vm, const char **why, const char *what)
{
	snprintf(vm->err_buf, sizeof(vm->err_buf), "%s", what);
	*why = vm->err_buf;
	return -EINVAL;
}

/* A delta made beforehand for the restore (by the supervisor, so that the
 * jail can bind it) must sit directly on the checkpoint's frozen top and be
 * empty of anything else: the first layer below it is that top. */
static int check_restore_disk(const char *path, const char *frozen_top, char *derr, size_t len)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct disk *d = NULL;
	unsigned n;
	int err;

	if ((err = disk_open(&d, path, DISK_RDONLY, derr, len)))
		return err;
	n = disk_layer_count(d);
	if (n < 2 || !realpath(disk_layer_path(d, n - 2), a) || !realpath(frozen_top, b) ||
	    strcmp(a, b)) {
		snprintf(derr, len, "%.200s exists and is not a delta over the checkpoint's disk %.200s",
			 path, frozen_top);
		err = -EINVAL;
	}
	disk_close(d);
	return err;
}

/* A new writable delta at the path given for the disk, over the frozen top
 * recorded in the checkpoint, so that every restore has its own. */
static int restore_disk(struct vm *vm, const char **why)
{
	const struct snap_section *sec = snapshot_find(&vm->snap, SNAP_SEC_DISK, 0);
	const char *paths[DISK_MAX_LAYERS];
	char *storage, derr[DISK_ERR_LEN];
	int n, err;

	if (!sec && !vm->cfg.disk_path)
		return 0;
	if (!sec)
		return restore_fail(vm, why, "this checkpoint has no disk; leave out --disk");
	if (!vm->cfg.disk_path)
		return restore_fail(vm, why,
				    "this checkpoint has a disk: give --disk NEW.k8d (a new delta is created over the checkpoint's)");
	storage = malloc((size_t)sec->len + 1);
	if (!storage)
		return -ENOMEM;
	n = snapshot_disk_chain(sec, storage, (size_t)sec->len + 1, paths, DISK_MAX_LAYERS);
	if (n <= 0) {
		free(storage);
		return restore_fail(vm, why, "checkpoint's disk chain is malformed");
	}
	if (access(vm->cfg.disk_path, F_OK) == 0)
		err = check_restore_disk(vm->cfg.disk_path, paths[n - 1], derr, sizeof(derr));
	else
		err = disk_create(vm->cfg.disk_path, paths[n - 1], NULL, derr, sizeof(derr));
	free(storage);
	if (err) {
		snprintf(vm->err_buf, sizeof(vm->err_buf), "disk: %.400s", derr);
		*why = vm->err_buf;
		return err;
	}
	vm->cfg.disk_read_only = false;
	return 0;
}

/* A live fork's child: RAM is the parent's frozen memfd, mapped privately;
 * the checkpoint's memory must be the full one that memfd is. */
static int restore_memfd(struct vm *vm, const char **why)
{
	struct snap_memory_desc md;
	int rc;

	if (snapshot_memory_desc(snapshot_find(&vm->snap, SNAP_SEC_MEMORY, 0), &md) ||
	    (md.flags & SNAP_MEM_LAYER))
		return restore_fail(vm, why, "--restore-memfd needs a checkpoint with full memory (a live fork's)");
	if ((rc = guest_mem_open_fd(&vm->mem, vm->cfg.restore_memfd, md.size))) {
		snprintf(vm->err_buf, sizeof(vm->err_buf),
			 "cannot map the memory given by --restore-memfd (not a file of %llu bytes?): %s",
			 (unsigned long long)md.size, strerror(-rc));
		*why = vm->err_buf;
		return rc;
	}
	set_mem_parent(vm, vm->cfg.restore_dir, &md);
	return 0;
}

/* When this process began loading its checkpoint (one VM per process),
 * and where the restore's time went (one line on stderr: the console log
 * of a sandbox, for bench/templates). */
static uint64_t restore_t0;
static struct {
	uint64_t load, mem0, mem1, vcpus0, vcpus, devices;
} restore_marks;

int vm_restore_memory(struct vm *vm, const char **why)
{
	struct snapmem_chain c;
	int rc;

	restore_marks.mem0 = now_us();
	if (vm->cfg.has_restore_memfd) {
		rc = restore_memfd(vm, why);
		restore_marks.mem1 = now_us();
		return rc;
	}

	rc = snapmem_chain_load(vm->cfg.restore_dir, &c, vm->err_buf, sizeof(vm->err_buf));
	if (!rc)
		rc = snapmem_map(&vm->mem, &c, vm->err_buf, sizeof(vm->err_buf));
	if (!rc)
		set_mem_parent(vm, vm->cfg.restore_dir, &c.l[0].md);
	else
		*why = vm->err_buf;
	snapmem_chain_free(&c);
	restore_marks.mem1 = now_us();
	return rc;
}

int vm_restore_load(struct vm *vm, const char **why)
{
	char err[SNAP_ERR_LEN];
	int rc;

	restore_t0 = now_us();

	rc = snapshot_load(vm->cfg.restore_dir, &vm->snap_buf, &vm->snap, err, sizeof(err));
	restore_marks.load = now_us();
	if (!rc)
		rc = snapshot_check_arch(&vm->snap.h, err, sizeof(err));
	if (rc) {
		snprintf(vm->err_buf, sizeof(vm->err_buf), "%s", err);
		*why = vm->err_buf;
		return rc;
	}
	vm->cfg.mem_size = vm->snap.h.mem_size;
	vm->cfg.ncpus = (int)vm->snap.h.ncpus;
	if ((rc = vm_devices_check_restore(vm, &vm->snap, why)))
		return rc;
	return restore_disk(vm, why);
}

/* The sections of one vCPU (or of the VM) as an accelerator state set,
 * pointing into the checkpoint buffer. */
static void collect(const struct snapshot *s, uint32_t base, uint32_t index,
		    struct accel_state *st)
{
	memset(st, 0, sizeof(*st));
	for (uint32_t i = 0; i < s->nsections && st->n < ACCEL_MAX_RECS; i++) {
		const struct snap_section *sec = &s->secs[i];
		if ((sec->tag & 0xff00u) != base || sec->index != index)
			continue;
		st->recs[st->n++] = (struct accel_rec){
			.tag = sec->tag & 0xffu, .len = sec->len, .data = (uint8_t *)sec->data};
	}
}

int vm_restore_state(struct vm *vm, const char **why)
{
	struct accel_state st;
	const char *what = NULL;
	int err;

	if (memcmp(vm->cpu_fp, vm->snap.h.cpu_fp, SNAP_FP_LEN))
		return restore_fail(vm, why,
				    "checkpoint was taken on a CPU with other features (CPUID differs); it cannot run here");
	restore_marks.vcpus0 = now_us();
	for (int i = 0; i < vm->cfg.ncpus; i++) {
		collect(&vm->snap, SNAP_SEC_VCPU, (uint32_t)i, &st);
		if ((err = accel_vcpu_restore(vm->vcpus[i].accel, &st, &what))) {
			snprintf(vm->err_buf, sizeof(vm->err_buf),
				 "KVM refused vCPU %d's saved %s: %s", i, what ? what : "state", strerror(-err));
			*why = vm->err_buf;
			return err;
		}
	}
	restore_marks.vcpus = now_us();
	if ((err = vm_devices_restore(vm, &vm->snap, why)))
		return err;
	restore_marks.devices = now_us();
	collect(&vm->snap, SNAP_SEC_VM, 0, &st);
	if ((err = accel_vm_restore(vm->accel, &st, &what))) {
		snprintf(vm->err_buf, sizeof(vm->err_buf), "KVM refused the saved %s: %s",
			 what ? what : "VM state", strerror(-err));
		*why = vm->err_buf;
		return err;
	}
	/* The irqchip's restore set every line to its saved level; a device
	 * may have changed its own since (vsock's transport reset raises one
	 * from its thread). */
	vm_devices_resync_irqs(vm);
	free(vm->snap_buf);
	vm->snap_buf = NULL;
	snapshot_free(&vm->snap);
	log_info("restored %s: %d vCPUs, %llu MiB, in %.1f ms (state file read to vCPUs ready)",
		 vm->cfg.restore_dir, vm->cfg.ncpus, (unsigned long long)(vm->cfg.mem_size >> 20),
		 (double)(now_us() - restore_t0) / 1000.0);
	fprintf(stderr, "kosa8 vm: restore ms: state load %.1f, KVM and devices set up %.1f, memory "
		"map %.1f, vCPUs %.1f, device state %.1f, VM state %.1f, total %.1f\n",
		(double)(restore_marks.load - restore_t0) / 1000.0,
		(double)(restore_marks.mem0 - restore_marks.load) / 1000.0,
		(double)(restore_marks.mem1 - restore_marks.mem0) / 1000.0,
		(double)(restore_marks.vcpus - restore_marks.vcpus0) / 1000.0,
		(double)(restore_marks.devices - restore_marks.vcpus) / 1000.0,
		(double)(now_us() - restore_marks.devices) / 1000.0,
		(double)(now_us() - restore_t0) / 1000.0);
	return 0;
}
