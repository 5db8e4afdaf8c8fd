#include "supervisor/template.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "disk/disk.h"
#include "sandbox/checkpoints.h"
#include "sandbox/sandbox.h"
#include "vmm/jail.h"
#include "vmm/snapshot.h"

/* Bumped when what a template holds changes meaning. */
#define TEMPLATE_FORMAT 1
#define HASH_CHUNK (1u << 20)
#define TEMPLATE_JSON_MAX (64 * 1024)

static int hash_file(const char *path, uint8_t sha[32])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t *buf = malloc(HASH_CHUNK);
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	ssize_t n;

	if (fd < 0)
		rc = -errno;
	else if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		rc = -ENOMEM;
	while (!rc && (n = read(fd, buf, HASH_CHUNK)) != 0) {
		if (n < 0 && errno != EINTR)
			rc = -errno;
		else if (n > 0 && !EVP_DigestUpdate(ctx, buf, (size_t)n))
			rc = -EIO;
	}
	if (!rc && !EVP_DigestFinal_ex(ctx, sha, NULL))
		rc = -EIO;
	if (fd >= 0)
		close(fd);
	free(buf);
	EVP_MD_CTX_free(ctx);
	return rc;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * n] = 0;
}

int template_key_text(const struct template_inputs *in, const uint8_t kernel_sha[32],
		      const uint8_t image_id[16], const uint8_t exe_sha[32], char *buf, size_t len)
{
	char k[65], im[33], ex[65];
	int n;

	hex(kernel_sha, 32, k);
	hex(image_id, 16, im);
	hex(exe_sha, 32, ex);
	n = snprintf(buf, len,
		     "kosa8-template %d\nsnapshot %d\nkernel %s\nimage %s\nkosa8 %s\ncpus %d\n"
		     "mem %llu\ncmdline " SANDBOX_CMDLINE_FMT "\n",
		     TEMPLATE_FORMAT, SNAP_VERSION, k, im, ex, in->cpus, (unsigned long long)in->mem,
		     "HOSTNAME");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* kosa8 and the VMM it runs (kosa8-vmm: the device model whose state the
 * template holds), one hash over both. */
static int hash_exes(const char *exe, uint8_t sha[32], char *err, size_t errlen)
{
	uint8_t both[64];
	char vmm[PATH_MAX];
	unsigned int n = 0;
	int rc;

	if ((rc = hash_file(exe, both))) {
		snprintf(err, errlen, "kosa8 binary %s: %s", exe, strerror(-rc));
		return rc;
	}
	if ((rc = kosa8_vmm_path(exe, vmm, sizeof(vmm))) || (rc = hash_file(vmm, both + 32))) {
		snprintf(err, errlen, "the VMM next to %s: %s", exe, strerror(-rc));
		return rc;
	}
	if (!EVP_Digest(both, sizeof(both), sha, &n, EVP_sha256(), NULL) || n != 32)
		return -EIO;
	return 0;
}

int template_key(const struct template_inputs *in, char key[TEMPLATE_KEY_LEN + 1], char *err,
		 size_t errlen)
{
	uint8_t ksha[32], id[16], esha[32], sum[32];
	char text[1024];
	unsigned int n = 0;
	int rc;

	if ((rc = hash_file(in->kernel, ksha))) {
		snprintf(err, errlen, "guest kernel %s: %s", in->kernel, strerror(-rc));
		return rc;
	}
	if ((rc = hash_exes(in->exe, esha, err, errlen)))
		return rc;
	if ((rc = disk_base_id(in->image, id, err, errlen)))
		return rc;
	if ((rc = template_key_text(in, ksha, id, esha, text, sizeof(text))))
		return rc;
	if (!EVP_Digest(text, strlen(text), sum, &n, EVP_sha256(), NULL) || n != 32)
		return -EIO;
	hex(sum, 32, key);
	return 0;
}

bool template_key_valid(const char *key)
{
	size_t i;

	for (i = 0; key[i]; i++)
		if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
			return false;
	return i == TEMPLATE_KEY_LEN;
}

void template_name(const char *key, char name[TEMPLATE_NAME_LEN])
{
	snprintf(name, TEMPLATE_NAME_LEN, "tpl-%.12s", key);
}

int template_root(char *buf, size_t len, bool create, char *why, size_t wlen)
{
	char state[PATH_MAX];
	int rc;

	if ((rc = kosa8_state_dir(state, sizeof(state))))
		return snprintf(why, wlen, "no state directory"), rc;
	if (snprintf(buf, len, "%s/" TEMPLATE_DIR, state) >= (int)len)
		return snprintf(why, wlen, "the state directory's path is too long"), -ENAMETOOLONG;
	/* The state root itself is checked the way sandboxes' is. */
	if (create && (rc = mkdir_p(state, 0700)))
		return snprintf(why, wlen, "cannot create %s: %s", state, strerror(-rc)), rc;
	return private_dir(buf, create, why, wlen);
}

int template_lock(const char *root, const char *key, bool *waited)
{
	char path[PATH_MAX];
	int fd;

	*waited = false;
	if (!template_key_valid(key))
		return -EINVAL;
	if (snprintf(path, sizeof(path), "%s/%s.lock", root, key) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;
	*waited = true;
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int rc = -errno;
			close(fd);
			return rc;
		}
	}
	return fd;
}

static int key_dir(char *buf, size_t len, const char *root, const char *key)
{
	if (!template_key_valid(key))
		return -EINVAL;
	return snprintf(buf, len, "%s/%s", root, key) >= (int)len ? -ENAMETOOLONG : 0;
}

/* A file the sandboxes read: regular, not a link, the maker's (root's as
 * root), and writable by nobody. */
static int sealed_file(const char *dir, const char *rel, char *why, size_t wlen)
{
	char path[PATH_MAX];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/%s", dir, rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? -ENOENT : (snprintf(why, wlen, "%s: %s", path, strerror(errno)), -errno);
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0222)) {
		snprintf(why, wlen, "%s is not a read-only file of yours (mode %03o, uid %u): "
			 "remove the template with 'kosa8 image prune --all'", path,
			 (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
		return -EPERM;
	}
	return 0;
}

static const char *const sealed[] = {CKPT_DIR "/" TEMPLATE_CKPT "/state",
				     CKPT_DIR "/" TEMPLATE_CKPT "/memory", "disk.k8d"};

int template_parse(const char *text, size_t len, const char *key, char *kernel, char *image,
		   uint64_t *mem, int *cpus)
{
	cJSON *o = cJSON_ParseWithLength(text, len);
	const cJSON *kk = cJSON_GetObjectItemCaseSensitive(o, "key"),
		    *k = cJSON_GetObjectItemCaseSensitive(o, "kernel"),
		    *i = cJSON_GetObjectItemCaseSensitive(o, "image"),
		    *m = cJSON_GetObjectItemCaseSensitive(o, "mem"),
		    *c = cJSON_GetObjectItemCaseSensitive(o, "cpus");
	int rc = -EBADMSG;

	if (cJSON_IsString(kk) && !strcmp(kk->valuestring, key) && cJSON_IsString(k) &&
	    cJSON_IsString(i) && k->valuestring[0] == '/' && i->valuestring[0] == '/' &&
	    strlen(k->valuestring) < PATH_MAX && strlen(i->valuestring) < PATH_MAX &&
	    cJSON_IsNumber(m) && m->valuedouble >= 0 && m->valuedouble < 1e15 && cJSON_IsNumber(c) &&
	    c->valuedouble >= 1 && c->valuedouble <= 64) {
		strcpy(kernel, k->valuestring);
		strcpy(image, i->valuestring);
		*mem = (uint64_t)m->valuedouble;
		*cpus = (int)c->valuedouble;
		rc = 0;
	}
	cJSON_Delete(o);
	return rc;
}

int template_load(const char *root, const char *key, char *kernel, char *image, uint64_t *mem,
		  int *cpus)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	if ((rc = key_dir(path, sizeof(path), root, key)) ||
	    strlen(path) + sizeof("/" TEMPLATE_FILE) > sizeof(path))
		return rc ? rc : -ENAMETOOLONG;
	strcat(path, "/" TEMPLATE_FILE);
	if ((rc = read_file(path, TEMPLATE_JSON_MAX, &buf, &len)))
		return rc;
	rc = template_parse((const char *)buf, len, key, kernel, image, mem, cpus);
	free(buf);
	return rc;
}

int template_check(const char *root, const char *key, char *why, size_t wlen)
{
	char dir[PATH_MAX], kernel[PATH_MAX], image[PATH_MAX];
	uint64_t mem;
	int cpus, rc;

	if ((rc = key_dir(dir, sizeof(dir), root, key)))
		return snprintf(why, wlen, "bad template key"), rc;
	if ((rc = private_dir(dir, false, why, wlen)))
		return rc;
	/* template.json is written last: without it the maker did not finish. */
	if ((rc = template_load(root, key, kernel, image, &mem, &cpus)) == -ENOENT)
		return snprintf(why, wlen, "template %.12s is half-made", key), -ENOENT;
	if (rc)
		return snprintf(why, wlen, "template %.12s: damaged %s", key, TEMPLATE_FILE), rc;
	for (size_t j = 0; j < ARRAY_SIZE(sealed); j++)
		if ((rc = sealed_file(dir, sealed[j], why, wlen)))
			return rc == -ENOENT ? (snprintf(why, wlen, "template %.12s lacks %s", key,
							 sealed[j]), -ENOENT) : rc;
	return 0;
}

/* Read-only for everyone; as root the VMMs read it through their group
 * (vmm/jail.h), so root's and the group's. */
static int seal_file(const char *dir, const char *rel, char *why, size_t wlen)
{
	char path[PATH_MAX];
	bool root = geteuid() == 0;

	if (snprintf(path, sizeof(path), "%s/%s", dir, rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((root && lchown(path, 0, JAIL_VMM_GID) < 0) || chmod(path, root ? 0440 : 0400) < 0) {
		snprintf(why, wlen, "cannot make %s read-only: %s", path, strerror(errno));
		return -errno;
	}
	return 0;
}

static int write_template_json(const char *dir, const char *key,
			       const struct template_inputs *in)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	cJSON *o = cJSON_CreateObject();
	char *text;
	int fd, rc = 0;

	cJSON_AddStringToObject(o, "key", key);
	cJSON_AddStringToObject(o, "kernel", in->kernel);
	cJSON_AddStringToObject(o, "image", in->image);
	cJSON_AddNumberToObject(o, "mem", (double)in->mem);
	cJSON_AddNumberToObject(o, "cpus", in->cpus);
	text = cJSON_Print(o);
	cJSON_Delete(o);
	if (!text)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/" TEMPLATE_FILE, dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0 && close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (!rc)
		rc = sync_dir_of(path);
	if (rc)
		unlink(tmp);
	free(text);
	return rc;
}

int template_seal(const char *root, const char *key, const struct template_inputs *in,
		  char *why, size_t wlen)
{
	char dir[PATH_MAX];
	int rc;

	if ((rc = key_dir(dir, sizeof(dir), root, key)))
		return snprintf(why, wlen, "bad template key"), rc;
	for (size_t j = 0; j < ARRAY_SIZE(sealed); j++)
		if ((rc = seal_file(dir, sealed[j], why, wlen)))
			return rc;
	if ((rc = write_template_json(dir, key, in)))
		snprintf(why, wlen, "cannot write %s/" TEMPLATE_FILE ": %s", dir, strerror(-rc));
	return rc;
}
