/* kosa8 checkpoint / checkpoints / rewind / fork: the sandbox-level checkpoints.
 * The supervisor of the running sandbox does the work and audits it
 * (supervisor/ckpt_ops.h); the tree is read from the sandbox's records. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "proxy/secrets.h"
#include "sandbox/owner.h"
#include "sandbox/checkpoints.h"
#include "supervisor/ckpt_ops.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"
#include "supervisor/supervisor.h"

/* A rewind boots nothing but waits for the restored agent; under software
 * emulation that can take as long as a boot. */
#define REWIND_TIMEOUT_MS (SUPERVISOR_BOOT_TIMEOUT_MS + 60 * 1000)
/* Forks made by one command (each one a running VM). */
#define FORK_MAX 16

/* On a terminal: what the supervisor does meanwhile, on one line. */
struct progress {
	const char *cmd;
	bool shown;
};

static void show_progress(const cJSON *line, void *arg)
{
	const char *step = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(line, "progress"));
	const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(line, "what"));
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(line, "running_ms");
	struct progress *p = arg;

	fprintf(stderr, "\r\033[Kkosa8 %s: %.48s: %.160s (%.0f s)", p->cmd, what ? what : "",
		step ? step : "", cJSON_IsNumber(ms) ? ms->valuedouble / 1000 : 0.0);
	p->shown = true;
}

/* Sends req to the sandbox's supervisor; prints its error and returns 1,
 * or 0 with *reply set.  On a terminal the supervisor's progress is shown
 * while a long operation runs. */
static int call_fd(const char *cmd, const char *name, cJSON *req, cJSON **reply, int timeout_ms,
		   int *fd_out)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct progress prog = {.cmd = cmd};
	const cJSON *e;
	int err;

	*reply = NULL;
	if (!sandbox_name_valid(name) || sandbox_run_dir(name, dir, sizeof(dir)) ||
	    sandbox_path(path, sizeof(path), dir, "control.sock")) {
		cJSON_Delete(req);
		return cli_fail(cmd, "bad name '%s'", name);
	}
	if (isatty(2))
		cJSON_AddBoolToObject(req, "progress", true);
	err = control_call_progress(path, req, reply, fd_out, timeout_ms, show_progress, &prog);
	cJSON_Delete(req);
	if (prog.shown)
		fputs("\r\033[K", stderr);
	if (err)
		return cli_unanswered(cmd, name, err);
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*reply, "ok"))) {
		e = cJSON_GetObjectItemCaseSensitive(*reply, "error");
		cli_fail(cmd, "%s", cJSON_IsString(e) ? e->valuestring : "failed");
		cJSON_Delete(*reply);
		*reply = NULL;
		if (fd_out && *fd_out >= 0)
			close(*fd_out);
		return 1;
	}
	return 0;
}

static int call(const char *cmd, const char *name, cJSON *req, cJSON **reply, int timeout_ms)
{
	return call_fd(cmd, name, req, reply, timeout_ms, NULL);
}

static cJSON *request(const char *op, const char *key, const char *value)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddStringToObject(r, "op", op);
	if (key && value)
		cJSON_AddStringToObject(r, key, value);
	return r;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int checkpoint_rm(int argc, char **argv)
{
	cJSON *reply;

	if (argc != 4)
		return cli_usage_error("checkpoint", "rm");
	if (call("checkpoint rm", argv[2], request("checkpoint.rm", "id", argv[3]), &reply, 60000))
		return 1;
	printf("removed %s, %.1f MiB freed\n", argv[3], num(reply, "freed_bytes") / (double)MiB);
	cJSON_Delete(reply);
	return 0;
}

int cmd_checkpoint(int argc, char **argv)
{
	const char *msg = NULL;
	cJSON *reply, *req;

	if (argc >= 2 && !strcmp(argv[1], "rm"))
		return checkpoint_rm(argc, argv);
	if (argc == 4 && (!strcmp(argv[2], "-m") || !strcmp(argv[2], "--message")))
		msg = argv[3];
	else if (argc != 2)
		return cli_usage_error("checkpoint", NULL);
	if (msg && !ckpt_message_valid(msg))
		return cli_fail("checkpoint", "the message is too long (511 bytes) or has control characters");
	req = request("checkpoint", "message", msg);
	if (call("checkpoint", argv[1], req, &reply, CKPT_VMM_TIMEOUT_MS + 30000))
		return 1;
	puts(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(reply, "id")));
	cJSON_Delete(reply);
	return 0;
}

int cmd_rewind(int argc, char **argv)
{
	cJSON *reply;

	if (argc != 3)
		return cli_usage_error("rewind", NULL);
	if (call("rewind", argv[1], request("rewind", "id", argv[2]), &reply, REWIND_TIMEOUT_MS))
		return 1;
	printf("rewound %s to %s in %.0f ms (stop %.0f, restore until the agent answered %.0f, "
	       "clock and RNG %.0f)\n", argv[1], argv[2], num(reply, "ms"), num(reply, "stop_ms"),
	       num(reply, "restore_ms"), num(reply, "fixup_ms"));
	cJSON_Delete(reply);
	return 0;
}

/* ---- the tree ---- */

static void print_one(const char *state_dir, const struct ckpt_meta *m, int depth,
		      const char *current_parent, uint64_t *total)
{
	char when[32];
	struct tm tm;
	time_t t = (time_t)m->created;
	uint64_t disk, files = ckpt_size(state_dir, m, &disk);

	*total += files + disk;
	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	printf("%*s%-*s %-6s %s %9.1f %-5s %9.1f  %s%s\n", depth * 2, "",
	       8 - depth * 2 > 2 ? 8 - depth * 2 : 2, m->id, m->parent[0] ? m->parent : "-", when,
	       (double)files / MiB, ckpt_memory_kind(state_dir, m->id), (double)disk / MiB, m->message,
	       !strcmp(m->id, current_parent) ? "  <- running from here" : "");
}

static void print_tree(const char *state_dir, const struct ckpt_meta *v, int n, const char *parent,
		       int depth, const char *current_parent, uint64_t *total)
{
	for (int i = 0; i < n && depth < 64; i++) {
		if (strcmp(v[i].parent, parent))
			continue;
		print_one(state_dir, &v[i], depth, current_parent, total);
		print_tree(state_dir, v, n, v[i].id, depth + 1, current_parent, total);
	}
}

int cmd_checkpoints(int argc, char **argv)
{
	char dir[PATH_MAX], err[256];
	struct ckpt_meta *v = NULL, cur;
	uint64_t total = 0;
	int n = 0;

	if (argc != 2)
		return cli_usage_error("checkpoints", NULL);
	if (!sandbox_name_valid(argv[1]) || sandbox_state_dir(argv[1], dir, sizeof(dir)) ||
	    access(dir, F_OK))
		return cli_fail("checkpoints", "no sandbox named '%s'", argv[1]);
	if (ckpt_current(dir, &cur, err, sizeof(err)))
		return cli_fail("checkpoints", "%s", err);
	if (ckpt_meta_list(dir, &v, &n) < 0) {
		ckpt_meta_free(&cur);
		return cli_fail("checkpoints", "cannot read the checkpoints of '%s'", argv[1]);
	}
	printf("%-8s %-6s %-19s %9s %-5s %9s  %s\n", "ID", "PARENT", "CREATED", "MEM MiB", "KIND",
	       "DISK MiB", "MESSAGE");
	print_tree(dir, v, n, "", 0, cur.parent, &total);
	/* Children of a checkpoint whose record is gone: shown at the root. */
	for (int i = 0; i < n; i++) {
		bool found = !v[i].parent[0];
		for (int j = 0; j < n && !found; j++)
			found = !strcmp(v[j].id, v[i].parent);
		for (int j = 0; j < i && !found; j++)
			found = !strcmp(v[j].parent, v[i].parent); /* that group is printed */
		if (!found)
			print_tree(dir, v, n, v[i].parent, 0, cur.parent, &total);
	}
	printf("%d checkpoint%s, %.1f MiB on disk\n", n, n == 1 ? "" : "s", (double)total / MiB);
	for (int i = 0; i < n; i++)
		ckpt_meta_free(&v[i]);
	free(v);
	ckpt_meta_free(&cur);
	return 0;
}

/* ---- fork ---- */

/* The child's state dir: the parent's configuration under the child's name
 * (its workspace already in the disk), the parent's policy and secret
 * placeholders, and what
 * ckpt_fork_prepare sets up. */
static int create_child(const char *parent, const char *pdir, const char *id, const char *child)
{
	char dir[PATH_MAX], policy[PATH_MAX], err[600] = "";
	struct sandbox_cfg cfg;
	struct stat st;
	int rc, lk;

	if (!sandbox_name_valid(child))
		return cli_fail("fork", "bad name '%s': use 1-63 of a-z 0-9 . _ -, starting with a letter or digit", child);
	if (sandbox_state_dir(child, dir, sizeof(dir)) || stat(dir, &st) == 0)
		return cli_fail("fork", "a sandbox named '%s' exists already (kosa8 rm it, or pick another --name)", child);
	if (sandbox_cfg_load(pdir, &cfg))
		return cli_fail("fork", "cannot read the configuration of '%s'", parent);
	snprintf(cfg.name, sizeof(cfg.name), "%s", child);
	cfg.created = (int64_t)time(NULL);
	cfg.workspace_copied = true;
	/* The CID is the fork's own once its sandbox.json is written. */
	if ((lk = sandbox_create_lock()) < 0)
		return cli_fail("fork", "cannot lock the sandboxes' directory: %s", strerror(-lk));
	/* its guest sees the change (vsock transport reset) */
	if (!(cfg.cid = sandbox_cid_pick()) || mkdir(dir, 0700)) {
		rc = cfg.cid ? errno : 0;
		close(lk);
		return cli_fail("fork", rc == EEXIST ? "a sandbox named '%s' exists already" :
				rc ? "cannot create sandbox '%s'" : "no vsock CID left for '%s' (kosa8 rm some sandboxes)", child);
	}
	rc = ckpt_fork_prepare(pdir, parent, id, dir, child, err, sizeof(err));
	if (!rc && !sandbox_path(policy, sizeof(policy), pdir, "policy") && access(policy, F_OK) == 0 &&
	    (rc = cli_copy_policy(policy, dir)))
		snprintf(err, sizeof(err), "cannot copy the policy of '%s': %s", parent, strerror(-rc));
	if (!rc && (rc = secret_placeholders_copy(pdir, dir)))
		snprintf(err, sizeof(err), "cannot copy the secret placeholders of '%s': %s", parent,
			 strerror(-rc));
	if (!rc && (rc = sandbox_cfg_save(dir, &cfg)))
		snprintf(err, sizeof(err), "cannot write the configuration: %s", strerror(-rc));
	close(lk);
	if (rc) {
		cli_remove_tree(dir); /* its pin goes with it (ckpt_live_fork) */
		return cli_fail("fork", "%s", err);
	}
	return 0;
}

struct fork_opts {
	const char *parent, *id, *name;
	int count;
};

static int parse_fork(int argc, char **argv, struct fork_opts *o)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'n'},
		{"count", required_argument, NULL, 'c'},
		{0, 0, 0, 0},
	};
	char *end;
	int c;

	memset(o, 0, sizeof(*o));
	o->count = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "n:c:", opts, NULL)) != -1) {
		switch (c) {
		case 'n': o->name = optarg; break;
		case 'c':
			o->count = (int)strtol(optarg, &end, 10);
			if (*end || o->count < 1 || o->count > FORK_MAX)
				return cli_fail("fork", "--count takes 1 to %d", FORK_MAX), 2;
			break;
		default: return 2;
		}
	}
	for (; optind < argc; optind++) {
		if (!o->parent)
			o->parent = argv[optind];
		else if (!o->id)
			o->id = argv[optind];
		else
			return cli_fail("fork", "unexpected '%s'", argv[optind]), 2;
	}
	if (!o->parent || !o->name)
		return cli_usage_error("fork", NULL);
	return 0;
}

int cmd_fork(int argc, char **argv)
{
	char pdir[PATH_MAX], child[SANDBOX_NAME_MAX + 1], id[CKPT_ID_LEN];
	struct fork_opts o;
	cJSON *reply, *req;
	int rc, memfd = -1;

	/* getopt permutes: NAME ID --name X and --name X NAME ID both work. */
	if ((rc = parse_fork(argc, argv, &o)))
		return rc;
	if (!sandbox_name_valid(o.parent) || sandbox_state_dir(o.parent, pdir, sizeof(pdir)) ||
	    access(pdir, F_OK))
		return cli_fail("fork", "no sandbox named '%s'", o.parent);
	if (o.id) {
		snprintf(id, sizeof(id), "%.*s", (int)sizeof(id) - 1, o.id);
	} else {
		/* No checkpoint named: one of the running sandbox, now, live: the
		 * forks map the parent's frozen memory, passed with the reply,
		 * while the checkpoint's memory file is written. */
		req = request("checkpoint", "message", "fork");
		cJSON_AddBoolToObject(req, "live", true);
		if (call_fd("fork", o.parent, req, &reply, CKPT_VMM_TIMEOUT_MS + 30000, &memfd))
			return 1;
		snprintf(id, sizeof(id), "%s",
			 cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(reply, "id")));
		cJSON_Delete(reply);
		fprintf(stderr, "kosa8 fork: checkpoint %s of '%s'%s\n", id, o.parent,
			memfd >= 0 ? " (live: the forks share its memory, written to disk meanwhile)" : "");
	}
	for (int i = 1; i <= o.count; i++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int n = o.count == 1 ? snprintf(child, sizeof(child), "%s", o.name) :
				       snprintf(child, sizeof(child), "%s-%d", o.name, i);
		if (n < 0 || (size_t)n >= sizeof(child) ||
		    create_child(o.parent, pdir, id, child) || cli_start_sandbox("fork", child, memfd)) {
			if (n < 0 || (size_t)n >= sizeof(child))
				cli_fail("fork", "--name %.64s is too long", o.name);
			if (memfd >= 0)
				close(memfd);
			return 1;
		}
		printf("%s\n", child);
		fflush(stdout);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		fprintf(stderr, "kosa8 fork: '%s' runs from %s of '%s' (%.1f s)\n", child, id, o.parent,
			(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	}
	if (memfd >= 0)
		close(memfd);
	return 0;
}
