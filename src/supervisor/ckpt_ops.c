/* What the supervisor does on disk for checkpoint, rewind and checkpoint rm
 * (checkpoints.h for the layout).  The VMM itself writes the checkpoint,
 * inside its jail; these functions name the files, keep the records and
 * reclaim space.  Stopping and starting the VMM is the supervisor's. */
#include "supervisor/ckpt_ops.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "disk/disk.h"
#include "sandbox/sandbox.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_mem.h"
#include "vmm/vm_control.h"

/* state_dir/checkpoints/dN.k8d: the delta written after checkpoint or
 * rewind N. */
static int delta_path(char *buf, size_t len, const char *dir, unsigned n)
{
	return snprintf(buf, len, "%s/" CKPT_DIR "/d%u.k8d", dir, n) >= (int)len ? -ENAMETOOLONG : 0;
}

int ckpt_dir_of(char *buf, size_t len, const char *state_dir, const char *id)
{
	return snprintf(buf, len, "%s/" CKPT_DIR "/%s", state_dir, id) >= (int)len ? -ENAMETOOLONG : 0;
}

/* current.json, or what it is before the first checkpoint: the sandbox's
 * own delta, over its image. */
int ckpt_current(const char *state_dir, struct ckpt_meta *cur, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int rc = ckpt_meta_load(state_dir, CKPT_CURRENT, cur, err, errlen);

	if (rc != -ENOENT)
		return rc;
	memset(cur, 0, sizeof(*cur));
	snprintf(cur->id, sizeof(cur->id), CKPT_CURRENT);
	snprintf(path, sizeof(path), "%s/disk.k8d", state_dir);
	if (!realpath(path, cur->top))
		snprintf(cur->top, sizeof(cur->top), "%s", path);
	cur->next = 1;
	return 0;
}

/* The disk chain a checkpoint's state file names, checked whole on the way
 * (a damaged checkpoint is refused here with the loader's one line). */
static int chain_of(const char *state_dir, const char *id, struct ckpt_meta *into, char *err,
		    size_t errlen)
{
	char dir[PATH_MAX], *storage = NULL;
	const char *paths[CKPT_MAX_CHAIN];
	const struct snap_section *sec;
	struct snapshot s = {0};
	uint8_t *buf = NULL;
	int n, rc;

	if ((rc = ckpt_dir_of(dir, sizeof(dir), state_dir, id)))
		return rc;
	if ((rc = snapshot_load(dir, &buf, &s, err, errlen)))
		return rc;
	rc = -EBADMSG;
	sec = snapshot_find(&s, SNAP_SEC_DISK, 0);
	if (sec && (storage = malloc((size_t)sec->len + 1)) &&
	    (n = snapshot_disk_chain(sec, storage, (size_t)sec->len + 1, paths, CKPT_MAX_CHAIN)) > 0) {
		rc = 0;
		for (int i = 0; i < n && !rc; i++)
			rc = ckpt_meta_chain_add(into, paths[i]);
	} else {
		snprintf(err, errlen, "checkpoint %s has no disk chain", id);
	}
	free(storage);
	snapshot_free(&s);
	free(buf);
	return rc;
}

/* A new empty delta at path over checkpoint id's frozen disk; the
 * checkpoint is read whole (checksums) first, so a damaged one is refused
 * before anything is created.  Rewind and fork both start from this. */
static int delta_on_checkpoint(const char *state_dir, const char *id, const char *path,
			       char *err, size_t errlen)
{
	struct ckpt_meta c = {0};
	char derr[DISK_ERR_LEN];
	int rc = chain_of(state_dir, id, &c, err, errlen);

	if (!rc && (rc = disk_create(path, c.chain[c.nchain - 1], NULL, derr, sizeof(derr))))
		snprintf(err, errlen, "disk: %.400s", derr);
	ckpt_meta_free(&c);
	return rc;
}

/* A live fork's memory as the VMM passed it, checked and turned into a
 * read-only descriptor: RAM-sized, and sealed so that no process (the
 * parent's VMM included) can change what the forks see.  Anything else is
 * refused; the caller then waits for the memory file instead. */
static int frozen_memory_fd(int fd, uint64_t size)
{
	char proc[40];
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS), ro;
	const int need = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size ||
	    seals < 0 || (seals & need) != need)
		return -EINVAL;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ro = open(proc, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

/* The size a checkpoint's memory is, from its state file (0 if unknown). */
static uint64_t memory_size(const char *dir)
{
	struct snapshot sn;
	uint8_t *buf;
	uint64_t n;

	if (snapshot_load(dir, &buf, &sn, NULL, 0))
		return 0;
	n = sn.h.mem_size;
	snapshot_free(&sn);
	free(buf);
	return n;
}

/* The VMM's answer to checkpoint-live carried fd: keep a read-only copy in
 * *memfd, or else wait until the VMM has written the memory file (its next
 * answer comes only after that). */
static void take_frozen(const char *vm_ctl, const char *dir, int fd, int *memfd)
{
	static const struct vm_control_req status = {.op = VMCTL_STATUS};
	struct vm_control_reply rep;

	*memfd = fd >= 0 ? frozen_memory_fd(fd, memory_size(dir)) : -1;
	if (fd >= 0 && *memfd < 0)
		log_warn("checkpoint: the VMM's frozen memory is not a sealed RAM-sized file (%s): "
			 "the fork waits for the memory file", strerror(-*memfd));
	if (fd >= 0)
		close(fd);
	if (*memfd < 0) {
		*memfd = -1;
		vm_control_call(vm_ctl, &status, &rep, NULL, CKPT_VMM_TIMEOUT_MS);
	}
}

static void drop_unlisted(const char *state_dir, const char *id);

/* A checkpoint failed after the VMM may have moved its disk onto the new
 * delta (its memory or state file could not be written, or its record
 * here): the disk goes on there, recorded as after an interrupted one
 * (ckpt_recover_top), so that the next checkpoint and a restart find what
 * they expect; the checkpoint's own files, unlisted, go. */
static void settle_failed(const char *state_dir, const char *id)
{
	char err[600] = "";
	int rc = ckpt_recover_top(state_dir, err, sizeof(err));

	if (rc < 0)
		log_err("after the failed checkpoint: %s", err);
	else if (rc)
		log_info("after the failed checkpoint: the disk goes on in a new delta over the "
			 "frozen one (nothing lost)");
	drop_unlisted(state_dir, id);
}

int ckpt_take(const char *state_dir, const char *vm_ctl, const char *message,
	      struct ckpt_meta *out, int *memfd, char *err, size_t errlen)
{
	struct vm_control_req *req = NULL; /* 8 KiB of paths: not on a thread's stack */
	struct vm_control_reply rep;
	int passed = -1;
	char dir[PATH_MAX], top[PATH_MAX];
	struct ckpt_meta cur;
	bool answered = false;
	int rc;

	memset(out, 0, sizeof(*out));
	if (memfd)
		*memfd = -1;
	if ((rc = ckpt_current(state_dir, &cur, err, errlen)))
		return rc;
	snprintf(out->id, sizeof(out->id), "c%u", cur.next);
	if ((rc = ckpt_dir_of(dir, sizeof(dir), state_dir, out->id)) ||
	    (rc = delta_path(top, sizeof(top), state_dir, cur.next))) {
		snprintf(err, errlen, "checkpoint paths are too long");
		goto out;
	}
	if (!(req = calloc(1, sizeof(*req)))) {
		rc = -ENOMEM;
		goto out;
	}
	*req = (struct vm_control_req){.op = VMCTL_CHECKPOINT, .live = memfd != NULL};
	snprintf(req->dir, sizeof(req->dir), "%s", dir);
	snprintf(req->top, sizeof(req->top), "%s", top);
	if ((rc = vm_control_call(vm_ctl, req, &rep, memfd ? &passed : NULL, CKPT_VMM_TIMEOUT_MS))) {
		snprintf(err, errlen, "the VMM %s: %.400s",
			 rc == -EREMOTEIO ? "refused" : "did not answer", rep.text);
		/* Without an answer the VMM may be writing still: what it
		 * leaves is settled at the next start. */
		answered = rc == -EREMOTEIO;
		goto out;
	}
	answered = true;
	if (memfd)
		take_frozen(vm_ctl, dir, passed, memfd);
	snprintf(out->parent, sizeof(out->parent), "%s", cur.parent);
	snprintf(out->message, sizeof(out->message), "%s", message ? message : "");
	snprintf(out->top, sizeof(out->top), "%s", cur.top);
	ckpt_meta_free(&cur);
	out->created = (int64_t)time(NULL);
	out->memory_bytes = rep.memory_bytes;
	out->paused_ms = rep.paused_ms;
	/* current.json first: the VMM writes to the new delta already, and a
	 * start after a crash must find it there.  A crash before the record
	 * below leaves a checkpoint that is not listed (its files are there). */
	cur.nchain = 0;
	if ((rc = chain_of(state_dir, out->id, &cur, err, errlen)))
		goto out;
	snprintf(cur.top, sizeof(cur.top), "%s", top);
	snprintf(cur.parent, sizeof(cur.parent), "%s", out->id);
	cur.next++;
	if (!(rc = ckpt_meta_save(state_dir, &cur)))
		rc = ckpt_meta_save(state_dir, out);
out:
	if (rc && !err[0])
		snprintf(err, errlen, "%s", strerror(-rc));
	if (rc && memfd && *memfd >= 0) {
		close(*memfd);
		*memfd = -1;
	}
	if (rc && answered)
		settle_failed(state_dir, out->id);
	free(req);
	ckpt_meta_free(&cur);
	return rc;
}

/* Whether path is a layer of the current disk or of a checkpoint other than
 * except.  A checkpoint whose state cannot be read counts as using every
 * layer: nothing is deleted on a guess. */
static bool layer_used(const char *state_dir, const struct ckpt_meta *cur, const char *path,
		       const char *except)
{
	struct ckpt_meta *all = NULL;
	bool used = false;
	char err[256];
	int n = 0;

	for (int i = 0; i < cur->nchain; i++)
		used |= !strcmp(cur->chain[i], path);
	if (!strcmp(cur->top, path) || ckpt_meta_list(state_dir, &all, &n) < 0)
		return true;
	for (int i = 0; i < n; i++) {
		struct ckpt_meta c = {0};
		if (!used && strcmp(all[i].id, except)) {
			if (chain_of(state_dir, all[i].id, &c, err, sizeof(err)))
				used = true;
			for (int j = 0; j < c.nchain; j++)
				used |= !strcmp(c.chain[j], path);
			ckpt_meta_free(&c);
		}
		ckpt_meta_free(&all[i]);
	}
	free(all);
	return used;
}

/* Bytes a file takes on disk (holes not counted); 0 if it is not there. */
static uint64_t allocated(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

/* A checkpoint's own files and its directory; *freed grows by their size. */
static void remove_files(const char *dir, uint64_t *freed)
{
	static const char *const files[] = {
		SNAP_MEMORY_FILE,
		SNAP_MEMORY_FILE ".part", /* a live fork's that its VMM did not finish */
		SNAP_STATE_FILE,
	};
	char path[PATH_MAX + 16];

	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		*freed += allocated(path);
		unlink(path);
	}
	rmdir(dir);
}

/* Deletes a delta of this sandbox's that nothing uses any more. */
static uint64_t drop_layer(const char *state_dir, const struct ckpt_meta *cur, const char *path,
			   const char *except)
{
	uint64_t n;

	/* Never outside the sandbox's own directory (the image is shared). */
	if (strncmp(path, state_dir, strlen(state_dir)) || path[strlen(state_dir)] != '/' ||
	    layer_used(state_dir, cur, path, except))
		return 0;
	n = allocated(path);
	return unlink(path) == 0 ? n : 0;
}

int ckpt_rewind_prepare(const char *state_dir, const char *id, char *restore_dir, size_t rlen,
			char *new_top, size_t tlen, char *err, size_t errlen)
{
	struct ckpt_meta m, cur;
	int rc;

	if (!ckpt_id_valid(id) || ckpt_meta_load(state_dir, id, &m, NULL, 0)) {
		snprintf(err, errlen, "no checkpoint %.20s (see 'kosa8 checkpoints')", id);
		return -ENOENT;
	}
	ckpt_meta_free(&m);
	if ((rc = ckpt_current(state_dir, &cur, err, errlen)))
		return rc;
	if (!(rc = ckpt_dir_of(restore_dir, rlen, state_dir, id)) &&
	    !(rc = delta_path(new_top, tlen, state_dir, cur.next))) {
		unlink(new_top); /* left by a rewind that failed before recording it */
		rc = delta_on_checkpoint(state_dir, id, new_top, err, errlen);
	}
	ckpt_meta_free(&cur);
	return rc;
}

int ckpt_rewind_commit(const char *state_dir, const char *id, const char *new_top,
		       uint64_t *freed)
{
	struct ckpt_meta cur;
	char old[PATH_MAX], err[256];
	int rc;

	*freed = 0;
	if ((rc = ckpt_current(state_dir, &cur, err, sizeof(err))))
		return rc;
	snprintf(old, sizeof(old), "%s", cur.top);
	ckpt_meta_free(&cur);
	cur.nchain = 0;
	if ((rc = chain_of(state_dir, id, &cur, err, sizeof(err))))
		return rc;
	snprintf(cur.top, sizeof(cur.top), "%s", new_top);
	snprintf(cur.parent, sizeof(cur.parent), "%s", id);
	cur.next++;
	rc = ckpt_meta_save(state_dir, &cur);
	/* What the VM wrote since: gone with the rewind. */
	if (!rc)
		*freed = drop_layer(state_dir, &cur, old, "");
	ckpt_meta_free(&cur);
	return rc;
}

/* Children of the removed checkpoint hang from its parent now. */
static void reparent(const char *state_dir, const char *id, const char *parent)
{
	struct ckpt_meta *all = NULL;
	int n = 0;

	ckpt_meta_list(state_dir, &all, &n);
	for (int i = 0; i < n; i++) {
		if (!strcmp(all[i].parent, id)) {
			snprintf(all[i].parent, sizeof(all[i].parent), "%s", parent);
			if (ckpt_meta_save(state_dir, &all[i]))
				log_warn("checkpoint %s: cannot update its parent", all[i].id);
		}
		ckpt_meta_free(&all[i]);
	}
	free(all);
}

int ckpt_remove(const char *state_dir, const char *id, uint64_t *freed, char *err, size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	uint64_t copied = 0;
	struct ckpt_meta m, cur;
	int rc;

	*freed = 0;
	if (!ckpt_id_valid(id) || ckpt_meta_load(state_dir, id, &m, NULL, 0)) {
		snprintf(err, errlen, "no checkpoint %.20s (see 'kosa8 checkpoints')", id);
		return -ENOENT;
	}
	if (ckpt_live_fork(state_dir, id, path, sizeof(path))) {
		snprintf(err, errlen, "checkpoint %s is where sandbox '%.64s' was forked from: kosa8 rm it first",
			 id, path);
		rc = -EBUSY;
		goto out_meta;
	}
	if ((rc = ckpt_current(state_dir, &cur, err, errlen)))
		goto out;
	/* Checkpoints whose memory is a layer over this one take its pages
	 * first; until then it stays whole (vmm/snapshot_mem.h). */
	ckpt_dir_of(dir, sizeof(dir), state_dir, id);
	if ((rc = snapmem_detach_children(dir, &copied, err, errlen)) < 0)
		goto out;
	rc = 0;
	if (!strcmp(cur.parent, id)) {
		snprintf(cur.parent, sizeof(cur.parent), "%s", m.parent);
		if ((rc = ckpt_meta_save(state_dir, &cur)))
			goto out;
	}
	reparent(state_dir, id, m.parent);
	/* The record goes first: a crash after it leaves files nothing lists,
	 * never a listed checkpoint without its files. */
	snprintf(path, sizeof(path), "%s/" CKPT_META_DIR "/%s.json", state_dir, id);
	if (unlink(path) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot remove %.300s: %s", path, strerror(errno));
		goto out;
	}
	remove_files(dir, freed);
	/* Its frozen delta, unless the current disk or another checkpoint
	 * stands on it. */
	if (m.top[0])
		*freed += drop_layer(state_dir, &cur, m.top, id);
	*freed = *freed > copied ? *freed - copied : 0; /* what the layers above took over */
out:
	ckpt_meta_free(&cur);
out_meta:
	ckpt_meta_free(&m);
	return rc;
}

const char *ckpt_memory_kind(const char *state_dir, const char *id)
{
	struct snap_memory_desc md;
	char dir[PATH_MAX];
	struct snapshot sn;
	uint8_t *buf;
	bool ok;

	if (ckpt_dir_of(dir, sizeof(dir), state_dir, id) || snapshot_load(dir, &buf, &sn, NULL, 0))
		return "?";
	ok = !snapshot_memory_desc(snapshot_find(&sn, SNAP_SEC_MEMORY, 0), &md);
	snapshot_free(&sn);
	free(buf);
	return !ok ? "?" : (md.flags & SNAP_MEM_LAYER) ? "layer" : "full";
}

uint64_t ckpt_size(const char *state_dir, const struct ckpt_meta *m, uint64_t *disk_bytes)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	uint64_t n;

	ckpt_dir_of(dir, sizeof(dir), state_dir, m->id);
	snprintf(path, sizeof(path), "%s/" SNAP_MEMORY_FILE, dir);
	n = allocated(path);
	snprintf(path, sizeof(path), "%s/" SNAP_STATE_FILE, dir);
	n += allocated(path);
	*disk_bytes = m->top[0] ? allocated(m->top) : 0;
	return n;
}

/* ---- forks ---- */

static int pin_dir(char *buf, size_t len, const char *state_dir, const char *id)
{
	return snprintf(buf, len, "%s/" CKPT_META_DIR "/%s.forks", state_dir, id) >= (int)len ?
		       -ENAMETOOLONG : 0;
}

static int write_fork_file(const char *child_dir, const struct ckpt_fork *f)
{
	char path[PATH_MAX], *text;
	cJSON *o = cJSON_CreateObject();
	int fd, rc = 0;

	if (!o)
		return -ENOMEM;
	cJSON_AddStringToObject(o, "parent", f->parent);
	cJSON_AddStringToObject(o, "checkpoint", f->id);
	cJSON_AddStringToObject(o, "restore", f->restore);
	text = cJSON_Print(o);
	cJSON_Delete(o);
	if (!text)
		return -ENOMEM;
	if ((rc = sandbox_path(path, sizeof(path), child_dir, CKPT_FORK_FILE)))
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
out:
	free(text);
	return rc;
}

int ckpt_fork_prepare(const char *parent_dir, const char *parent, const char *id,
		      const char *child_dir, const char *child, char *err, size_t errlen)
{
	char disk[PATH_MAX], pins[PATH_MAX], pin[PATH_MAX + 80];
	struct ckpt_fork f = {0};
	struct ckpt_meta m;
	int rc, fd;

	if (!ckpt_id_valid(id) || ckpt_meta_load(parent_dir, id, &m, NULL, 0)) {
		snprintf(err, errlen, "'%.64s' has no checkpoint %.20s (see 'kosa8 checkpoints %.64s')",
			 parent, id, parent);
		return -ENOENT;
	}
	ckpt_meta_free(&m);
	snprintf(f.parent, sizeof(f.parent), "%s", parent);
	snprintf(f.id, sizeof(f.id), "%s", id);
	if ((rc = ckpt_dir_of(f.restore, sizeof(f.restore), parent_dir, id)) ||
	    (rc = sandbox_path(disk, sizeof(disk), child_dir, "disk.k8d")) ||
	    (rc = pin_dir(pins, sizeof(pins), parent_dir, id))) {
		snprintf(err, errlen, "paths are too long");
		return rc;
	}
	if ((rc = delta_on_checkpoint(parent_dir, id, disk, err, errlen)))
		return rc;
	/* The pin before the child can run: the parent's files stay. */
	snprintf(pin, sizeof(pin), "%s/%s", pins, child);
	if ((rc = mkdir_p(pins, 0700)) ||
	    ((fd = open(pin, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 && (rc = -errno)) ||
	    (fd >= 0 && close(fd) < 0 && (rc = -errno)) || (rc = write_fork_file(child_dir, &f))) {
		snprintf(err, errlen, "cannot record the fork: %s", strerror(-rc));
		unlink(disk);
		unlink(pin);
	}
	return rc;
}

static int get_bounded(const cJSON *o, const char *key, char *out, size_t len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= len)
		return -EBADMSG;
	memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

int ckpt_fork_load(const char *state_dir, struct ckpt_fork *f)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	size_t len = 0;
	cJSON *o;
	int rc;

	memset(f, 0, sizeof(*f));
	if ((rc = sandbox_path(path, sizeof(path), state_dir, CKPT_FORK_FILE)) ||
	    (rc = read_file(path, 64 * 1024, &buf, &len)))
		return rc;
	o = cJSON_ParseWithLength((const char *)buf, len);
	free(buf);
	rc = -EBADMSG;
	if (o && !get_bounded(o, "parent", f->parent, sizeof(f->parent)) &&
	    !get_bounded(o, "checkpoint", f->id, sizeof(f->id)) &&
	    !get_bounded(o, "restore", f->restore, sizeof(f->restore)) &&
	    sandbox_name_valid(f->parent) && ckpt_id_valid(f->id) && f->restore[0] == '/')
		rc = 0;
	cJSON_Delete(o);
	return rc;
}

int ckpt_fork_done(const char *state_dir)
{
	char from[PATH_MAX], to[PATH_MAX];

	if (sandbox_path(from, sizeof(from), state_dir, CKPT_FORK_FILE) ||
	    sandbox_path(to, sizeof(to), state_dir, "forked.json"))
		return -ENAMETOOLONG;
	return rename(from, to) < 0 ? -errno : 0;
}

/* Whether a pinned child still exists; a pin of one that is gone goes. */
static bool pin_live(const char *pins, const char *child)
{
	char dir[PATH_MAX], pin[PATH_MAX + 80];
	struct stat st;

	if (sandbox_name_valid(child) && !sandbox_state_dir(child, dir, sizeof(dir)) &&
	    stat(dir, &st) == 0)
		return true;
	snprintf(pin, sizeof(pin), "%s/%s", pins, child);
	unlink(pin);
	return false;
}

static int live_in(const char *pins, char *buf, size_t len)
{
	struct dirent *e;
	int found = 0;
	DIR *d = opendir(pins);

	if (!d)
		return 0;
	while (!found && (e = readdir(d)))
		if (e->d_name[0] != '.' && pin_live(pins, e->d_name)) {
			snprintf(buf, len, "%s", e->d_name);
			found = 1;
		}
	closedir(d);
	if (!found)
		rmdir(pins);
	return found;
}

int ckpt_live_fork(const char *state_dir, const char *id, char *buf, size_t len)
{
	char pins[PATH_MAX], dir[PATH_MAX];
	struct dirent *e;
	int found = 0;
	DIR *d;

	if (id)
		return !pin_dir(pins, sizeof(pins), state_dir, id) && live_in(pins, buf, len);
	snprintf(dir, sizeof(dir), "%s/" CKPT_META_DIR, state_dir);
	if (!(d = opendir(dir)))
		return 0;
	while (!found && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > 6 && !strcmp(e->d_name + l - 6, ".forks") &&
		    snprintf(pins, sizeof(pins), "%s/%s", dir, e->d_name) < (int)sizeof(pins))
			found = live_in(pins, buf, len);
	}
	closedir(d);
	return found;
}

/* ---- after a failed or interrupted checkpoint ---- */

/* The checkpoint id's files when no record lists it: what a checkpoint
 * that failed or was interrupted once the VMM had written it leaves. */
static void drop_unlisted(const char *state_dir, const char *id)
{
	char dir[PATH_MAX];
	struct ckpt_meta m;
	uint64_t freed = 0;

	if (ckpt_meta_load(state_dir, id, &m, NULL, 0) != -ENOENT) {
		ckpt_meta_free(&m);
		return;
	}
	if (!ckpt_dir_of(dir, sizeof(dir), state_dir, id))
		remove_files(dir, &freed);
}

/* The layers of the frozen delta under (itself last) as the chain of the
 * current disk, now that top stands on it. */
static int adopt_top(const char *state_dir, struct ckpt_meta *cur, const char *top, char *err,
		     size_t errlen)
{
	char derr[DISK_ERR_LEN];
	struct disk *d = NULL;
	int rc;

	/* Shared locks: a running VMM holds the frozen layers shared too. */
	if ((rc = disk_open(&d, cur->top, DISK_RDONLY, derr, sizeof(derr)))) {
		snprintf(err, errlen, "disk: %.400s", derr);
		return rc;
	}
	for (int i = 0; i < cur->nchain; i++)
		free(cur->chain[i]);
	cur->nchain = 0;
	for (unsigned i = 0; !rc && i < disk_layer_count(d); i++)
		rc = ckpt_meta_chain_add(cur, disk_layer_path(d, i));
	disk_close(d);
	snprintf(cur->top, sizeof(cur->top), "%s", top);
	cur->next++;
	return rc ? rc : ckpt_meta_save(state_dir, cur);
}

/* "c<digits>.tmp-<digits>": what vm_checkpoint.c builds a checkpoint in. */
static bool tmp_name(const char *n)
{
	const char *p = n + 1;

	if (n[0] != 'c' || !(*p >= '0' && *p <= '9'))
		return false;
	while (*p >= '0' && *p <= '9')
		p++;
	if (strncmp(p, ".tmp-", 5) || !(p[5] >= '0' && p[5] <= '9'))
		return false;
	for (p += 5; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

int ckpt_sweep_tmp(const char *state_dir, uint64_t *freed)
{
	char path[PATH_MAX];
	struct dirent *e, *f;
	int fd, sub, n = 0;
	struct stat st;
	DIR *d, *in;

	*freed = 0;
	if (snprintf(path, sizeof(path), "%s/" CKPT_DIR, state_dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -errno;
	}
	while ((e = readdir(d))) {
		if (!tmp_name(e->d_name))
			continue;
		sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0 || !(in = fdopendir(sub))) {
			if (sub >= 0)
				close(sub);
			continue; /* not a directory (or a link): not the VMM's */
		}
		while ((f = readdir(in)))
			if (fstatat(dirfd(in), f->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
			    unlinkat(dirfd(in), f->d_name, 0) == 0)
				*freed += (uint64_t)st.st_blocks * 512;
		closedir(in);
		n += unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0;
	}
	closedir(d);
	return n;
}

int ckpt_recover_top(const char *state_dir, char *err, size_t errlen)
{
	char derr[DISK_ERR_LEN], top[PATH_MAX], id[16];
	struct ckpt_meta cur;
	int rc, frozen;

	if ((rc = ckpt_current(state_dir, &cur, err, errlen)))
		return rc;
	snprintf(id, sizeof(id), "c%u", cur.next);
	if ((rc = delta_path(top, sizeof(top), state_dir, cur.next)))
		goto out;
	/* Unreadable: the VMM's start reports it. */
	if ((frozen = disk_is_frozen(cur.top)) <= 0) {
		/* disk_snapshot opens the new delta only once the old top is
		 * frozen: one there now was never written to. */
		rc = frozen == 0 && unlink(top) == 0;
		goto out;
	}
	if (disk_is_over(top, cur.top) != 1) {
		/* Frozen, and nothing over it yet (or something damaged). */
		unlink(top);
		if ((rc = disk_create(top, cur.top, NULL, derr, sizeof(derr)))) {
			snprintf(err, errlen, "disk: %.400s", derr);
			goto out;
		}
	}
	if (!(rc = adopt_top(state_dir, &cur, top, err, errlen))) {
		drop_unlisted(state_dir, id);
		rc = 1;
	}
out:
	if (rc < 0 && !err[0])
		snprintf(err, errlen, "%s", strerror(-rc));
	ckpt_meta_free(&cur);
	return rc;
}
