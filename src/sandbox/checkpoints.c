#include "sandbox/checkpoints.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

bool ckpt_id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n < 2 || n > 10 || id[0] != 'c' || id[1] == '0')
		return false;
	for (size_t i = 1; i < n; i++)
		if (id[i] < '0' || id[i] > '9')
			return false;
	return true;
}

bool ckpt_message_valid(const char *msg)
{
	size_t n = strlen(msg);

	if (n >= CKPT_MSG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f)
			return false;
	return true;
}

static int bad(char *err, size_t errlen, const char *what)
{
	if (err)
		snprintf(err, errlen, "checkpoint metadata: %s", what);
	return -EBADMSG;
}

/* A string member that must fit in len bytes (absent: "" when optional). */
static int get_str(const cJSON *o, const char *key, char *out, size_t len, bool optional)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!v && optional) {
		out[0] = 0;
		return 0;
	}
	if (!cJSON_IsString(v) || strlen(v->valuestring) >= len)
		return -1;
	memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

/* The largest number a record holds exactly through cJSON (see parse_fields). */
#define CKPT_NUM_MAX 999999999999999.0

/* A number member that is a whole number in [0, max] (absent: 0). */
static int get_num(const cJSON *o, const char *key, double max, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	*out = 0;
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
	    v->valuedouble > max)
		return -1;
	*out = v->valuedouble;
	return 0;
}

int ckpt_meta_chain_add(struct ckpt_meta *m, const char *path)
{
	if (m->nchain >= CKPT_MAX_CHAIN)
		return -E2BIG;
	if (!(m->chain[m->nchain] = strdup(path)))
		return -ENOMEM;
	m->nchain++;
	return 0;
}

static int parse_chain(const cJSON *o, struct ckpt_meta *m, char *err, size_t errlen)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "chain"), *e;

	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > CKPT_MAX_CHAIN)
		return bad(err, errlen, "\"chain\" is not a list of at most 256 paths");
	cJSON_ArrayForEach(e, arr) {
		if (!cJSON_IsString(e) || e->valuestring[0] != '/' ||
		    strlen(e->valuestring) >= PATH_MAX || strchr(e->valuestring, '\n'))
			return bad(err, errlen, "a \"chain\" entry is not an absolute path");
		if (ckpt_meta_chain_add(m, e->valuestring))
			return -ENOMEM;
	}
	return 0;
}

static int parse_fields(const cJSON *o, struct ckpt_meta *m, char *err, size_t errlen)
{
	double created, mem, paused, next;

	if (!cJSON_IsObject(o))
		return bad(err, errlen, "not a JSON object");
	if (get_str(o, "id", m->id, sizeof(m->id), false) ||
	    (strcmp(m->id, CKPT_CURRENT) && !ckpt_id_valid(m->id)))
		return bad(err, errlen, "\"id\" is missing or not cN");
	if (get_str(o, "parent", m->parent, sizeof(m->parent), true) ||
	    (m->parent[0] && !ckpt_id_valid(m->parent)))
		return bad(err, errlen, "\"parent\" is not cN");
	if (get_str(o, "message", m->message, sizeof(m->message), true) ||
	    !ckpt_message_valid(m->message))
		return bad(err, errlen, "\"message\" is too long or has control characters");
	if (get_str(o, "top", m->top, sizeof(m->top), true) || (m->top[0] && m->top[0] != '/'))
		return bad(err, errlen, "\"top\" is not an absolute path");
	/* Below 10^15: cJSON prints numbers with 15 significant digits when
	 * that reads back within its epsilon, so larger whole numbers would
	 * not survive a save and load (found by fuzz/fuzz_ckpt_meta). */
	if (get_num(o, "created", CKPT_NUM_MAX, &created) ||
	    get_num(o, "memory_bytes", CKPT_NUM_MAX, &mem) ||
	    get_num(o, "paused_ms", 1e12, &paused) || get_num(o, "next", 999999999.0, &next))
		return bad(err, errlen, "a number is negative, too large or not a number");
	m->created = (int64_t)created;
	m->memory_bytes = (uint64_t)mem;
	m->paused_ms = paused;
	m->next = (unsigned)next;
	return parse_chain(o, m, err, errlen);
}

int ckpt_meta_parse(const char *text, size_t len, struct ckpt_meta *m, char *err, size_t errlen)
{
	cJSON *o;
	int rc;

	memset(m, 0, sizeof(*m));
	if (len > CKPT_META_MAX)
		return bad(err, errlen, "file too large");
	o = cJSON_ParseWithLength(text, len);
	if (!o)
		return bad(err, errlen, "not JSON (damaged file?)");
	rc = parse_fields(o, m, err, errlen);
	cJSON_Delete(o);
	if (rc)
		ckpt_meta_free(m);
	return rc;
}

void ckpt_meta_free(struct ckpt_meta *m)
{
	for (int i = 0; i < m->nchain; i++)
		free(m->chain[i]);
	m->nchain = 0;
}

char *ckpt_meta_format(const struct ckpt_meta *m)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	char *text;

	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "id", m->id);
	if (m->parent[0])
		cJSON_AddStringToObject(o, "parent", m->parent);
	if (m->created)
		cJSON_AddNumberToObject(o, "created", (double)m->created);
	if (m->message[0])
		cJSON_AddStringToObject(o, "message", m->message);
	if (m->memory_bytes)
		cJSON_AddNumberToObject(o, "memory_bytes", (double)m->memory_bytes);
	if (m->paused_ms > 0)
		cJSON_AddNumberToObject(o, "paused_ms", m->paused_ms);
	if (m->top[0])
		cJSON_AddStringToObject(o, "top", m->top);
	if (m->next)
		cJSON_AddNumberToObject(o, "next", m->next);
	if (m->nchain && (arr = cJSON_AddArrayToObject(o, "chain")))
		for (int i = 0; i < m->nchain; i++)
			cJSON_AddItemToArray(arr, cJSON_CreateString(m->chain[i]));
	text = cJSON_Print(o);
	cJSON_Delete(o);
	return text;
}

static int meta_path(char *buf, size_t len, const char *state_dir, const char *id)
{
	int n = snprintf(buf, len, "%s/" CKPT_META_DIR "/%s.json", state_dir, id);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ckpt_meta_load(const char *state_dir, const char *id, struct ckpt_meta *m, char *err,
		   size_t errlen)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	if ((rc = meta_path(path, sizeof(path), state_dir, id)))
		return rc;
	if ((rc = read_file(path, CKPT_META_MAX, &buf, &len))) {
		if (err)
			snprintf(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	rc = ckpt_meta_parse((const char *)buf, len, m, err, errlen);
	if (!rc && strcmp(m->id, id)) {
		ckpt_meta_free(m);
		rc = bad(err, errlen, "the file's \"id\" is not its name");
	}
	free(buf);
	return rc;
}

int ckpt_meta_save(const char *state_dir, const struct ckpt_meta *m)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], dir[PATH_MAX];
	char *text = ckpt_meta_format(m);
	int fd, rc = 0;

	if (!text)
		return -ENOMEM;
	snprintf(dir, sizeof(dir), "%s/" CKPT_META_DIR, state_dir);
	if ((rc = mkdir_p(dir, 0700)) || (rc = meta_path(path, sizeof(path), state_dir, m->id)))
		goto out;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	if (write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
out:
	free(text);
	return rc;
}

static int by_number(const void *a, const void *b)
{
	long x = strtol(((const struct ckpt_meta *)a)->id + 1, NULL, 10);
	long y = strtol(((const struct ckpt_meta *)b)->id + 1, NULL, 10);

	return (x > y) - (x < y);
}

int ckpt_meta_list(const char *state_dir, struct ckpt_meta **out, int *n)
{
	char dir[PATH_MAX], id[CKPT_ID_LEN], err[256];
	struct ckpt_meta *v = NULL, *nv;
	struct dirent *e;
	DIR *d;
	int cnt = 0, cap = 0;

	*out = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/" CKPT_META_DIR, state_dir);
	if (!(d = opendir(dir)))
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 6 || l - 5 >= sizeof(id) || strcmp(e->d_name + l - 5, ".json"))
			continue;
		memcpy(id, e->d_name, l - 5);
		id[l - 5] = 0;
		if (!ckpt_id_valid(id))
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			if (!(nv = realloc(v, (size_t)cap * sizeof(*v))))
				break;
			v = nv;
		}
		if (ckpt_meta_load(state_dir, id, &v[cnt], err, sizeof(err)) == 0)
			cnt++;
		else
			log_warn("checkpoint %s skipped: %s", id, err);
	}
	closedir(d);
	if (cnt)
		qsort(v, (size_t)cnt, sizeof(*v), by_number);
	*out = v;
	*n = cnt;
	return 0;
}
