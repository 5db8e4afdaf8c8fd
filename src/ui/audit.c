#include "ui/audit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ui/run.h"

/* One view at a time: each runs a whole verify.  The records alone (the
 * live egress timeline) have their own lock, so a long verify does not
 * hold them up. */
static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;

static cJSON *verify(void)
{
	static char *const argv[] = {"kosa8", "audit", "verify", NULL};
	struct ui_tail t = {.cap = UI_AUDIT_OUT_MAX};
	cJSON *v = cJSON_CreateObject();
	int rc;

	if (!(t.buf = malloc(t.cap + 1)))
		return v;
	rc = ui_run_self(argv, &t, true, UI_AUDIT_TIMEOUT_S);
	cJSON_AddNumberToObject(v, "status", rc);
	cJSON_AddStringToObject(v, "text", t.buf);
	free(t.buf);
	return v;
}

/* The newest records of `audit show --json`, one object a line. */
static cJSON *records(void)
{
	static char *const argv[] = {"kosa8", "audit", "show", "--json", NULL};
	struct ui_tail t = {.cap = UI_AUDIT_RECORDS * 2048};
	cJSON *arr = cJSON_CreateArray();
	char *line, *next;

	if (!(t.buf = malloc(t.cap + 1)))
		return arr;
	ui_run_self(argv, &t, false, UI_AUDIT_TIMEOUT_S);
	line = t.buf;
	if (t.cut && (next = strchr(line, '\n')))
		line = next + 1;   /* the first line may be cut */
	for (; *line; line = next) {
		cJSON *r;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if ((r = cJSON_Parse(line)))
			cJSON_AddItemToArray(arr, r);
	}
	while (cJSON_GetArraySize(arr) > UI_AUDIT_RECORDS)
		cJSON_DeleteItemFromArray(arr, 0);
	free(t.buf);
	return arr;
}

/* What a view has (the verify when with_verify), made under lock, one at
 * a time: -EBUSY otherwise. */
static cJSON *view(pthread_mutex_t *lock, bool with_verify, int *err)
{
	cJSON *o;

	if (pthread_mutex_trylock(lock)) {
		*err = -EBUSY;
		return NULL;
	}
	o = cJSON_CreateObject();
	if (with_verify)
		cJSON_AddItemToObject(o, "verify", verify());
	cJSON_AddItemToObject(o, "records", records());
	pthread_mutex_unlock(lock);
	*err = 0;
	return o;
}

cJSON *ui_audit_read(int *err)
{
	return view(&audit_lock, true, err);
}

cJSON *ui_audit_records(int *err)
{
	return view(&records_lock, false, err);
}
