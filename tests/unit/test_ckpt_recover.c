/* ckpt_recover_top (supervisor/ckpt_ops.h): a supervisor killed while its
 * VMM wrote a checkpoint leaves current.json naming a frozen delta; the next
 * start moves on to the delta the VMM went on writing (its data kept), or
 * to a new one over the frozen one.  And ckpt_take when the checkpoint
 * fails after the VMM moved its disk: the next checkpoint and a restart
 * work.  Real disk files (disk/disk.h), no VM: the VMM's side of the control
 * socket is played by a thread that does to the disk what the VMM does
 * (disk_snapshot onto the top it is given) and then answers as the VMM
 * does when its memory cannot be written.  The VM side is
 * tests/vm/sandbox-race.sh (sandbox-sigkill-mid-checkpoint). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmp_dir.h"

#include "common/jsonl.h"
#include "disk/disk.h"
#include "sandbox/checkpoints.h"
#include "supervisor/ckpt_ops.h"
#include "vmm/vm_control.h"

static char dir[PATH_MAX], image[PATH_MAX + 16], first[PATH_MAX + 16], next[PATH_MAX + 32];

/* A sandbox dir: disk.k8d over a raw image, as create makes it. */
static void make_sandbox(const char *name)
{
	char err[256], cmd[PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/checkpoints", dir);
	assert_int_equal(system(cmd), 0);
	snprintf(image, sizeof(image), "%s/image", dir);
	snprintf(cmd, sizeof(cmd), "truncate -s 4M %s", image);
	assert_int_equal(system(cmd), 0);
	snprintf(first, sizeof(first), "%s/disk.k8d", dir);
	snprintf(next, sizeof(next), "%s/checkpoints/d1.k8d", dir);
	assert_int_equal(disk_create(first, image, NULL, err, sizeof(err)), 0);
}

static void write_byte(const char *top, uint64_t off, uint8_t v)
{
	struct disk *d;
	char err[256];

	assert_int_equal(disk_open(&d, top, 0, err, sizeof(err)), 0);
	assert_int_equal(disk_write(d, &v, 1, off), 0);
	assert_int_equal(disk_close(d), 0);
}

static uint8_t read_byte(const char *top, uint64_t off)
{
	struct disk *d;
	char err[256];
	uint8_t v = 0;

	assert_int_equal(disk_open(&d, top, DISK_RDONLY, err, sizeof(err)), 0);
	assert_int_equal(disk_read(d, &v, 1, off), 0);
	disk_close(d);
	return v;
}

static void test_nothing_to_do(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;

	make_sandbox("plain");
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_int_equal(cur.next, 1); /* no current.json written */
	ckpt_meta_free(&cur);
}

/* Killed after the VMM froze the top and wrote on in the new delta. */
static void test_moves_to_the_vmms_new_delta(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;

	make_sandbox("went-on");
	write_byte(first, 0, 0x11);
	assert_int_equal(disk_freeze(first, err, sizeof(err)), 0);
	assert_int_equal(disk_create(next, first, NULL, err, sizeof(err)), 0);
	write_byte(next, 512, 0x22);
	/* Before: current names the frozen delta, which cannot be opened for writing. */
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 1);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, next);
	assert_int_equal(cur.next, 2);
	assert_int_equal(cur.nchain, 2);
	assert_non_null(strstr(cur.chain[1], "disk.k8d"));
	ckpt_meta_free(&cur);
	/* What was written before and after the freeze is there. */
	assert_int_equal(read_byte(next, 0), 0x11);
	assert_int_equal(read_byte(next, 512), 0x22);
	/* Once is enough. */
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
}

/* Killed after the freeze, before the new delta (or with a bad one). */
static void test_new_delta_over_the_frozen_one(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;
	FILE *f;

	make_sandbox("half");
	write_byte(first, 0, 0x33);
	assert_int_equal(disk_freeze(first, err, sizeof(err)), 0);
	f = fopen(next, "w");
	assert_non_null(f);
	fputs("not a delta", f);
	fclose(f);
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 1);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, next);
	ckpt_meta_free(&cur);
	assert_int_equal(read_byte(next, 0), 0x33);
	write_byte(next, 1024, 0x44);
}

/* The VMM's side of one checkpoint request. */
struct fake_vmm {
	int listen_fd;
	struct disk *d;    /* the running disk, held open as the VMM holds it */
	bool write_state;  /* writes a (damaged) state file into the checkpoint dir and says ok */
	int snapshot_rc;   /* what disk_snapshot onto the requested top gave */
	char top[PATH_MAX];
	char ctl[PATH_MAX + 16];
};

static void *fake_vmm_run(void *arg)
{
	struct fake_vmm *v = arg;
	struct vm_control_reply rep = {.ok = false};
	struct vm_control_req req;
	const char *why;
	char err[DISK_ERR_LEN], path[PATH_MAX + 16];
	uint8_t b = 0x5a;
	cJSON *m = NULL;
	int c = accept(v->listen_fd, NULL, NULL);

	if (c < 0 || jsonl_recv(c, VM_CONTROL_MAX_LINE, 5000, &m, NULL, &why) ||
	    vm_control_req_decode(m, &req, &why))
		goto out;
	snprintf(v->top, sizeof(v->top), "%s", req.top);
	v->snapshot_rc = disk_snapshot(v->d, req.top, err, sizeof(err));
	/* The guest goes on writing, to whichever delta is the top now. */
	disk_write(v->d, &b, 1, 2048);
	if (v->write_state && !v->snapshot_rc && mkdir(req.dir, 0700) == 0) {
		snprintf(path, sizeof(path), "%s/state", req.dir);
		FILE *f = fopen(path, "w");
		if (f) {
			fputs("not a checkpoint", f);
			fclose(f);
		}
		rep.ok = true;
		snprintf(rep.text, sizeof(rep.text), "checkpoint %.200s", req.dir);
	} else {
		snprintf(rep.text, sizeof(rep.text), "cannot write guest memory: No space left on device");
	}
	cJSON_Delete(m);
	m = vm_control_reply_encode(&rep);
	if (m)
		jsonl_send(c, m, -1);
out:
	cJSON_Delete(m);
	if (c >= 0)
		close(c);
	return NULL;
}

/* A sandbox named name whose VMM runs: its control socket bound, its disk
 * open. */
static void fake_vmm_start(struct fake_vmm *v, const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char err[DISK_ERR_LEN];

	make_sandbox(name);
	snprintf(v->ctl, sizeof(v->ctl), "%s/vm.ctl", dir);
	v->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(v->listen_fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", v->ctl);
	assert_int_equal(bind(v->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(v->listen_fd, 1), 0);
	assert_int_equal(disk_open(&v->d, first, 0, err, sizeof(err)), 0);
}

static void fake_vmm_end(struct fake_vmm *v)
{
	assert_int_equal(disk_close(v->d), 0);
	close(v->listen_fd);
}

/* current.json names top, and no checkpoint is listed. */
static void assert_current(const char *top, unsigned next_id)
{
	struct ckpt_meta cur, *all = NULL;
	char err[256] = "";
	int n = -1;

	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, top);
	assert_int_equal(cur.next, next_id);
	ckpt_meta_free(&cur);
	assert_int_equal(ckpt_meta_list(dir, &all, &n), 0);
	assert_int_equal(n, 0);
	free(all);
}

/* One checkpoint through ckpt_take against the fake VMM: ckpt_take's
 * result, with what the VMM's disk_snapshot gave in *snap_rc. */
static int take_once(struct fake_vmm *v, int *snap_rc)
{
	char err[600] = "";
	struct ckpt_meta m;
	pthread_t t;
	int rc;

	v->snapshot_rc = 1;
	assert_int_equal(pthread_create(&t, NULL, fake_vmm_run, v), 0);
	rc = ckpt_take(dir, v->ctl, NULL, &m, NULL, err, sizeof(err));
	pthread_join(t, NULL);
	if (!rc)
		ckpt_meta_free(&m);
	else
		assert_true(err[0]);
	*snap_rc = v->snapshot_rc;
	return rc;
}

/* The VMM moved its disk onto d1, then could not write the memory: the
 * sandbox goes on in d1 (recorded), so the next checkpoint gets d2 (it
 * was told d1 again, which exists: "File exists"), and after the VMM
 * ends the current top opens for writing (it was the frozen delta:
 * "delta is frozen"), with every byte written before and after. */
static void test_failed_checkpoint_after_the_disk_moved(void **state)
{
	char err[256] = "", d2[PATH_MAX + 32];
	struct fake_vmm v = {0};
	struct disk *d;
	int snap;

	fake_vmm_start(&v, "failed");
	snprintf(d2, sizeof(d2), "%s/checkpoints/d2.k8d", dir);
	assert_int_equal(disk_write(v.d, (uint8_t[]){0x11}, 1, 0), 0);

	assert_int_equal(take_once(&v, &snap), -EREMOTEIO);
	assert_int_equal(snap, 0);
	assert_string_equal(v.top, next);
	assert_current(next, 2);

	assert_int_equal(take_once(&v, &snap), -EREMOTEIO);
	assert_string_equal(v.top, d2);
	assert_int_equal(snap, 0);
	assert_current(d2, 3);

	/* The VMM ends; the next start opens the current top. */
	fake_vmm_end(&v);
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
	assert_int_equal(disk_open(&d, d2, 0, err, sizeof(err)), 0);
	disk_close(d);
	assert_int_equal(read_byte(d2, 0), 0x11);
	assert_int_equal(read_byte(d2, 2048), 0x5a);
}

/* The VMM wrote the checkpoint, and its state file is unreadable here: the
 * checkpoint fails in the supervisor, after the VMM went on in d1.  Same
 * outcome, and the checkpoint's unlisted files go. */
static void test_failed_record_after_the_vmm_wrote_it(void **state)
{
	struct fake_vmm v = {.write_state = true};
	char c1[PATH_MAX + 32];
	int snap;

	fake_vmm_start(&v, "unrecorded");
	snprintf(c1, sizeof(c1), "%s/checkpoints/c1", dir);
	assert_true(take_once(&v, &snap) < 0);
	assert_int_equal(snap, 0);
	assert_int_equal(access(c1, F_OK), -1);
	assert_current(next, 2);
	fake_vmm_end(&v);
}

/* A VMM killed between creating the new delta and freezing the old top:
 * the top is still the disk, and the new delta (never written) goes, so
 * that the next checkpoint can create it. */
static void test_new_delta_over_an_unfrozen_top(void **state)
{
	char err[256] = "", cmd[3 * PATH_MAX];
	struct ckpt_meta cur;
	struct disk *d;

	make_sandbox("unfrozen");
	write_byte(first, 0, 0x66);
	/* disk_snapshot's new delta, and the top as it was before the freeze. */
	snprintf(cmd, sizeof(cmd), "cp %s %s.before", first, first);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(disk_open(&d, first, 0, err, sizeof(err)), 0);
	assert_int_equal(disk_snapshot(d, next, err, sizeof(err)), 0);
	disk_close(d);
	snprintf(cmd, sizeof(cmd), "mv %s.before %s", first, first);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(disk_is_frozen(first), 0);
	assert_int_equal(disk_is_over(next, first), 1);

	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 1);
	assert_int_equal(access(next, F_OK), -1);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, first);
	assert_int_equal(cur.next, 1);
	ckpt_meta_free(&cur);
	assert_int_equal(read_byte(first, 0), 0x66);
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
}

/* What a VMM killed mid-checkpoint leaves (checkpoints/cN.tmp-PID with its
 * files) goes; a whole checkpoint, other names, and a link named like
 * one (and what it points to) stay. */
static void test_sweep_unfinished_checkpoints(void **state)
{
	char cmd[PATH_MAX * 5], path[PATH_MAX + 64];
	uint64_t freed;

	make_sandbox("sweep");
	snprintf(cmd, sizeof(cmd),
		 "cd %s/checkpoints && mkdir c1 c3.tmp-4242 c4.tmp-1 c4.tmp-x keep && "
		 "head -c 65536 /dev/urandom >c3.tmp-4242/memory && echo s >c3.tmp-4242/state && "
		 "echo m >c1/memory && echo s >c4.tmp-1/state && mkdir %s/outside && echo o >%s/outside/memory && "
		 "ln -s %s/outside c5.tmp-7",
		 dir, dir, dir, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(ckpt_sweep_tmp(dir, &freed), 2);
	assert_true(freed >= 65536);
	snprintf(path, sizeof(path), "%s/checkpoints/c3.tmp-4242", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/checkpoints/c4.tmp-1", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(cmd, sizeof(cmd),
		 "cd %s && test -f checkpoints/c1/memory && test -d checkpoints/c4.tmp-x && test -d checkpoints/keep && "
		 "test -L checkpoints/c5.tmp-7 && test -f outside/memory",
		 dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(ckpt_sweep_tmp(dir, &freed), 0);
	assert_int_equal(freed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_to_do),
		cmocka_unit_test(test_moves_to_the_vmms_new_delta),
		cmocka_unit_test(test_new_delta_over_the_frozen_one),
		cmocka_unit_test(test_failed_checkpoint_after_the_disk_moved),
		cmocka_unit_test(test_failed_record_after_the_vmm_wrote_it),
		cmocka_unit_test(test_new_delta_over_an_unfrozen_top),
		cmocka_unit_test(test_sweep_unfinished_checkpoints),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
