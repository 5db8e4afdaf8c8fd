/* kosa8 diff / kosa8 export: the changes an agent made under /workspace,
 * brought back to the host as a patch the user reviews.
 *
 *   kosa8 diff NAME [--stat]            the patch (or a summary) on stdout
 *   kosa8 export NAME --patch FILE      the patch into FILE (- for stdout)
 *   kosa8 export NAME --to DIR          the guest's whole /workspace into DIR
 *   kosa8 export NAME --apply [--yes]   the patch applied to the host
 *                                       workspace, after showing what changes
 *
 * The guest's /workspace is fetched through the agent (agent_get_tree) into
 * a private temporary folder and compared with the host folder the sandbox
 * was created from.  Git does the comparing, because its patch format is the
 * one reviewers and tools read and it says everything a plain diff cannot:
 * binary files (as `GIT binary patch`), deletions, new files, mode changes
 * and symbolic links.  It runs in a throwaway repository inside the
 * temporary folder with the user's and the system's git configuration shut
 * out (and the folders' own .gitattributes overruled), so nothing in either
 * folder is written, the patch holds the files' bytes as they are, and no
 * external diff program, filter or hook runs.  Like `git add -A`, the comparison leaves out `.git`
 * folders, what the workspace's .gitignore files ignore, and empty folders;
 * `export --to` copies everything.
 *
 * Nothing is written into the user's workspace except by --apply: it checks
 * the patch with `git apply --check` (a workspace edited on the host since
 * shows as a conflict), then writes each changed file or link from the
 * guest's copy through the guarded writer (common/guarded.h), deletions
 * first; git never writes there.  A change refused part-way leaves those
 * before it written, and the error says how many.  Every export is audited
 * ("workspace.export"). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentproto/client.h"
#include "audit/audit.h"
#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/termsafe.h"
#include "common/util.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"

#define GIT_TREE_HEX 64 /* room for a SHA-1 or SHA-256 object name */


/* One comparison: the temporary folder and what is in it. */
struct wsdiff {
	const char *cmd, *name;
	char workspace[PATH_MAX]; /* the host folder, resolved */
	char tmp[PATH_MAX];       /* private (0700), removed at the end */
	char guest[PATH_MAX];     /* tmp/workspace: the guest's /workspace */
	char gitdir[PATH_MAX];    /* tmp/git: the throwaway repository */
	char patch[PATH_MAX];     /* tmp/patch */
	char ta[GIT_TREE_HEX + 1], tb[GIT_TREE_HEX + 1]; /* host and guest trees */
	size_t files;             /* files the patch changes */
	off_t patch_bytes;
	struct gw_opts go;        /* how guest files are written here, and the bound */
};

static int sub(char *buf, const char *dir, const char *leaf)
{
	int n = snprintf(buf, PATH_MAX, "%s/%s", dir, leaf);

	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

static int load_workspace(struct wsdiff *d)
{
	char state[PATH_MAX];
	struct sandbox_cfg cfg;
	int err;

	if (!sandbox_name_valid(d->name))
		return cli_fail(d->cmd, "bad sandbox name '%s'", d->name);
	err = sandbox_state_dir(d->name, state, sizeof(state));
	if (!err)
		err = sandbox_cfg_load(state, &cfg);
	if (err == -ENOENT)
		return cli_fail(d->cmd, "no sandbox '%s' (see 'kosa8 ps')", d->name);
	if (err)
		return cli_fail(d->cmd, "cannot read sandbox '%s': %s", d->name, strerror(-err));
	if (!cfg.workspace[0])
		return cli_fail(d->cmd, "sandbox '%s' was created without --workspace: nothing to compare "
				    "(kosa8 cp %s:/workspace DIR copies files out)", d->name, d->name);
	if (!realpath(cfg.workspace, d->workspace))
		return cli_fail(d->cmd, "the workspace %s is gone from the host: %s", cfg.workspace,
			    strerror(errno));
	return 0;
}

/* ---- the guest's files ---- */

/* A session with the guest agent, through the sandbox's supervisor (which
 * audits it as agent.session with `what`). */
static int agent_open(struct wsdiff *d, struct agent_client **c)
{
	char run[PATH_MAX], sock[PATH_MAX];
	cJSON *req = cJSON_CreateObject(), *what = cJSON_CreateObject(), *reply = NULL;
	const cJSON *e;
	int fd = -1, err;

	cJSON_AddStringToObject(req, "op", "agent");
	cJSON_AddStringToObject(what, "kind", "copy_out");
	cJSON_AddStringToObject(what, "path", "/workspace");
	cJSON_AddStringToObject(what, "for", d->cmd);
	cJSON_AddItemToObject(req, "what", what);
	err = sandbox_run_dir(d->name, run, sizeof(run));
	if (!err)
		err = sandbox_path(sock, sizeof(sock), run, "control.sock");
	if (!err)
		err = control_call(sock, req, &reply, &fd, 30000);
	cJSON_Delete(req);
	if (err) {
		cJSON_Delete(reply);
		return cli_fail(d->cmd, "sandbox '%s' is not running (kosa8 start %s)", d->name, d->name);
	}
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")) || fd < 0) {
		e = cJSON_GetObjectItemCaseSensitive(reply, "error");
		cli_fail(d->cmd, "%s", cJSON_IsString(e) ? e->valuestring : "the supervisor refused");
		cJSON_Delete(reply);
		if (fd >= 0)
			close(fd);
		return 1;
	}
	cJSON_Delete(reply);
	if (agent_client_from_fd(fd, c) < 0)
		return cli_fail(d->cmd, "%s", "the guest agent did not answer");
	return 0;
}

static int fetch(struct wsdiff *d, const char *dir)
{
	struct agent_client *c = NULL;
	struct ap_tree_stats st;
	int err;

	if (cli_copy_out_opts(d->cmd, &d->go) || agent_open(d, &c))
		return 1;
	memset(&st, 0, sizeof(st));
	err = agent_get_tree(c, "/workspace", dir, &d->go, &st);
	if (err)
		cli_fail(d->cmd, "copying /workspace out of '%s': %s", d->name, agent_client_error(c));
	cli_copy_out_report(d->cmd, err, &st);
	agent_client_close(c);
	return err ? 1 : 0;
}

/* ---- git, shut off from the user's configuration ---- */

/* Runs git with argv (after "git") in the throwaway repository; work_tree
 * and index may be NULL.  stdout goes to out_fd (-1: /dev/null).  0 when
 * git exited 0. */
static int git(const struct wsdiff *d, const char *work_tree, const char *index, int out_fd,
	       const char *const *args)
{
	const char *argv[32] = {"git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true",
				"-c", "core.symlinks=true", "-c", "diff.noprefix=false"};
	int n = 9, status;
	pid_t pid;

	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (out_fd < 0)
			out_fd = null;
		if (dup2(out_fd, 1) < 0 || dup2(null, 0) < 0 || (work_tree && chdir(work_tree) < 0))
			_exit(127);
		setenv("GIT_DIR", d->gitdir, 1);
		if (work_tree)
			setenv("GIT_WORK_TREE", work_tree, 1);
		if (index)
			setenv("GIT_INDEX_FILE", index, 1);
		setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
		setenv("GIT_CONFIG_GLOBAL", "/dev/null", 1);
		setenv("GIT_TERMINAL_PROMPT", "0", 1);
		unsetenv("GIT_EXTERNAL_DIFF");
		/* No file git writes here (the patch, an object) passes the bound. */
		if (d->go.max_bytes) {
			struct rlimit fsize = {d->go.max_bytes, d->go.max_bytes};
			setrlimit(RLIMIT_FSIZE, &fsize);
		}
		execvp("git", (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return -ENOENT;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ)
		return -EDQUOT;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* The git tree of a folder: `add -A` into a private index, `write-tree`. */
static int tree_of(const struct wsdiff *d, const char *dir, const char *index_name,
		   char tree[GIT_TREE_HEX + 1])
{
	char index[PATH_MAX], out[PATH_MAX];
	const char *add[] = {"add", "-A", "--", ".", NULL};
	const char *write[] = {"write-tree", NULL};
	ssize_t n;
	int fd, err;

	if ((err = sub(index, d->tmp, index_name)) || (err = sub(out, d->tmp, "tree")))
		return err;
	fd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = git(d, dir, index, -1, add);
	if (!err)
		err = git(d, dir, index, fd, write);
	n = err ? 0 : pread(fd, tree, GIT_TREE_HEX, 0);
	close(fd);
	if (err)
		return err;
	while (n > 0 && (tree[n - 1] == '\n' || tree[n - 1] == ' '))
		n--;
	if (n < 40)
		return -EIO;
	tree[n] = '\0';
	return 0;
}

static size_t count_files(const char *patch)
{
	char line[64];
	size_t n = 0;
	FILE *f = fopen(patch, "r");

	if (!f)
		return 0;
	/* "diff --git" starts each file's part; binary patches are base85,
	 * hunks start with ' ', '+', '-' or '@': no other line can. */
	while (fgets(line, sizeof(line), f)) {
		size_t l = strlen(line);
		if (!strncmp(line, "diff --git ", 11))
			n++;
		while (l == sizeof(line) - 1 && line[l - 1] != '\n' && fgets(line, sizeof(line), f))
			l = strlen(line); /* rest of a long line */
	}
	fclose(f);
	return n;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void wsdiff_done(struct wsdiff *d)
{
	if (d->tmp[0] && nftw(d->tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
		fprintf(stderr, "kosa8 %s: could not remove %s\n", d->cmd, d->tmp);
}

/* The workspaces' own .gitattributes could make `git add` store other bytes
 * than the files hold (eol conversion, filters, re-encoding): the patch
 * would not be what the guest wrote, and a guest could hide a change from
 * the reviewer.  The repository's info/attributes outranks them all. */
static int plain_attributes(const struct wsdiff *d)
{
	static const char attrs[] = "* -text -filter -ident !eol !working-tree-encoding\n";
	char info[PATH_MAX], path[PATH_MAX];
	int fd, err;

	if ((err = sub(info, d->gitdir, "info")) || (err = sub(path, info, "attributes")))
		return err;
	if (mkdir(info, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = write_all(fd, attrs, sizeof(attrs) - 1);
	close(fd);
	return err;
}

static int quota_fail(const struct wsdiff *d)
{
	return cli_fail(d->cmd, "the changes take more than the bound of %llu bytes of temporary "
			    "space (KOSA8_COPY_OUT_MAX raises it)", (unsigned long long)d->go.max_bytes);
}

/* Fetches the guest's /workspace and writes the patch from the host
 * workspace to it into d->patch. */
static int wsdiff_make(struct wsdiff *d)
{
	const char *tmpdir = getenv("TMPDIR");
	const char *init[] = {"init", "-q", "--bare", NULL};
	struct stat st;
	int fd, err;

	if (load_workspace(d))
		return 1;
	if (snprintf(d->tmp, sizeof(d->tmp), "%s/kosa8-diff-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp") >=
		    (int)sizeof(d->tmp) || !mkdtemp(d->tmp)) {
		d->tmp[0] = '\0';
		return cli_fail(d->cmd, "cannot create a temporary folder: %s", strerror(errno));
	}
	if (sub(d->guest, d->tmp, "workspace") || sub(d->gitdir, d->tmp, "git") ||
	    sub(d->patch, d->tmp, "patch") || mkdir(d->guest, 0700) < 0)
		return cli_fail(d->cmd, "%s", "temporary folder path too long");
	if (fetch(d, d->guest))
		return 1;
	err = git(d, NULL, NULL, -1, init);
	if (!err)
		err = plain_attributes(d);
	if (!err)
		err = tree_of(d, d->workspace, "index.host", d->ta);
	if (!err)
		err = tree_of(d, d->guest, "index.guest", d->tb);
	if (err == -ENOENT)
		return cli_fail(d->cmd, "%s", "git is needed to compare the workspaces (apt-get install git)");
	if (err == -EDQUOT)
		return quota_fail(d);
	if (err)
		return cli_fail(d->cmd, "%s", "git could not read the workspaces");
	fd = open(d->patch, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return cli_fail(d->cmd, "cannot write %s: %s", d->patch, strerror(errno));
	const char *diff[] = {"diff", "--binary", "--full-index", "--no-renames", "--no-color",
			      "--no-ext-diff", "--no-textconv", d->ta, d->tb, NULL};
	err = git(d, NULL, NULL, fd, diff);
	if (!err && fstat(fd, &st) < 0)
		err = -errno;
	close(fd);
	if (err == -EDQUOT)
		return quota_fail(d);
	if (err)
		return cli_fail(d->cmd, "%s", "git diff failed");
	d->patch_bytes = st.st_size;
	d->files = count_files(d->patch);
	return 0;
}

static int copy_fd(int in, int out)
{
	char buf[65536];
	ssize_t n;
	int err;

	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if ((err = write_all(out, buf, (size_t)n)))
			return err;
	}
	return 0;
}

/* The patch holds the guest's bytes (file contents and names): on a
 * terminal they are escaped (termsafe.h) like `kosa8 logs`; into a pipe
 * or file the patch goes exactly as it is, for git apply. */
static int show_patch(const struct wsdiff *d, int out)
{
	int in = open(d->patch, O_RDONLY | O_CLOEXEC), err;

	if (in < 0)
		return -errno;
	if (out == STDOUT_FILENO && isatty(out))
		err = term_copy_fd(in, stdout, TERM_KEEP_LINES, false);
	else
		err = copy_fd(in, out);
	close(in);
	return err;
}

/* `git apply --stat` of the patch: what --apply will change. */
static int show_stat(const struct wsdiff *d)
{
	const char *stat[] = {"apply", "--stat", "--summary", d->patch, NULL};

	fflush(stdout);
	return git(d, NULL, NULL, 1, stat);
}

/* ---- audit ---- */

static int audit_open(const char *cmd, struct audit_log **l)
{
	struct audit_opts o = {0};
	int err = audit_log_open(&o, l);

	if (err)
		return cli_fail(cmd, "the audit log cannot be written (%s): nothing exported",
			    audit_strerror(err));
	return 0;
}

static void audit_export(struct audit_log *l, const struct wsdiff *d, const char *how,
			 const char *dest)
{
	struct passwd *pw = getpwuid(getuid());
	char actor[300];
	cJSON *j = cJSON_CreateObject();
	char *det;
	struct audit_event ev = {d->name, actor, "workspace.export", NULL};
	int err;

	snprintf(actor, sizeof(actor), "cli:%s", pw ? pw->pw_name : "unknown");
	cJSON_AddStringToObject(j, "how", how);
	cJSON_AddStringToObject(j, "dest", dest);
	cJSON_AddStringToObject(j, "workspace", d->workspace);
	if (strcmp(how, "to"))
		cJSON_AddNumberToObject(j, "files", (double)d->files);
	if (strcmp(how, "to"))
		cJSON_AddNumberToObject(j, "patch_bytes", (double)d->patch_bytes);
	det = cJSON_PrintUnformatted(j);
	ev.details = det;
	if (!det || (err = audit_log_append(l, &ev, NULL)))
		cli_fail(d->cmd, "the export happened but its audit record failed: %s",
		     det ? audit_strerror(err) : "out of memory");
	free(det);
	cJSON_Delete(j);
}

/* ---- kosa8 diff ---- */

int cmd_diff(int argc, char **argv)
{
	static const struct option opts[] = {{"stat", no_argument, NULL, 's'},
					     {"help", no_argument, NULL, 'h'},
					     {0, 0, 0, 0}};
	struct wsdiff d = {.cmd = "diff"};
	bool stat = false;
	int c, rc = 1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 's') {
			stat = true;
		} else if (c == 'h') {
			cli_print_help(stdout, cli_find(cli_commands, "diff"), NULL);
			return 0;
		} else {
			return 2; /* getopt said what was wrong */
		}
	}
	if (optind != argc - 1)
		return cli_usage_error("diff", NULL);
	d.name = argv[optind];
	if (wsdiff_make(&d) == 0) {
		if (!d.files)
			fprintf(stderr, "kosa8 diff: no changes under /workspace\n");
		rc = (stat ? show_stat(&d) : show_patch(&d, STDOUT_FILENO)) ? 1 : 0;
	}
	wsdiff_done(&d);
	return rc;
}

/* ---- kosa8 export ---- */

/* path, or the part of it that exists, resolved; the rest appended. */
static int resolve_new(const char *path, char out[PATH_MAX])
{
	char head[PATH_MAX], *slash;
	const char *rest = "";

	if (strlen(path) >= PATH_MAX)
		return -ENAMETOOLONG;
	strcpy(head, path);
	while (!realpath(head, out)) {
		if (errno != ENOENT)
			return -errno;
		slash = strrchr(head, '/');
		if (!slash) {
			rest = path;
			if (!getcwd(out, PATH_MAX))
				return -errno;
			break;
		}
		*slash = '\0';
		rest = path + (slash - head) + 1;
		if (!head[0]) {
			strcpy(out, "/");
			break;
		}
	}
	if (*rest && strlen(out) + 1 + strlen(rest) < PATH_MAX) {
		if (strcmp(out, "/"))
			strcat(out, "/");
		strcat(out, rest);
	}
	return 0;
}

static bool is_inside(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/' || !strcmp(dir, "/"));
}

static int export_to(struct wsdiff *d, const char *dir, struct audit_log *l)
{
	char where[PATH_MAX];
	struct stat st;
	int err;

	if (load_workspace(d))
		return 1;
	if ((err = resolve_new(dir, where)))
		return cli_fail(d->cmd, "%s: %s", dir, strerror(-err));
	if (is_inside(where, d->workspace))
		return cli_fail(d->cmd, "%s is inside the workspace %s: use --apply to change the "
				    "workspace", dir, d->workspace);
	if (stat(where, &st) == 0) {
		if (!S_ISDIR(st.st_mode) || rmdir(where) < 0) /* only an empty folder will do */
			return cli_fail(d->cmd, "%s exists and is not an empty folder", dir);
	}
	if ((err = mkdir_p(where, 0755)))
		return cli_fail(d->cmd, "cannot create %s: %s", dir, strerror(-err));
	if (fetch(d, where))
		return 1;
	audit_export(l, d, "to", where);
	printf("exported /workspace of '%s' to %s\n", d->name, where);
	return 0;
}

static int export_patch(struct wsdiff *d, const char *file, struct audit_log *l)
{
	char where[PATH_MAX] = "-";
	int out = 1, err;

	if (strcmp(file, "-")) {
		if ((err = resolve_new(file, where)))
			return cli_fail(d->cmd, "%s: %s", file, strerror(-err));
	}
	if (wsdiff_make(d))
		return 1;
	if (strcmp(file, "-")) {
		out = open(where, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (out < 0)
			return cli_fail(d->cmd, "cannot create %s: %s", file,
				    errno == EEXIST ? "it exists (not overwritten)" : strerror(errno));
	}
	err = show_patch(d, out);
	if (out != 1 && close(out) < 0 && !err)
		err = -errno;
	if (err)
		return cli_fail(d->cmd, "writing %s: %s", file, strerror(-err));
	audit_export(l, d, "patch", where);
	fprintf(stderr, "kosa8 export: %zu changed file%s in %s (apply with: git apply %s)\n",
		d->files, d->files == 1 ? "" : "s", file, file);
	return 0;
}

/* ---- --apply: the guest's changes into the workspace, through the
 * guarded writer (no path through a link, nothing outside the workspace,
 * no special file or bit), never by running `git apply` there ---- */

/* One change of `git diff --raw -z`: ":OLDMODE NEWMODE OLD NEW S\0PATH\0". */
struct change {
	unsigned mode;   /* the new mode (octal), 0 for a deletion */
	char status;
	const char *path;
};

/* Reads the next change at *p (below end); 0, 1 at the end, -EBADMSG. */
static int next_change(const char **p, const char *end, struct change *c)
{
	const char *rec = *p, *nul;
	unsigned old;

	if (rec >= end)
		return 1;
	nul = memchr(rec, 0, (size_t)(end - rec));
	if (!nul || sscanf(rec, ":%o %o %*s %*s %c", &old, &c->mode, &c->status) != 3)
		return -EBADMSG;
	c->path = nul + 1;
	nul = memchr(c->path, 0, (size_t)(end - c->path));
	if (!nul)
		return -EBADMSG;
	*p = nul + 1;
	return 0;
}

/* Whether git's mode is one the writer takes: a file, an executable, a
 * symlink (or nothing, for a deletion).  Submodules are not. */
static bool mode_ok(unsigned mode)
{
	return mode == 0100644 || mode == 0100755 || mode == 0120000 || mode == 0;
}

/* The guest's copy of path (d->guest) written into the workspace. */
static int put_one(struct wsdiff *d, int from, struct gw *g, const struct change *c)
{
	char target[GW_MAX_PATH + 1];
	uint64_t size;
	int in, out, err = gw_parents(g, c->path);

	if (err)
		return err;
	if (c->mode == 0120000) {
		ssize_t n = gw_read_link(from, c->path, target, sizeof(target));
		return n < 0 ? (int)n : gw_symlink(g, c->path, target);
	}
	in = gw_open_read(from, c->path, d->go.max_bytes, &size);
	if (in < 0)
		return in;
	out = gw_file(g, c->path, size);
	err = out < 0 ? out : copy_fd(in, out);
	close(in);
	if (out >= 0) {
		int e2 = gw_file_done(g, out, c->mode & 0777);
		err = err ?: e2;
	}
	return err;
}

/* `git diff --raw -z` of the two trees into a malloc'd buffer; 1 after
 * saying why not. */
static int list_changes(struct wsdiff *d, uint8_t **buf, size_t *len)
{
	const char *raw[] = {"diff", "--raw", "-z", "--no-renames", "--no-abbrev", d->ta, d->tb, NULL};
	char list[PATH_MAX];
	int fd, err = sub(list, d->tmp, "raw");

	if (err || (fd = open(list, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		return cli_fail(d->cmd, "%s", "cannot list the changes");
	err = git(d, NULL, NULL, fd, raw);
	close(fd);
	if (err || (err = read_file(list, 64 * MiB, buf, len)))
		return cli_fail(d->cmd, "cannot list the changes: %s", strerror(-err));
	return 0;
}

/* Every change must be one the writer takes, before anything is written. */
static int check_changes(const struct wsdiff *d, const char *p, const char *end)
{
	struct change c;
	int err;

	while ((err = next_change(&p, end, &c)) == 0)
		if (!mode_ok(c.mode) || gw_path_check(c.path, strlen(c.path)))
			return cli_fail(d->cmd, "%s: %s: nothing was written", c.path, mode_ok(c.mode) ?
					"refused name" : "not a file or symlink (a nested git repository?)");
	if (err < 0)
		return cli_fail(d->cmd, "%s", "git listed the changes in a form not understood: "
				    "nothing was written");
	return 0;
}

/* Every change, deletions first (a file may replace a folder the guest
 * emptied), then the links made are checked as a whole. */
static int write_changes(struct wsdiff *d, struct gw *g, const char *buf, const char *end)
{
	struct change c;
	size_t done = 0;
	int err = 0, from = open(d->guest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (from < 0)
		return cli_fail(d->cmd, "%s: %s", d->guest, strerror(errno));
	for (int pass = 0; err == 0 && pass < 2; pass++)
		for (const char *p = buf; err == 0 && next_change(&p, end, &c) == 0;) {
			if ((c.status == 'D') != (pass == 0))
				continue;
			err = c.status == 'D' ? gw_remove(g, c.path) : put_one(d, from, g, &c);
			done += err == 0;
		}
	close(from);
	err = err ?: gw_finish(g);
	if (err)
		return cli_fail(d->cmd, "%s (%zu of the changes were written before it)", g->err, done);
	return 0;
}

static int apply_changes(struct wsdiff *d)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct gw g;
	int rc;

	if (list_changes(d, &buf, &len))
		return 1;
	const char *p = (const char *)buf, *end = p + len;
	rc = check_changes(d, p, end);
	if (rc == 0 && gw_open(&g, d->workspace, &d->go)) {
		rc = cli_fail(d->cmd, "%s", g.err);
	} else if (rc == 0) {
		rc = write_changes(d, &g, p, end);
		gw_close(&g);
	}
	free(buf);
	return rc;
}

static bool confirm(const char *ws)
{
	char line[16];

	printf("Apply these changes to %s? [y/N] ", ws);
	fflush(stdout);
	return fgets(line, sizeof(line), stdin) && (line[0] == 'y' || line[0] == 'Y');
}

static int export_apply(struct wsdiff *d, bool yes, struct audit_log *l)
{
	const char *check[] = {"apply", "--check", d->patch, NULL};

	if (!yes && !isatty(0))
		return cli_fail(d->cmd, "%s", "--apply changes your workspace: add --yes when not on a terminal");
	if (wsdiff_make(d))
		return 1;
	if (!d->files) {
		printf("no changes under /workspace: %s is left as it is\n", d->workspace);
		return 0;
	}
	printf("changes to %s:\n", d->workspace);
	show_stat(d);
	if (git(d, d->workspace, NULL, -1, check))
		return cli_fail(d->cmd, "the patch does not apply to %s (it changed on the host since "
				    "the sandbox copied it?); nothing was written. 'kosa8 export %s "
				    "--patch FILE' saves it for a manual merge", d->workspace, d->name);
	if (!yes && !confirm(d->workspace)) {
		printf("nothing written\n");
		return 1;
	}
	if (apply_changes(d))
		return 1;
	audit_export(l, d, "apply", d->workspace);
	printf("applied %zu changed file%s to %s\n", d->files, d->files == 1 ? "" : "s", d->workspace);
	return 0;
}

int cmd_export(int argc, char **argv)
{
	static const struct option opts[] = {{"to", required_argument, NULL, 't'},
					     {"patch", required_argument, NULL, 'p'},
					     {"apply", no_argument, NULL, 'a'},
					     {"yes", no_argument, NULL, 'y'},
					     {"help", no_argument, NULL, 'h'},
					     {0, 0, 0, 0}};
	struct wsdiff d = {.cmd = "export"};
	const char *to = NULL, *patch = NULL;
	bool apply = false, yes = false;
	struct audit_log *l = NULL;
	int c, modes, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': to = optarg; break;
		case 'p': patch = optarg; break;
		case 'a': apply = true; break;
		case 'y': yes = true; break;
		default:
			if (c != 'h')
				return 2; /* getopt said what was wrong */
			cli_print_help(stdout, cli_find(cli_commands, "export"), NULL);
			return 0;
		}
	}
	modes = !!to + !!patch + apply;
	if (optind != argc - 1 || modes != 1)
		return cli_usage_error("export", NULL);
	d.name = argv[optind];
	if (audit_open(d.cmd, &l))
		return 1;
	if (to)
		rc = export_to(&d, to, l);
	else if (patch)
		rc = export_patch(&d, patch, l);
	else
		rc = export_apply(&d, yes, l);
	wsdiff_done(&d);
	audit_log_close(l);
	return rc;
}
