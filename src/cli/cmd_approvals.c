/* kosa8 approvals: the requests running sandboxes hold for a person
 * (policy `ask`), and answering them.  The queue lives in each sandbox's
 * supervisor; this talks to it over the control socket (approvals.list,
 * approvals.answer, see supervisor/control.h), which records who answered.
 *
 *   kosa8 approvals [NAME]                       list what waits
 *   kosa8 approvals allow|always|deny NAME ID    answer one request */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "supervisor/approvals.h"
#include "supervisor/control.h"
#include "supervisor/sandbox.h"

#define APPROVALS_CALL_MS 5000

static const char usage_text[] =
	"usage: kosa8 approvals [NAME]                     list waiting requests\n"
	"       kosa8 approvals allow|always|deny NAME ID  answer one\n"
	"allow: this once (the name may be reached for a minute); always: and add\n"
	"an allow rule for it to the running sandbox's policy; deny: refuse it.\n"
	"Unanswered requests are denied after a timeout.\n";

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

struct list_ctx {
	bool named;        /* one sandbox asked for by name: say why it has nothing */
	int shown, failed;
};

static void print_requests(const char *name, const cJSON *reqs, struct list_ctx *c)
{
	const cJSON *r;

	cJSON_ArrayForEach(r, reqs) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
		const cJSON *kind = cJSON_GetObjectItemCaseSensitive(r, "kind");
		const cJSON *host = cJSON_GetObjectItemCaseSensitive(r, "name");
		const cJSON *port = cJSON_GetObjectItemCaseSensitive(r, "port");
		const cJSON *ms = cJSON_GetObjectItemCaseSensitive(r, "waiting_ms");
		char target[300];
		if (!cJSON_IsNumber(id) || !cJSON_IsString(kind) || !cJSON_IsString(host) ||
		    !cJSON_IsNumber(port) || !cJSON_IsNumber(ms))
			continue;
		if (port->valueint)
			snprintf(target, sizeof(target), "%s:%d", host->valuestring, port->valueint);
		else
			snprintf(target, sizeof(target), "%s", host->valuestring);
		if (!c->shown++)
			printf("%-20s %6s %-8s %-40s %s\n", "SANDBOX", "ID", "KIND", "HOST", "WAITING");
		printf("%-20s %6.0f %-8s %-40s %.0fs\n", name, id->valuedouble, kind->valuestring, target,
		       ms->valuedouble / 1000);
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
		return fputs(usage_text, stderr), 2;
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

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc == 4 && approval_answer_parse(argv[1], &a) == 0)
		return answer(argv[1], argv[2], argv[3]);
	if (argc <= 2 && (argc == 1 || argv[1][0] != '-'))
		return list(argc == 2 ? argv[1] : NULL);
	fputs(usage_text, stderr);
	return 2;
}
