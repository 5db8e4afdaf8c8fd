#include "ui/action.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

static int fail(const char **why, const char *what)
{
	*why = what;
	return -EINVAL;
}

/* The body as a JSON object, or NULL with *why set. */
static cJSON *object(const char *body, size_t len, const char **why)
{
	cJSON *j;

	if (len > UI_BODY_MAX) {
		fail(why, "body too large");
		return NULL;
	}
	if (!(j = cJSON_ParseWithLength(body, len)) || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		fail(why, "body is not a JSON object");
		return NULL;
	}
	return j;
}

static const char *string(const cJSON *j, const char *key)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, key));
}

int ui_action_parse(const char *body, size_t len, struct ui_action *a, const char **why)
{
	const cJSON *sb, *id, *ans;
	cJSON *j;
	int err = 0;

	memset(a, 0, sizeof(*a));
	if (!(j = object(body, len, why)))
		return -EINVAL;
	sb = cJSON_GetObjectItemCaseSensitive(j, "sandbox");
	id = cJSON_GetObjectItemCaseSensitive(j, "id");
	ans = cJSON_GetObjectItemCaseSensitive(j, "answer");
	if (!cJSON_IsString(sb) || !sandbox_name_valid(sb->valuestring))
		err = fail(why, "no valid sandbox name");
	/* Integral, positive, exact in a double. */
	else if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 9007199254740992.0 ||
		 id->valuedouble != (double)(uint64_t)id->valuedouble)
		err = fail(why, "no valid request id");
	else if (!cJSON_IsString(ans) || (strcmp(ans->valuestring, "allow") &&
					  strcmp(ans->valuestring, "always") &&
					  strcmp(ans->valuestring, "deny")))
		err = fail(why, "answer is not allow, always or deny");
	if (!err) {
		snprintf(a->sandbox, sizeof(a->sandbox), "%s", sb->valuestring);
		a->id = (uint64_t)id->valuedouble;
		snprintf(a->answer, sizeof(a->answer), "%s", ans->valuestring);
	}
	cJSON_Delete(j);
	return err;
}

int ui_ckpt_action_parse(const char *body, size_t len, struct ui_ckpt_action *a, const char **why)
{
	const char *sb, *op, *id, *name;
	cJSON *j;
	int err = 0;

	memset(a, 0, sizeof(*a));
	if (!(j = object(body, len, why)))
		return -EINVAL;
	sb = string(j, "sandbox");
	op = string(j, "op");
	id = string(j, "checkpoint");
	name = string(j, "name");
	if (!sb || !sandbox_name_valid(sb))
		err = fail(why, "no valid sandbox name");
	else if (!op || (strcmp(op, "rewind") && strcmp(op, "fork")))
		err = fail(why, "op is not rewind or fork");
	else if (!id || !ckpt_id_valid(id))
		err = fail(why, "no valid checkpoint id");
	else if (!strcmp(op, "fork") && (!name || !sandbox_name_valid(name)))
		err = fail(why, "a fork needs a valid name: 1-63 of a-z 0-9 . _ -, starting with a letter or digit");
	else if (!strcmp(op, "rewind") && cJSON_GetObjectItemCaseSensitive(j, "name"))
		err = fail(why, "a rewind takes no name");
	if (!err) {
		snprintf(a->sandbox, sizeof(a->sandbox), "%s", sb);
		snprintf(a->op, sizeof(a->op), "%s", op);
		snprintf(a->checkpoint, sizeof(a->checkpoint), "%s", id);
		snprintf(a->name, sizeof(a->name), "%s", name ? name : "");
	}
	cJSON_Delete(j);
	return err;
}
