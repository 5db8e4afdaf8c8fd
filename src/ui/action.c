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

int ui_action_parse(const char *body, size_t len, struct ui_action *a, const char **why)
{
	const cJSON *sb, *id, *ans;
	cJSON *j;
	int err = 0;

	memset(a, 0, sizeof(*a));
	if (len > UI_BODY_MAX)
		return fail(why, "body too large");
	if (!(j = cJSON_ParseWithLength(body, len)) || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return fail(why, "body is not a JSON object");
	}
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
