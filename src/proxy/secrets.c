/* Secret store and per-sandbox secret sets (secrets.h). */
#include "proxy/secrets.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "common/util.h"
#include "proxy/redact.h"

#define SECRET_FILE_MAX (64 * 1024)
#define PLACEHOLDERS_FILE "secret-placeholders.json"

struct secret_set {
	struct secret *items;
	size_t n;
	char **env;   /* n + 1 entries, NULL-terminated */
	struct redact_set *redact;
};

uint16_t secret_host_port(const struct secret *s, size_t i)
{
	return s->ports[i] ? s->ports[i] : SECRET_PORT_DEFAULT;
}

int secret_add_host(struct secret *s, const char *spec)
{
	char host[POLICY_NAME_MAX + 8];
	const char *colon = strrchr(spec, ':');
	uint16_t port = SECRET_PORT_DEFAULT;

	if (s->nhosts == SECRET_HOSTS_MAX)
		return -E2BIG;
	if (colon && policy_parse_port(colon + 1, &port))
		return -EINVAL;
	if ((size_t)snprintf(host, sizeof(host), "%.*s", (int)(colon ? (size_t)(colon - spec) : strlen(spec)),
			     spec) >= sizeof(host) ||
	    policy_normalise_name(host, s->hosts[s->nhosts], sizeof(s->hosts[0])))
		return -EINVAL;
	s->ports[s->nhosts++] = port;
	return 0;
}

bool secret_name_valid(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > SECRET_NAME_MAX || isdigit((unsigned char)name[0]))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!isalnum((unsigned char)name[i]) && name[i] != '_')
			return false;
	}
	return true;
}

bool secret_value_valid(const char *value, size_t len)
{
	if (len == 0 || len > SECRET_VALUE_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)value[i];
		if (c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

/* An HTTP field name (RFC 9110 token). */
static bool header_name_valid(const char *h)
{
	static const char extra[] = "!#$%&'*+-.^_`|~";

	if (!*h || strlen(h) > SECRET_HEADER_MAX)
		return false;
	for (; *h; h++) {
		if (!isalnum((unsigned char)*h) && !strchr(extra, *h))
			return false;
	}
	return true;
}

/* A format has exactly one "{}" and nothing that cannot go in a header. */
static bool format_valid(const char *f)
{
	const char *p = strstr(f, "{}");

	if (!p || strstr(p + 2, "{}") || strlen(f) > SECRET_FORMAT_MAX)
		return false;
	return secret_value_valid(f, strlen(f));
}

int secret_store_dir(char *buf, size_t len, bool create)
{
	char base[PATH_MAX];
	int err = kosa8_config_dir(base, sizeof(base));

	if (err)
		return err;
	if ((size_t)snprintf(buf, len, "%s/secrets", base) >= len)
		return -ENAMETOOLONG;
	if (create) {
		if ((err = mkdir_p(buf, 0700)))
			return err;
		/* mkdir_p leaves an existing folder alone: tighten it. */
		if (chmod(buf, 0700))
			return -errno;
	}
	return 0;
}

static int secret_path(const char *name, char *buf, size_t len, bool create)
{
	char dir[PATH_MAX];
	int err;

	if (!secret_name_valid(name))
		return -EINVAL;
	if ((err = secret_store_dir(dir, sizeof(dir), create)))
		return err;
	if ((size_t)snprintf(buf, len, "%s/%s.json", dir, name) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* Writes text to path through a 0600 temporary file and rename, so a
 * reader never sees half a file and the value is never world-readable. */
static int write_private_file(const char *path, const char *text)
{
	char tmp[PATH_MAX];
	int fd, err = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) || (err = write_all(fd, text, strlen(text))) || fsync(fd))
		err = err ? err : -errno;
	if (close(fd) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

static int secret_def_valid(const struct secret *s)
{
	char norm[POLICY_NAME_MAX + 1];

	if (!secret_name_valid(s->name) || s->nhosts == 0 || s->nhosts > SECRET_HOSTS_MAX)
		return -EINVAL;
	for (size_t i = 0; i < s->nhosts; i++) {
		if (policy_normalise_name(s->hosts[i], norm, sizeof(norm)) || strcmp(norm, s->hosts[i]))
			return -EINVAL;
	}
	if (s->header[0] && (!header_name_valid(s->header) || !format_valid(s->format)))
		return -EINVAL;
	if (s->from_env[0] && !secret_name_valid(s->from_env))
		return -EINVAL;
	return 0;
}

static cJSON *secret_to_json(const struct secret *s, const char *value, size_t value_len)
{
	cJSON *o = cJSON_CreateObject(), *hosts = cJSON_AddArrayToObject(o, "hosts");
	char *v = NULL;
	bool ok = o && hosts && cJSON_AddStringToObject(o, "name", s->name);

	for (size_t i = 0; ok && i < s->nhosts; i++) {
		char hp[POLICY_NAME_MAX + 8];
		snprintf(hp, sizeof(hp), "%s:%u", s->hosts[i], secret_host_port(s, i));
		ok = cJSON_AddItemToArray(hosts, cJSON_CreateString(hp));
	}
	if (ok && s->header[0])
		ok = cJSON_AddStringToObject(o, "header", s->header) &&
		     cJSON_AddStringToObject(o, "format", s->format);
	if (ok && s->from_env[0])
		ok = cJSON_AddStringToObject(o, "from_env", s->from_env) != NULL;
	if (ok && !s->from_env[0]) {
		ok = (v = strndup(value, value_len)) && cJSON_AddStringToObject(o, "value", v);
		if (v) {
			OPENSSL_cleanse(v, value_len);
			free(v);
		}
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Frees a printed JSON text that may hold a value, wiping it first. */
static void free_wiped(char *text)
{
	if (text) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	}
}

static void json_delete_wiped(cJSON *o)
{
	cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, "value") : NULL;

	if (cJSON_IsString(v) && v->valuestring)
		OPENSSL_cleanse(v->valuestring, strlen(v->valuestring));
	cJSON_Delete(o);
}

int secret_store(const struct secret *s, const char *value, size_t value_len, bool replace)
{
	char path[PATH_MAX], *text = NULL;
	cJSON *o = NULL;
	int err;

	if ((err = secret_def_valid(s)) || (err = process_hold_secrets()))
		return err;
	if (!s->from_env[0] && (!value || !secret_value_valid(value, value_len)))
		return -EINVAL;
	if ((err = secret_path(s->name, path, sizeof(path), true)))
		return err;
	if (!replace && access(path, F_OK) == 0)
		return -EEXIST;
	if (!(o = secret_to_json(s, value, value_len)) || !(text = cJSON_Print(o)))
		err = -ENOMEM;
	else
		err = write_private_file(path, text);
	free_wiped(text);
	json_delete_wiped(o);
	return err;
}

static int copy_str(char *dst, size_t cap, const cJSON *item, bool required)
{
	if (!item)
		return required ? -EBADMSG : 0;
	if (!cJSON_IsString(item) || strlen(item->valuestring) >= cap)
		return -EBADMSG;
	strcpy(dst, item->valuestring);
	return 0;
}

static int secret_from_json(const cJSON *o, struct secret *s)
{
	const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(o, "hosts"), *h;
	int err;

	if ((err = copy_str(s->name, sizeof(s->name), cJSON_GetObjectItemCaseSensitive(o, "name"), true)) ||
	    (err = copy_str(s->header, sizeof(s->header), cJSON_GetObjectItemCaseSensitive(o, "header"), false)) ||
	    (err = copy_str(s->format, sizeof(s->format), cJSON_GetObjectItemCaseSensitive(o, "format"), false)) ||
	    (err = copy_str(s->from_env, sizeof(s->from_env), cJSON_GetObjectItemCaseSensitive(o, "from_env"), false)))
		return err;
	if (!cJSON_IsArray(hosts))
		return -EBADMSG;
	cJSON_ArrayForEach(h, hosts) {
		/* "host:port"; a file from before ports were bound says "host",
		 * which meant port 443. */
		if (!cJSON_IsString(h) || secret_add_host(s, h->valuestring))
			return -EBADMSG;
	}
	return secret_def_valid(s) ? -EBADMSG : 0;
}

static int secret_take_value(struct secret *s, const char *v)
{
	size_t len = v ? strlen(v) : 0;

	if (!v || !secret_value_valid(v, len))
		return -ENOKEY;
	if (!(s->value = strdup(v)))
		return -ENOMEM;
	s->value_len = len;
	return 0;
}

int secret_read(const char *name, bool with_value, struct secret *s)
{
	char path[PATH_MAX];
	uint8_t *buf = NULL;
	size_t len = 0;
	cJSON *o = NULL;
	int err;

	memset(s, 0, sizeof(*s));
	if ((with_value && (err = process_hold_secrets())) ||
	    (err = secret_path(name, path, sizeof(path), false)) ||
	    (err = read_file(path, SECRET_FILE_MAX, &buf, &len)))
		return err;
	if (!(o = cJSON_ParseWithLength((const char *)buf, len)))
		err = -EBADMSG;
	else if (!(err = secret_from_json(o, s)) && strcmp(s->name, name))
		err = -EBADMSG;
	if (!err && with_value) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "value");
		if (s->from_env[0])
			err = secret_take_value(s, getenv(s->from_env));
		else
			err = secret_take_value(s, cJSON_IsString(v) ? v->valuestring : NULL);
	}
	json_delete_wiped(o);
	OPENSSL_cleanse(buf, len);
	free(buf);
	if (err)
		secret_clear(s);
	return err;
}

void secret_clear(struct secret *s)
{
	if (s->value) {
		OPENSSL_cleanse(s->value, s->value_len);
		free(s->value);
	}
	s->value = NULL;
	s->value_len = 0;
}

int secret_remove(const char *name)
{
	char path[PATH_MAX];
	int err = secret_path(name, path, sizeof(path), false);

	if (err)
		return err;
	return unlink(path) ? -errno : 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void secret_names_free(char **names, size_t n)
{
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

int secret_names(char ***names)
{
	char dir[PATH_MAX], **v = NULL, **nv;
	size_t n = 0;
	struct dirent *de;
	DIR *d;
	int err = secret_store_dir(dir, sizeof(dir), false);

	*names = NULL;
	if (err)
		return err;
	if (!(d = opendir(dir)))
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 6 || strcmp(de->d_name + l - 5, ".json"))
			continue;
		if (!(nv = realloc(v, (n + 1) * sizeof(*v))) || !(nv[n] = strndup(de->d_name, l - 5))) {
			v = nv ? nv : v;
			err = -ENOMEM;
			break;
		}
		v = nv;
		if (secret_name_valid(v[n]))
			n++;
		else
			free(v[n]);
	}
	closedir(d);
	if (err) {
		secret_names_free(v, n);
		return err;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_names);
	*names = v;
	return (int)n;
}

/* ---- per-sandbox sets ---- */

static int placeholder_new(const char *name, char *out, size_t cap)
{
	uint8_t r[16];
	int len;

	if (RAND_bytes(r, sizeof(r)) != 1)
		return -EIO;
	len = snprintf(out, cap, "k8s-placeholder-%s-", name);
	if (len < 0 || (size_t)len + 33 > cap)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < sizeof(r); i++)
		sprintf(out + len + 2 * i, "%02x", r[i]);
	return 0;
}

/* Reads the sandbox's placeholder table (an object NAME -> placeholder); a
 * missing file is an empty table. */
static int placeholders_read(const char *path, cJSON **out)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int err = read_file(path, SECRET_FILE_MAX, &buf, &len);

	if (err == -ENOENT) {
		*out = cJSON_CreateObject();
		return *out ? 0 : -ENOMEM;
	}
	if (err)
		return err;
	*out = cJSON_ParseWithLength((const char *)buf, len);
	free(buf);
	if (!cJSON_IsObject(*out)) {
		cJSON_Delete(*out);
		*out = NULL;
		return -EBADMSG;
	}
	return 0;
}

/* Gives s its placeholder from table, making one if the table has none (or
 * one that does not look like ours).  *changed tells the caller to save. */
static int placeholder_assign(cJSON *table, struct secret *s, bool *changed)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(table, s->name);
	char prefix[SECRET_PLACEHOLDER_MAX + 1];
	int err;

	snprintf(prefix, sizeof(prefix), "k8s-placeholder-%s-", s->name);
	if (cJSON_IsString(p) && strlen(p->valuestring) == strlen(prefix) + 32 &&
	    !strncmp(p->valuestring, prefix, strlen(prefix))) {
		strcpy(s->placeholder, p->valuestring);
		return 0;
	}
	if ((err = placeholder_new(s->name, s->placeholder, sizeof(s->placeholder))))
		return err;
	cJSON_DeleteItemFromObjectCaseSensitive(table, s->name);
	if (!cJSON_AddStringToObject(table, s->name, s->placeholder))
		return -ENOMEM;
	*changed = true;
	return 0;
}

static int set_placeholders(struct secret_set *set, const char *state_dir)
{
	char path[PATH_MAX], *text = NULL;
	cJSON *table = NULL;
	bool changed = false;
	int err;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir, PLACEHOLDERS_FILE) >= sizeof(path))
		return -ENAMETOOLONG;
	if ((err = placeholders_read(path, &table)))
		return err;
	for (size_t i = 0; !err && i < set->n; i++)
		err = placeholder_assign(table, &set->items[i], &changed);
	if (!err && changed)
		err = (text = cJSON_Print(table)) ? write_private_file(path, text) : -ENOMEM;
	free(text);
	cJSON_Delete(table);
	return err;
}

int secret_placeholders_copy(const char *from_dir, const char *to_dir)
{
	char from[PATH_MAX], to[PATH_MAX], *text = NULL;
	cJSON *table = NULL;
	int err;

	if ((size_t)snprintf(from, sizeof(from), "%s/%s", from_dir, PLACEHOLDERS_FILE) >= sizeof(from) ||
	    (size_t)snprintf(to, sizeof(to), "%s/%s", to_dir, PLACEHOLDERS_FILE) >= sizeof(to))
		return -ENAMETOOLONG;
	/* Parsed and printed again, not copied byte for byte: what the child
	 * gets is a table, or the fork fails.  An empty one (no secret used
	 * yet, or no file) is not written: nothing to carry. */
	if ((err = placeholders_read(from, &table)))
		return err;
	if (!cJSON_GetArraySize(table))
		err = 0;
	else
		err = (text = cJSON_Print(table)) ? write_private_file(to, text) : -ENOMEM;
	free(text);
	cJSON_Delete(table);
	return err;
}

static int set_env(struct secret_set *set)
{
	if (!(set->env = calloc(set->n + 1, sizeof(*set->env))))
		return -ENOMEM;
	for (size_t i = 0; i < set->n; i++) {
		if (asprintf(&set->env[i], "%s=%s", set->items[i].name, set->items[i].placeholder) < 0) {
			set->env[i] = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

/* Every value of the set is kept out of every intercepted response, not
 * only the values bound to that host. */
static int set_redactions(struct secret_set *set)
{
	int err = redact_set_new(&set->redact);

	for (size_t i = 0; !err && i < set->n; i++)
		err = redact_set_add(set->redact, set->items[i].value, set->items[i].value_len,
				     set->items[i].placeholder);
	return err;
}

int secret_set_load(const char *const *names, size_t n, const char *state_dir,
		    struct secret_set **out)
{
	struct secret_set *set = calloc(1, sizeof(*set));
	int err = 0;

	*out = NULL;
	if (n > SECRET_SET_MAX || (err = process_hold_secrets())) {
		free(set);
		return err ? err : -E2BIG;
	}
	if (!set || (n && !(set->items = calloc(n, sizeof(*set->items))))) {
		free(set);
		return -ENOMEM;
	}
	for (size_t i = 0; !err && i < n; i++) {
		for (size_t j = 0; !err && j < i; j++)
			err = strcmp(names[i], names[j]) ? 0 : -EINVAL;   /* named twice */
		if (!err && !(err = secret_read(names[i], true, &set->items[i])))
			set->n++;
	}
	if (!err)
		err = set_placeholders(set, state_dir);
	if (!err)
		err = set_env(set);
	if (!err)
		err = set_redactions(set);
	if (err) {
		secret_set_free(set);
		return err;
	}
	*out = set;
	return 0;
}

void secret_set_free(struct secret_set *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++) {
		secret_clear(&set->items[i]);
		if (set->env)
			free(set->env[i]);
	}
	free(set->env);
	free(set->items);
	redact_set_free(set->redact);
	free(set);
}

const char *const *secret_set_env(const struct secret_set *set)
{
	return (const char *const *)set->env;
}

bool secret_bound_to(const struct secret *s, const char *host, uint16_t port)
{
	for (size_t i = 0; i < s->nhosts; i++) {
		if (!strcmp(s->hosts[i], host) && secret_host_port(s, i) == port)
			return true;
	}
	return false;
}

bool secret_set_binds(const struct secret_set *set, const char *host, uint16_t port)
{
	char norm[POLICY_NAME_MAX + 1];

	if (!set || policy_normalise_name(host, norm, sizeof(norm)))
		return false;
	for (size_t i = 0; i < set->n; i++) {
		if (secret_bound_to(&set->items[i], norm, port))
			return true;
	}
	return false;
}

const struct redact_set *secret_set_redactions(const struct secret_set *set)
{
	return set ? set->redact : NULL;
}


size_t secret_set_count(const struct secret_set *set)
{
	return set ? set->n : 0;
}

const struct secret *secret_set_get(const struct secret_set *set, size_t i)
{
	return i < set->n ? &set->items[i] : NULL;
}
