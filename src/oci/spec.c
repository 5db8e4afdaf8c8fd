/* config.json of an OCI bundle: see spec.h for what is read and why. */
#include "oci/spec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctx {
	struct oci_spec *s;
	char *err;
	size_t errsz;
	size_t argv_env_bytes;
};

static int fail(struct ctx *c, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, c->errsz, fmt, ap);
	va_end(ap);
	return rc;
}

/* The member name of o, which must be absent or of the given type:
 * *out NULL when absent (or JSON null, as runc reads it). */
static int member(struct ctx *c, const cJSON *o, const char *name, int type, const char *where,
		  const cJSON **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	static const char *const tname[] = {
		[cJSON_String] = "a string", [cJSON_Number] = "a number", [cJSON_Object] = "an object",
		[cJSON_Array] = "an array",
	};

	*out = NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (type == cJSON_True ? !cJSON_IsBool(v) : (v->type & 0xff) != type)
		return fail(c, -EINVAL, "%s%s must be %s", where, name,
			    type == cJSON_True ? "true or false" : tname[type]);
	*out = v;
	return 0;
}

/* A string member copied into buf (len bytes with its NUL): absent leaves
 * buf as it is. */
static int str_member(struct ctx *c, const cJSON *o, const char *name, const char *where, char *buf,
		      size_t len)
{
	const cJSON *v;
	int rc = member(c, o, name, cJSON_String, where, &v);

	if (rc || !v)
		return rc;
	if (strlen(v->valuestring) >= len)
		return fail(c, -E2BIG, "%s%s is longer than %zu bytes", where, name, len - 1);
	memcpy(buf, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

/* An integer member in [lo, hi] into *out: absent leaves *out alone. */
static int int_member(struct ctx *c, const cJSON *o, const char *name, const char *where, double lo,
		      double hi, int64_t *out)
{
	const cJSON *v;
	int rc = member(c, o, name, cJSON_Number, where, &v);

	if (rc || !v)
		return rc;
	if (v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
		return fail(c, -EINVAL, "%s%s must be a whole number from %.0f to %.0f", where, name, lo, hi);
	*out = (int64_t)v->valuedouble;
	return 0;
}

/* An array of strings into list (at most max, NULL-terminated, strdup'ed). */
static int str_array(struct ctx *c, const cJSON *a, const char *where, int max, char **list, int *n)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, a) {
		if (!cJSON_IsString(v))
			return fail(c, -EINVAL, "%s must hold only strings", where);
		if (*n == max)
			return fail(c, -E2BIG, "%s has more than %d entries", where, max);
		c->argv_env_bytes += strlen(v->valuestring) + 1;
		if (c->argv_env_bytes > OCI_ARGV_ENV_BYTES)
			return fail(c, -E2BIG, "process.args and process.env together exceed %d bytes",
				    OCI_ARGV_ENV_BYTES);
		if (!(list[*n] = strdup(v->valuestring)))
			return fail(c, -ENOMEM, "out of memory");
		(*n)++;
	}
	return 0;
}

static int parse_process(struct ctx *c, const cJSON *p)
{
	struct oci_spec *s = c->s;
	const cJSON *a, *u, *t;
	int64_t id;
	int rc;

	if ((rc = member(c, p, "args", cJSON_Array, "process.", &a)))
		return rc;
	if (!a || !cJSON_GetArraySize(a))
		return fail(c, -EINVAL, "process.args must name the program to run");
	if ((rc = str_array(c, a, "process.args", OCI_ARGS_MAX, s->args, &s->nargs)))
		return rc;
	if ((rc = member(c, p, "env", cJSON_Array, "process.", &a)) ||
	    (a && (rc = str_array(c, a, "process.env", OCI_ENV_MAX, s->env, &s->nenv))))
		return rc;
	for (int i = 0; i < s->nenv; i++)
		if (!strchr(s->env[i], '=') || s->env[i][0] == '=')
			return fail(c, -EINVAL, "process.env entry %d is not NAME=value", i);
	if ((rc = str_member(c, p, "cwd", "process.", s->cwd, sizeof(s->cwd))))
		return rc;
	if (s->cwd[0] != '/')
		return fail(c, -EINVAL, "process.cwd must be an absolute path");
	if ((rc = member(c, p, "terminal", cJSON_True, "process.", &t)))
		return rc;
	s->terminal = t && cJSON_IsTrue(t);
	if ((rc = member(c, p, "user", cJSON_Object, "process.", &u)) || !u)
		return rc;
	id = 0;
	if ((rc = int_member(c, u, "uid", "process.user.", 0, 4294967294.0, &id)))
		return rc;
	s->uid = (uint32_t)id;
	id = 0;
	if ((rc = int_member(c, u, "gid", "process.user.", 0, 4294967294.0, &id)))
		return rc;
	s->gid = (uint32_t)id;
	return 0;
}

static int parse_root(struct ctx *c, const cJSON *r)
{
	const cJSON *ro;
	int rc;

	if ((rc = str_member(c, r, "path", "root.", c->s->root, sizeof(c->s->root))))
		return rc;
	if (!c->s->root[0])
		return fail(c, -EINVAL, "root.path must name the bundle's root file system");
	if ((rc = member(c, r, "readonly", cJSON_True, "root.", &ro)))
		return rc;
	c->s->root_readonly = ro && cJSON_IsTrue(ro);
	return 0;
}

static int parse_cpu(struct ctx *c, const cJSON *cpu)
{
	int64_t quota = 0, period = 100000, shares = 0;
	int64_t n = 1;
	int rc;

	if ((rc = int_member(c, cpu, "quota", "linux.resources.cpu.", -1, 1e15, &quota)) ||
	    (rc = int_member(c, cpu, "period", "linux.resources.cpu.", 1, 1e15, &period)) ||
	    (rc = int_member(c, cpu, "shares", "linux.resources.cpu.", 0, 1e15, &shares)))
		return rc;
	if (quota > 0)
		n = (quota + period - 1) / period;
	else if (shares > 2)    /* 2 is the kernel's minimum: Kubernetes' "no request" */
		n = (shares + 1023) / 1024;
	if (n > OCI_CPUS_MAX)
		return fail(c, -E2BIG, "linux.resources.cpu asks for %lld CPUs; a kosa8 guest has at most %d",
			    (long long)n, OCI_CPUS_MAX);
	c->s->cpus = (int)n;
	return 0;
}

static int parse_memory(struct ctx *c, const cJSON *m)
{
	int64_t limit = -1;
	uint64_t mem;
	int rc;

	if ((rc = int_member(c, m, "limit", "linux.resources.memory.", -1, 9.2e18, &limit)))
		return rc;
	if (limit <= 0)
		return 0;
	if ((uint64_t)limit > OCI_MEM_MAX)
		return fail(c, -E2BIG, "linux.resources.memory.limit %lld is over kosa8's %llu GiB",
			    (long long)limit, (unsigned long long)(OCI_MEM_MAX >> 30));
	mem = ((uint64_t)limit + OCI_MEM_STEP - 1) / OCI_MEM_STEP * OCI_MEM_STEP;
	c->s->mem = mem < OCI_MEM_MIN ? OCI_MEM_MIN : mem;
	return 0;
}

static int parse_linux(struct ctx *c, const cJSON *l)
{
	const cJSON *r, *x;
	int rc;

	if ((rc = member(c, l, "resources", cJSON_Object, "linux.", &r)) || !r)
		return rc;
	if ((rc = member(c, r, "cpu", cJSON_Object, "linux.resources.", &x)) || (x && (rc = parse_cpu(c, x))))
		return rc;
	if ((rc = member(c, r, "memory", cJSON_Object, "linux.resources.", &x)) ||
	    (x && (rc = parse_memory(c, x))))
		return rc;
	return 0;
}

/* Kernel file systems the guest mounts itself: none reaches the host. */
static bool guest_fs(const char *type)
{
	static const char *const ok[] = { "proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2" };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(type, ok[i]))
			return true;
	return false;
}

/* The files Docker and containerd bind from their own state into every
 * container: small, read once and copied in. */
static bool copied_file(const char *dest)
{
	return !strcmp(dest, "/etc/hosts") || !strcmp(dest, "/etc/hostname");
}

/* One of the comma-joined options is exactly opt. */
static bool has_option(const char *options, const char *opt)
{
	size_t n = strlen(opt);

	for (const char *o = options;; o++) {
		size_t len = strcspn(o, ",");

		if (len == n && !strncmp(o, opt, n))
			return true;
		o += len;
		if (!*o)
			return false;
	}
}

/* containerd's CRI binds the pod's /dev/shm (a tmpfs it mounts on the
 * host for the pod, or the host's own) into the pod's every container.  A
 * container is alone in its VM and shares no memory with another, so it
 * gets a tmpfs of the guest's, of containerd's default size. */
static void shm_in_guest(struct oci_mount *out)
{
	bool ro = has_option(out->options, "ro");

	out->kind = OCI_MOUNT_GUEST;
	snprintf(out->type, sizeof(out->type), "tmpfs");
	snprintf(out->source, sizeof(out->source), "shm");
	snprintf(out->options, sizeof(out->options), "nosuid,nodev,noexec,mode=1777,size=65536k%s",
		 ro ? ",ro" : "");
}

static int mount_options(struct ctx *c, const cJSON *m, int i, struct oci_mount *out, bool *bind)
{
	const cJSON *o, *v;
	size_t used = 0;
	int rc;

	*bind = false;
	if ((rc = member(c, m, "options", cJSON_Array, "mounts[].", &o)) || !o)
		return rc;
	cJSON_ArrayForEach(v, o) {
		if (!cJSON_IsString(v))
			return fail(c, -EINVAL, "mounts[%d].options must hold only strings", i);
		if (!strcmp(v->valuestring, "bind") || !strcmp(v->valuestring, "rbind"))
			*bind = true;
		size_t n = strlen(v->valuestring);
		if (strchr(v->valuestring, ',') || used + n + 2 > sizeof(out->options))
			return fail(c, -E2BIG, "mounts[%d].options are too long or hold a comma", i);
		if (used)
			out->options[used++] = ',';
		memcpy(out->options + used, v->valuestring, n + 1);
		used += n;
	}
	return 0;
}

static int parse_mount(struct ctx *c, const cJSON *m, int i, struct oci_mount *out)
{
	bool bind;
	int rc;

	if (!cJSON_IsObject(m))
		return fail(c, -EINVAL, "mounts[%d] must be an object", i);
	if ((rc = str_member(c, m, "destination", "mounts[].", out->dest, sizeof(out->dest))) ||
	    (rc = str_member(c, m, "type", "mounts[].", out->type, sizeof(out->type))) ||
	    (rc = str_member(c, m, "source", "mounts[].", out->source, sizeof(out->source))) ||
	    (rc = mount_options(c, m, i, out, &bind)))
		return rc;
	if (out->dest[0] != '/' || strstr(out->dest, "/../") ||
	    (strlen(out->dest) >= 3 && !strcmp(out->dest + strlen(out->dest) - 3, "/..")))
		return fail(c, -EINVAL, "mounts[%d].destination must be an absolute path without '..'", i);
	if (!strcmp(out->dest, "/etc/resolv.conf")) {
		out->kind = OCI_MOUNT_DNS;
		return 0;
	}
	if ((bind || !strcmp(out->type, "bind")) && !strcmp(out->dest, "/dev/shm")) {
		shm_in_guest(out);
		return 0;
	}
	if ((bind || !strcmp(out->type, "bind")) && copied_file(out->dest)) {
		out->kind = OCI_MOUNT_FILE;
		return 0;
	}
	if (!bind && guest_fs(out->type)) {
		out->kind = OCI_MOUNT_GUEST;
		return 0;
	}
	if (bind || !strcmp(out->type, "bind"))
		return fail(c, -ENOTSUP, "mounts[%d]: kosa8 does not bind host paths into a container "
			    "(%s at %s): the guest sees no host file system", i, out->source, out->dest);
	return fail(c, -ENOTSUP, "mounts[%d]: file system type '%s' (at %s) is not supported; "
		    "kosa8 mounts proc, sysfs, tmpfs, devpts, mqueue and cgroup in the guest", i,
		    out->type[0] ? out->type : "(none)", out->dest);
}

static int parse_mounts(struct ctx *c, const cJSON *a)
{
	const cJSON *m;
	int i = 0, rc;

	cJSON_ArrayForEach(m, a) {
		if (i == OCI_MOUNTS_MAX)
			return fail(c, -E2BIG, "more than %d mounts", OCI_MOUNTS_MAX);
		if ((rc = parse_mount(c, m, i, &c->s->mounts[i])))
			return rc;
		c->s->nmounts = ++i;
	}
	return 0;
}

/* A comma-separated list into fixed slots, each checked by ok(). */
static int split_list(struct ctx *c, const char *key, const char *val, char *slots, size_t slot_len,
		      int max, int *n, bool (*ok)(const char *))
{
	const char *p = val;

	while (*p) {
		size_t len = strcspn(p, ",");
		char *dst = slots + (size_t)*n * slot_len;
		if (len) {
			if (*n == max || len >= slot_len)
				return fail(c, -E2BIG, "annotation %s: more than %d entries or one too long", key, max);
			memcpy(dst, p, len);
			dst[len] = 0;
			if (!ok(dst))
				return fail(c, -EINVAL, "annotation %s: '%s' is not valid", key, dst);
			(*n)++;
		}
		p += len + (p[len] == ',');
	}
	return 0;
}

/* Allow rules are checked again by the policy parser at create; here only
 * that they are one printable word. */
static bool rule_chars(const char *s)
{
	for (; *s; s++)
		if (*s <= ' ' || *s > '~')
			return false;
	return true;
}

static bool word_chars(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '-'))
			return false;
	return true;
}

static int kosa8_annotation(struct ctx *c, const char *key, const char *val)
{
	struct oci_spec *s = c->s;

	if (!strcmp(key, "io.kosa8.allow"))
		return split_list(c, key, val, &s->allow[0][0], OCI_ALLOW_LEN, OCI_ALLOW_MAX, &s->nallow,
				  rule_chars);
	if (!strcmp(key, "io.kosa8.secret"))
		return split_list(c, key, val, &s->secrets[0][0], OCI_SECRET_LEN, OCI_SECRETS_MAX,
				  &s->nsecrets, word_chars);
	if (!strcmp(key, "io.kosa8.policy")) {
		if (!val[0] || strlen(val) >= sizeof(s->policy) || !word_chars(val))
			return fail(c, -EINVAL, "annotation io.kosa8.policy names a policy: 1-%zu of "
				    "[A-Za-z0-9_-]", sizeof(s->policy) - 1);
		strcpy(s->policy, val);
		return 0;
	}
	if (!strncmp(key, "io.kosa8.", 9))
		return fail(c, -EINVAL, "unknown kosa8 annotation %s (io.kosa8.allow, io.kosa8.secret, "
			    "io.kosa8.policy)", key);
	return 0;
}

static int parse_annotations(struct ctx *c, const cJSON *o)
{
	struct oci_spec *s = c->s;
	const cJSON *v;
	int rc;

	cJSON_ArrayForEach(v, o) {
		if (!cJSON_IsString(v))
			return fail(c, -EINVAL, "annotation %.64s must be a string", v->string);
		if (s->nannotations == OCI_ANNOT_MAX)
			return fail(c, -E2BIG, "more than %d annotations", OCI_ANNOT_MAX);
		if (strlen(v->string) >= OCI_ANNOT_KEY_LEN || strlen(v->valuestring) >= OCI_ANNOT_VAL_LEN)
			return fail(c, -E2BIG, "annotation %.64s: key or value too long", v->string);
		struct oci_annotation *a = &s->annotations[s->nannotations];
		if (!(a->key = strdup(v->string)) || !(a->value = strdup(v->valuestring))) {
			free(a->key);
			a->key = NULL;
			return fail(c, -ENOMEM, "out of memory");
		}
		s->nannotations++;
		if ((rc = kosa8_annotation(c, v->string, v->valuestring)))
			return rc;
	}
	return 0;
}

static bool hostname_ok(const char *h)
{
	for (; *h; h++)
		if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
		      *h == '-' || *h == '.'))
			return false;
	return true;
}

static int parse_top(struct ctx *c, const cJSON *j)
{
	const cJSON *x;
	int rc;

	if (!cJSON_IsObject(j))
		return fail(c, -EINVAL, "config.json must hold one JSON object");
	if ((rc = member(c, j, "ociVersion", cJSON_String, "", &x)))
		return rc;
	if (!x || strncmp(x->valuestring, "1.", 2))
		return fail(c, -EINVAL, "ociVersion must be 1.x");
	if ((rc = member(c, j, "process", cJSON_Object, "", &x)))
		return rc;
	if (!x)
		return fail(c, -EINVAL, "process is missing: kosa8 runs a process per container");
	if ((rc = parse_process(c, x)) || (rc = member(c, j, "root", cJSON_Object, "", &x)))
		return rc;
	if (!x)
		return fail(c, -EINVAL, "root is missing: the bundle must name its root file system");
	if ((rc = parse_root(c, x)) ||
	    (rc = str_member(c, j, "hostname", "", c->s->hostname, sizeof(c->s->hostname))))
		return rc;
	if (!hostname_ok(c->s->hostname))
		return fail(c, -EINVAL, "hostname may hold only letters, digits, '-' and '.'");
	if ((rc = member(c, j, "linux", cJSON_Object, "", &x)) || (x && (rc = parse_linux(c, x))))
		return rc;
	if ((rc = member(c, j, "mounts", cJSON_Array, "", &x)) || (x && (rc = parse_mounts(c, x))))
		return rc;
	if ((rc = member(c, j, "annotations", cJSON_Object, "", &x)) || (x && (rc = parse_annotations(c, x))))
		return rc;
	return 0;
}

/* Both files are one JSON object from outside: the same bounds, then
 * top() reads it. */
static int parse_json(const char *buf, size_t len, struct oci_spec *s, char *err, size_t errsz,
		      const char *what, int (*top)(struct ctx *c, const cJSON *j))
{
	struct ctx c = { .s = s, .err = err, .errsz = errsz };
	cJSON *j;
	int rc;

	memset(s, 0, sizeof(*s));
	s->cpus = 1;
	s->mem = OCI_MEM_DEFAULT;
	strcpy(s->cwd, "/");
	if (errsz)
		err[0] = 0;
	if (len > OCI_SPEC_MAX)
		return fail(&c, -E2BIG, "%s is over %d bytes", what, OCI_SPEC_MAX);
	if (memchr(buf, 0, len))
		return fail(&c, -EINVAL, "%s holds a NUL byte", what);
	if (!(j = cJSON_ParseWithLength(buf, len)))
		return fail(&c, -EINVAL, "%s is not valid JSON", what);
	rc = top(&c, j);
	cJSON_Delete(j);
	return rc;
}

int oci_spec_parse(const char *buf, size_t len, struct oci_spec *s, char *err, size_t errsz)
{
	return parse_json(buf, len, s, err, errsz, "config.json", parse_top);
}

static int process_top(struct ctx *c, const cJSON *j)
{
	if (!cJSON_IsObject(j))
		return fail(c, -EINVAL, "the process file must hold one JSON object");
	return parse_process(c, j);
}

int oci_process_parse(const char *buf, size_t len, struct oci_spec *s, char *err, size_t errsz)
{
	return parse_json(buf, len, s, err, errsz, "the process file", process_top);
}

void oci_spec_free(struct oci_spec *s)
{
	for (int i = 0; i < s->nargs; i++)
		free(s->args[i]);
	for (int i = 0; i < s->nenv; i++)
		free(s->env[i]);
	for (int i = 0; i < s->nannotations; i++) {
		free(s->annotations[i].key);
		free(s->annotations[i].value);
	}
	s->nargs = s->nenv = s->nannotations = 0;
}

const char *oci_spec_annotation(const struct oci_spec *s, const char *key)
{
	for (int i = 0; i < s->nannotations; i++)
		if (!strcmp(s->annotations[i].key, key))
			return s->annotations[i].value;
	return NULL;
}
