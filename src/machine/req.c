/* The request file of a forwarded command (machine.h): NUL-separated, so
 * that any argv or environment entry passes exactly (none holds a NUL). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "machine/machine.h"

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -EINVAL)

void machine_req_free(struct machine_req *r)
{
	free(r->argv);
	free(r->env);
	r->argv = r->env = NULL;
}

static int parse_size(const char *v, unsigned *rows, unsigned *cols)
{
	char *end;
	unsigned long a, b;

	if (*v < '0' || *v > '9')
		return -EINVAL;
	a = strtoul(v, &end, 10);
	if (*end != ' ' || end[1] < '0' || end[1] > '9')
		return -EINVAL;
	b = strtoul(end + 1, &end, 10);
	if (*end || a == 0 || b == 0 || a > 10000 || b > 10000)
		return -EINVAL;
	*rows = (unsigned)a;
	*cols = (unsigned)b;
	return 0;
}

/* One KEY\0VALUE\0 pair into r; the arrays were sized for every pair. */
static int take(struct machine_req *r, const char *key, char *val, char *why, size_t whylen)
{
	if (!strcmp(key, "arg")) {
		r->argv[r->argc++] = val;
	} else if (!strcmp(key, "env")) {
		char *eq = strchr(val, '=');
		if (!eq || eq == val)
			return WHY("environment entry without NAME=");
		r->env[r->envc++] = val;
	} else if (!strcmp(key, "exe") || !strcmp(key, "cwd")) {
		const char **slot = key[0] == 'e' ? &r->exe : &r->cwd;
		if (*slot)
			return WHY("%s given twice", key);
		if (val[0] != '/' || strlen(val) >= PATH_MAX)
			return WHY("%s is not an absolute path", key);
		*slot = val;
	} else if (!strcmp(key, "tty")) {
		if (r->tty || parse_size(val, &r->rows, &r->cols))
			return WHY("bad terminal size");
		r->tty = true;
	} else {
		return WHY("unknown key");
	}
	return 0;
}

int machine_req_parse(char *data, size_t len, struct machine_req *r, char *why, size_t whylen)
{
	size_t magic = sizeof(MACHINE_REQ_MAGIC), n = 0, i;
	char *p, *end = data + len;
	int err;

	memset(r, 0, sizeof(*r));
	if (len > MACHINE_REQ_MAX)
		return WHY("request over %d bytes", MACHINE_REQ_MAX);
	if (len < magic || memcmp(data, MACHINE_REQ_MAGIC, magic))
		return WHY("not a kosa8 machine request (or another version)");
	if (data[len - 1] != '\0')
		return WHY("request does not end with NUL");
	for (i = magic; i < len; i++)
		n += data[i] == '\0';
	if (n % 2)
		return WHY("a key without its value");
	if (n / 2 > MACHINE_REQ_MAX_ITEMS)
		return WHY("more than %d entries", MACHINE_REQ_MAX_ITEMS);
	r->argv = calloc(n / 2 + 1, sizeof(char *));
	r->env = calloc(n / 2 + 1, sizeof(char *));
	if (!r->argv || !r->env) {
		machine_req_free(r);
		return -ENOMEM;
	}
	for (p = data + magic; p < end;) {
		char *key = p, *val = key + strlen(key) + 1;
		p = val + strlen(val) + 1;
		if ((err = take(r, key, val, why, whylen))) {
			machine_req_free(r);
			return err;
		}
	}
	if (!r->exe || !r->cwd || r->argc == 0) {
		machine_req_free(r);
		return WHY("request without exe, cwd or command");
	}
	return 0;
}

struct enc {
	char *buf;
	size_t len, cap;
	size_t items;
};

static int put(struct enc *e, const char *key, const char *val)
{
	size_t k = strlen(key) + 1, v = strlen(val) + 1;

	if (e->len + k + v > MACHINE_REQ_MAX || ++e->items > MACHINE_REQ_MAX_ITEMS)
		return -E2BIG;
	if (e->len + k + v > e->cap) {
		size_t cap = (e->len + k + v) * 2;
		char *nb = realloc(e->buf, cap);
		if (!nb)
			return -ENOMEM;
		e->buf = nb;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, key, k);
	memcpy(e->buf + e->len + k, val, v);
	e->len += k + v;
	return 0;
}

int machine_req_encode(const char *exe, const char *cwd, bool tty, unsigned rows, unsigned cols,
		       char *const argv[], char *const env[], char **out, size_t *outlen)
{
	struct enc e = {0};
	char size[32];
	int err = 0;

	e.cap = 4096;
	if (!(e.buf = malloc(e.cap)))
		return -ENOMEM;
	memcpy(e.buf, MACHINE_REQ_MAGIC, sizeof(MACHINE_REQ_MAGIC));
	e.len = sizeof(MACHINE_REQ_MAGIC);
	snprintf(size, sizeof(size), "%u %u", rows ? rows : 24, cols ? cols : 80);
	err = put(&e, "exe", exe);
	if (!err)
		err = put(&e, "cwd", cwd);
	if (!err && tty)
		err = put(&e, "tty", size);
	for (; !err && *argv; argv++)
		err = put(&e, "arg", *argv);
	for (; !err && env && *env; env++)
		if (strchr(*env, '=') && **env != '=')
			err = put(&e, "env", *env);
	if (err) {
		free(e.buf);
		return err;
	}
	*out = e.buf;
	*outlen = e.len;
	return 0;
}
