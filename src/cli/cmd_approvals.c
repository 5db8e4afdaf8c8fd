/* kosa8 approvals: the requests running sandboxes hold for a person
 * (policy `ask`), and answering them.  The queue lives in each sandbox's
 * supervisor; this talks to it over the control socket (approvals.list,
 * approvals.answer, see supervisor/control.h), which records who answered.
 *
 *   kosa8 approvals [NAME]                       list what waits
 *   kosa8 approvals allow|always|deny NAME ID    answer one request
 *   kosa8 approvals watch [NAME] [--count N]     answer them as they come */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/regdomain.h"
#include "supervisor/approvals.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"

#define APPROVALS_CALL_MS 5000

/* Sends req to sandbox name's supervisor.  0 with *reply, or -errno
 * (-ENOENT / -ECONNREFUSED: the sandbox is not running). */
static int call(const char *name, const char *op, cJSON *req, cJSON **reply)
{
	char dir[PATH_MAX], path[PATH_MAX];
	int err;

	*reply = NULL;
	cJSON_AddStringToObject(req, "op", op);
	if ((err = sandbox_run_dir(name, dir, sizeof(dir))) ||
	    (err = sandbox_path(path, sizeof(path), dir, "control.sock")))
		return err;
	return control_call(path, req, reply, NULL, APPROVALS_CALL_MS);
}

static const char *reply_error(const cJSON *reply)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");

	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")))
		return NULL;
	return cJSON_IsString(e) ? e->valuestring : "the supervisor said no";
}

struct req_view {
	unsigned long long id;
	const char *kind;
	char target[300];      /* host or host:port */
	/* Who owns the name: api.openai.com.evil.example is evil.example's. */
	char registered[256];
	double waiting_s;
};

/* One element of approvals.list's reply; false if it is not one. */
static bool read_request(const cJSON *r, struct req_view *v)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
	const cJSON *kind = cJSON_GetObjectItemCaseSensitive(r, "kind");
	const cJSON *host = cJSON_GetObjectItemCaseSensitive(r, "name");
	const cJSON *port = cJSON_GetObjectItemCaseSensitive(r, "port");
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(r, "waiting_ms");

	if (!cJSON_IsNumber(id) || !cJSON_IsString(kind) || !cJSON_IsString(host) ||
	    !cJSON_IsNumber(port) || !cJSON_IsNumber(ms) || id->valuedouble < 1)
		return false;
	v->id = (unsigned long long)id->valuedouble;
	v->kind = kind->valuestring;
	if (port->valueint)
		snprintf(v->target, sizeof(v->target), "%s:%d", host->valuestring, port->valueint);
	else
		snprintf(v->target, sizeof(v->target), "%s", host->valuestring);
	v->waiting_s = ms->valuedouble / 1000;
	if (regdomain_of(host->valuestring, v->registered, sizeof(v->registered)))
		snprintf(v->registered, sizeof(v->registered), "-");
	return true;
}

struct list_ctx {
	bool named;        /* one sandbox asked for by name: say why it has nothing */
	int shown, failed;
	/* watch mode: */
	bool watch, eof;
	int answered;
	struct { char sandbox[SANDBOX_NAME_MAX + 1]; unsigned long long id; } seen[256];
	unsigned nseen;
};

static int answer(const char *verb, const char *name, const char *id_s);

static bool seen_before(struct list_ctx *c, const char *name, unsigned long long id)
{
	unsigned n = c->nseen < 256 ? c->nseen : 256;

	for (unsigned i = 0; i < n; i++)
		if (c->seen[i].id == id && !strcmp(c->seen[i].sandbox, name))
			return true;
	snprintf(c->seen[c->nseen % 256].sandbox, sizeof(c->seen[0].sandbox), "%s", name);
	c->seen[c->nseen++ % 256].id = id;
	return false;
}

/* Shows one new request and answers it with what the user types. */
static void prompt(const char *name, const struct req_view *v, struct list_ctx *c)
{
	static const char *const verbs[] = {"allow", "always", "deny"};
	char *line = NULL, id_s[24];
	size_t cap = 0;
	int pick = -1;

	printf("%s: request %llu: %s %s (registered domain %s, waiting %.0fs)\n"
	       "  [a]llow once, allow al[w]ays, [d]eny, [s]kip? ",
	       name, v->id, v->kind, v->target, v->registered, v->waiting_s);
	fflush(stdout);
	if (getline(&line, &cap, stdin) < 0) {
		c->eof = true;
		putchar('\n');
	} else if (line[0] == 'a') {
		pick = !strncmp(line, "always", 6) ? 1 : 0;
	} else if (line[0] == 'w') {
		pick = 1;
	} else if (line[0] == 'd') {
		pick = 2;
	}
	free(line);
	if (pick < 0)
		return;
	snprintf(id_s, sizeof(id_s), "%llu", v->id);
	if (answer(verbs[pick], name, id_s) == 0)
		c->answered++;
}

static const char *waited(double s, char *buf, size_t len)
{
	snprintf(buf, len, "%.0fs", s);
	return buf;
}

static void print_requests(const char *name, const cJSON *reqs, struct list_ctx *c)
{
	const cJSON *r;
	struct req_view v;
	char w[32];

	cJSON_ArrayForEach(r, reqs) {
		if (!read_request(r, &v))
			continue;
		if (c->watch) {
			if (!c->eof && !seen_before(c, name, v.id))
				prompt(name, &v, c);
			continue;
		}
		if (!c->shown++)
			printf("%-20s %6s %-8s %-40s %-7s %s\n", "SANDBOX", "ID", "KIND", "HOST", "WAITING",
			       "REGISTERED DOMAIN");
		printf("%-20s %6llu %-8s %-40s %-7s %s\n", name, v.id, v.kind, v.target, waited(v.waiting_s, w, sizeof(w)),
		       v.registered);
	}
}

static void list_one(const char *name, void *arg)
{
	struct list_ctx *c = arg;
	cJSON *req = cJSON_CreateObject(), *reply = NULL;
	const char *why;
	int err = call(name, "approvals.list", req, &reply);

	if (err == -ENOENT || err == -ECONNREFUSED) {
		if (c->named) {
			fprintf(stderr, "kosa8 approvals: sandbox '%s' is not running\n", name);
			c->failed = 1;
		}
	} else if (err) {
		fprintf(stderr, "kosa8 approvals: %s: %s\n", name, strerror(-err));
		c->failed = 1;
	} else if ((why = reply_error(reply))) {
		if (c->named) {
			fprintf(stderr, "kosa8 approvals: %s: %s\n", name, why);
			c->failed = 1;
		}
	} else {
		print_requests(name, cJSON_GetObjectItemCaseSensitive(reply, "requests"), c);
	}
	cJSON_Delete(req);
	cJSON_Delete(reply);
}

static int list(const char *name)
{
	struct list_ctx c = {.named = name != NULL};

	if (name && !sandbox_name_valid(name)) {
		fprintf(stderr, "kosa8 approvals: '%s' is not a sandbox name\n", name);
		return 2;
	}
	if (name)
		list_one(name, &c);
	else
		sandbox_list(list_one, &c);
	if (!c.shown && !c.failed)
		printf("no requests waiting\n");
	return c.failed;
}

/* Waits a second for the next poll, noticing the end of the input (the
 * user's Ctrl-D, or a pipe's writer gone) meanwhile; a line typed with no
 * question showing is ignored. */
static void pause_watch(struct list_ctx *c)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	char *line = NULL;
	size_t cap = 0;

	if (poll(&p, 1, 1000) == 1 && getline(&line, &cap, stdin) < 0)
		c->eof = true;
	free(line);
}

/* Polls every second; each new request is put to the user once. */
static int watch(const char *name, int count)
{
	struct list_ctx c = {.named = name != NULL, .watch = true};

	/* Unbuffered, so that poll() on fd 0 sees all there is to read (lines
	 * read ahead into stdio's buffer would be invisible to it). */
	setvbuf(stdin, NULL, _IONBF, 0);

	if (name && !sandbox_name_valid(name)) {
		fprintf(stderr, "kosa8 approvals: '%s' is not a sandbox name\n", name);
		return 2;
	}
	printf("watching %s for requests (Ctrl-C to stop)\n", name ? name : "every running sandbox");
	fflush(stdout);
	while (!c.eof && (count <= 0 || c.answered < count)) {
		c.failed = 0;
		if (name)
			list_one(name, &c);
		else
			sandbox_list(list_one, &c);
		if (name && c.failed)
			return 1;
		if (!c.eof && (count <= 0 || c.answered < count))
			pause_watch(&c);
	}
	return 0;
}

static int answer(const char *verb, const char *name, const char *id_s)
{
	enum approval_answer a;
	cJSON *req, *reply = NULL;
	const char *why = NULL;
	char *end;
	unsigned long long id;
	int err;

	errno = 0;
	id = strtoull(id_s, &end, 10);
	if (approval_answer_parse(verb, &a) || !sandbox_name_valid(name) || errno || *end ||
	    id_s[0] < '1' || id_s[0] > '9')
		return cli_usage_error("approvals", verb);
	req = cJSON_CreateObject();
	cJSON_AddNumberToObject(req, "id", (double)id);
	cJSON_AddStringToObject(req, "answer", verb);
	err = call(name, "approvals.answer", req, &reply);
	cJSON_Delete(req);
	if (err == -ENOENT || err == -ECONNREFUSED)
		fprintf(stderr, "kosa8 approvals: sandbox '%s' is not running\n", name);
	else if (err)
		fprintf(stderr, "kosa8 approvals: %s: %s\n", name, strerror(-err));
	else if ((why = reply_error(reply)))
		fprintf(stderr, "kosa8 approvals: %s: request %llu: %s\n", name, id, why);
	else
		printf("%s: request %llu: %s\n", name, id, approval_answer_name(a));
	err = err || why ? 1 : 0;
	cJSON_Delete(reply);
	return err;
}

int cmd_approvals(int argc, char **argv)
{
	enum approval_answer a;

	if (argc == 4 && approval_answer_parse(argv[1], &a) == 0)
		return answer(argv[1], argv[2], argv[3]);
	if (argc >= 2 && !strcmp(argv[1], "watch")) {
		const char *name = NULL;
		int count = 0;
		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--count") && i + 1 < argc && atoi(argv[i + 1]) > 0)
				count = atoi(argv[++i]);
			else if (argv[i][0] != '-' && !name)
				name = argv[i];
			else
				return cli_usage_error("approvals", "watch");
		}
		return watch(name, count);
	}
	if (argc <= 2 && (argc == 1 || argv[1][0] != '-'))
		return list(argc == 2 ? argv[1] : NULL);
	return cli_usage_error("approvals", NULL);
}
