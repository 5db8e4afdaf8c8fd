#include "sandbox/sandbox.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define CFG_MAX_BYTES (64 * 1024)

bool sandbox_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SANDBOX_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '-' && c != '_' && c != '.')))
			return false;
	}
	return true;
}

int sandbox_path(char *buf, size_t len, const char *dir, const char *file)
{
	int n = snprintf(buf, len, "%s/%s", dir, file);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int sandbox_state_dir(const char *name, char *buf, size_t len)
{
	char base[PATH_MAX];
	int err;

	if (!sandbox_name_valid(name))
		return -EINVAL;
	if ((err = kosa8_state_dir(base, sizeof(base))))
		return err;
	if (snprintf(buf, len, "%s/sandboxes/%s", base, name) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

int sandbox_run_dir(const char *name, char *buf, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	int n;

	if (!sandbox_name_valid(name))
		return -EINVAL;
	/* unix socket paths are limited to 108 bytes: keep this one short. */
	if (rt && *rt == '/' && strlen(rt) < 48)
		n = snprintf(buf, len, "%s/kosa8/%s", rt, name);
	else
		n = snprintf(buf, len, "/tmp/kosa8-%u/%s", (unsigned)getuid(), name);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int sandbox_run_dir_private(const char *name, bool create, char *buf, size_t len, char *why,
			    size_t wlen)
{
	char base[PATH_MAX];
	int err;

	if ((err = sandbox_run_dir(name, buf, len)))
		return snprintf(why, wlen, "bad sandbox name or run directory path"), err;
	snprintf(base, sizeof(base), "%s", buf);
	*strrchr(base, '/') = '\0';
	if ((err = private_dir(base, create, why, wlen)))
		return err;
	return private_dir(buf, create, why, wlen);
}

/* The state root: the user's, nobody else may write into it. */
static int state_root_ok(const char *root, bool create, char *why, size_t wlen)
{
	struct stat st;
	int err;

	if (create && (err = mkdir_p(root, 0700)))
		return snprintf(why, wlen, "cannot create %s: %s", root, strerror(-err)), err;
	if (stat(root, &st) < 0)
		return snprintf(why, wlen, "%s: %s", root, strerror(errno)), -errno;
	if (!S_ISDIR(st.st_mode))
		return snprintf(why, wlen, "%s is not a directory", root), -ENOTDIR;
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return snprintf(why, wlen, "%s belongs to uid %u (mode %03o): it must be yours and writable by you alone",
				root, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777)), -EPERM;
	return 0;
}

int sandbox_state_dir_private(const char *name, bool create, char *buf, size_t len, char *why,
			      size_t wlen)
{
	char root[PATH_MAX], sub[PATH_MAX + 16];
	int err;

	if ((err = sandbox_state_dir(name, buf, len)) || (err = kosa8_state_dir(root, sizeof(root))))
		return snprintf(why, wlen, "bad sandbox name or state directory path"), err;
	snprintf(sub, sizeof(sub), "%s/sandboxes", root);
	if ((err = state_root_ok(root, create, why, wlen)) || (err = private_dir(sub, create, why, wlen)))
		return err;
	return private_dir(buf, create, why, wlen);
}

static void put_str(cJSON *o, const char *k, const char *v) { cJSON_AddStringToObject(o, k, v); }

/* A list of strings kept as n fixed-size rows of `stride` bytes. */
static void put_list(cJSON *o, const char *k, const char *rows, size_t stride, int n)
{
	cJSON *a = cJSON_AddArrayToObject(o, k);

	for (int i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(rows + (size_t)i * stride));
}

/* Absent: empty (files from before these lists existed). */
static int get_list(const cJSON *o, const char *k, char *rows, size_t stride, int max, int *n)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k), *v;

	*n = 0;
	if (!a)
		return 0;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > max)
		return -EBADMSG;
	cJSON_ArrayForEach(v, a) {
		if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= stride)
			return -EBADMSG;
		memcpy(rows + (size_t)*n * stride, v->valuestring, strlen(v->valuestring) + 1);
		(*n)++;
	}
	return 0;
}

/* CIDs a pick hands out: 3 to 0xffff, so that the VMM's uid, made of the
 * CID's low 16 bits (jail_vmm_uid), is a sandbox's own too.  The VMM
 * takes up to 0xfffffffe (older sandbox.json files may hold such). */
#define SANDBOX_CID_SCAN SANDBOX_MAX_SANDBOXES
#define SANDBOX_MAX_CID 0xfffffffeu

int sandbox_cfg_save(const char *state_dir, const struct sandbox_cfg *c)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	cJSON *o = cJSON_CreateObject();
	char *text = NULL;
	int fd = -1, err = 0;

	if (!o)
		return -ENOMEM;
	put_str(o, "name", c->name);
	put_str(o, "kernel", c->kernel);
	put_str(o, "image", c->image);
	put_str(o, "workspace", c->workspace);
	cJSON_AddNumberToObject(o, "mem", (double)c->mem);
	cJSON_AddNumberToObject(o, "cpus", c->cpus);
	cJSON_AddNumberToObject(o, "cid", c->cid ? c->cid : SANDBOX_FIRST_CID);
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddBoolToObject(o, "workspace_copied", c->workspace_copied);
	put_list(o, "allow", c->allow[0], sizeof(c->allow[0]), c->nallow);
	put_list(o, "secrets", c->secrets[0], sizeof(c->secrets[0]), c->nsecrets);
	text = cJSON_Print(o);
	if (!text || (err = sandbox_path(path, sizeof(path), state_dir, "sandbox.json"))) {
		err = err ? err : -ENOMEM;
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	/* Write then rename: a crash leaves the old file or the new, never half. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0 ||
	    rename(tmp, path) < 0)
		err = -errno;
out:
	if (fd >= 0)
		close(fd);
	free(text);
	cJSON_Delete(o);
	return err;
}

static int get_str(const cJSON *o, const char *k, char *dst, size_t len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	if (!cJSON_IsString(v) || strlen(v->valuestring) >= len)
		return -EBADMSG;
	memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

static int get_num(const cJSON *o, const char *k, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	if (!cJSON_IsNumber(v))
		return -EBADMSG;
	*out = v->valuedouble;
	return 0;
}

int sandbox_cfg_load(const char *state_dir, struct sandbox_cfg *c)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	size_t len;
	cJSON *o = NULL;
	double mem, cpus, created, cid;
	int err;

	memset(c, 0, sizeof(*c));
	if ((err = sandbox_path(path, sizeof(path), state_dir, "sandbox.json")))
		return err;
	if ((err = read_file(path, CFG_MAX_BYTES, &buf, &len)))
		return err;
	o = cJSON_ParseWithLength((const char *)buf, len);
	if (!o || (err = get_str(o, "name", c->name, sizeof(c->name))) ||
	    (err = get_str(o, "kernel", c->kernel, sizeof(c->kernel))) ||
	    (err = get_str(o, "image", c->image, sizeof(c->image))) ||
	    (err = get_str(o, "workspace", c->workspace, sizeof(c->workspace))) ||
	    (err = get_num(o, "mem", &mem)) || (err = get_num(o, "cpus", &cpus)) ||
	    (err = get_num(o, "created", &created)) ||
	    (err = get_list(o, "allow", c->allow[0], sizeof(c->allow[0]), SANDBOX_ALLOW_MAX, &c->nallow)) ||
	    (err = get_list(o, "secrets", c->secrets[0], sizeof(c->secrets[0]), SANDBOX_SECRETS_MAX,
			    &c->nsecrets))) {
		err = -EBADMSG;
		goto out;
	}
	c->mem = (uint64_t)mem;
	c->cpus = (int)cpus;
	c->created = (int64_t)created;
	c->workspace_copied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "workspace_copied"));
	/* No cid: a sandbox made before they were kept, on the VMM's default.
	 * One that is there must be a whole number in the VMM's range. */
	c->cid = SANDBOX_FIRST_CID;
	if (cJSON_GetObjectItemCaseSensitive(o, "cid"))
		c->cid = get_num(o, "cid", &cid) == 0 && cid >= SANDBOX_FIRST_CID && cid <= SANDBOX_MAX_CID &&
				 cid == (double)(uint32_t)cid ? (uint32_t)cid : 0;
	if (!sandbox_name_valid(c->name) || c->cpus < 1 || c->mem == 0 || !c->cid)
		err = -EBADMSG;
out:
	cJSON_Delete(o);
	free(buf);
	return err;
}

/* fn(name, ctx) for each valid name in <state>/SUB. */
static int list_under(const char *sub, void (*fn)(const char *name, void *ctx), void *ctx)
{
	char base[PATH_MAX], dir[PATH_MAX + 16];
	struct dirent *e;
	DIR *d;
	int err;

	if ((err = kosa8_state_dir(base, sizeof(base))))
		return err;
	snprintf(dir, sizeof(dir), "%s/%s", base, sub);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d)))
		if (sandbox_name_valid(e->d_name))
			fn(e->d_name, ctx);
	closedir(d);
	return 0;
}

int sandbox_list(void (*fn)(const char *name, void *ctx), void *ctx)
{
	return list_under("sandboxes", fn, ctx);
}

struct cid_scan {
	uint8_t used[(SANDBOX_CID_SCAN + 7) / 8];
};

static void note_cid_in(const char *dir, struct cid_scan *scan)
{
	struct sandbox_cfg c;

	if (sandbox_cfg_load(dir, &c))
		return;
	if (c.cid - SANDBOX_FIRST_CID < SANDBOX_CID_SCAN)
		scan->used[(c.cid - SANDBOX_FIRST_CID) / 8] |= (uint8_t)(1u << ((c.cid - SANDBOX_FIRST_CID) % 8));
}

static void note_cid(const char *name, void *ctx)
{
	char dir[PATH_MAX];

	if (!sandbox_state_dir(name, dir, sizeof(dir)))
		note_cid_in(dir, ctx);
}

/* A template being made runs a VMM with a CID of its own too (its
 * sandbox.json in <state>/templates/KEY/): as root the CID picks the
 * VMM's jail uid, and two VMMs must never share one. */
static void note_template_cid(const char *key, void *ctx)
{
	char base[PATH_MAX], dir[PATH_MAX + 300];

	if (kosa8_state_dir(base, sizeof(base)) == 0 &&
	    snprintf(dir, sizeof(dir), "%s/templates/%s", base, key) < (int)sizeof(dir))
		note_cid_in(dir, ctx);
}

uint32_t sandbox_cid_pick(void)
{
	struct cid_scan scan;

	memset(&scan, 0, sizeof(scan));
	sandbox_list(note_cid, &scan);
	list_under("templates", note_template_cid, &scan);
	for (uint32_t i = 0; i < SANDBOX_CID_SCAN; i++)
		if (!(scan.used[i / 8] & (1u << (i % 8))))
			return SANDBOX_FIRST_CID + i;
	return 0;
}
