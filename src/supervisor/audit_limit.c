/* Coalescing of the records a guest causes: see audit_limit.h. */
#include "supervisor/audit_limit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define KEY_MAX 1024         /* a kind's key; longer ones are cut (names are <= 255) */
#define OVERFLOW_SLOTS 16    /* (type, decision) pairs counted apart; then "other" */
#define OVERFLOW_KEY 96

/* Numbers that say how much, not which: summed over repeats. */
static const char *const amounts[] = {"bytes_up", "bytes_down", "requests", "duration_ms"};

struct kind {
	char *key;
	char *type;
	cJSON *sum;          /* the first record's details, amounts summed over repeats */
	uint64_t repeats;    /* since the first, in this interval */
};

struct overflow {
	char key[OVERFLOW_KEY];  /* "net.dns deny" */
	uint64_t n;
};

struct audit_limit {
	struct audit_limit_opts o;
	pthread_mutex_t lock;
	uint64_t start;          /* this interval's */
	bool started;
	struct kind *kinds;
	unsigned nkinds;
	struct overflow over[OVERFLOW_SLOTS + 1];
	unsigned nover;
	uint64_t over_total;
};

static uint64_t now(const struct audit_limit *l)
{
	return l->o.now_ms ? l->o.now_ms(l->o.clock_arg) : mono_ms();
}

static bool is_amount(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(amounts); i++)
		if (!strcmp(name, amounts[i]))
			return true;
	return false;
}

static void key_add(char *key, size_t *len, const char *k, const char *v)
{
	int n = snprintf(key + *len, KEY_MAX - *len, "%s=%s\x1f", k, v);

	if (n > 0)
		*len = *len + (size_t)n < KEY_MAX ? *len + (size_t)n : KEY_MAX - 1;
}

/* type, then every field that says which event this is (not how much). */
static void make_key(const char *type, const cJSON *d, char *key)
{
	size_t len = 0;
	const cJSON *c;
	char num[32];

	key_add(key, &len, "type", type);
	cJSON_ArrayForEach(c, d) {
		if (!c->string || is_amount(c->string))
			continue;
		if (cJSON_IsString(c)) {
			key_add(key, &len, c->string, c->valuestring);
		} else if (cJSON_IsBool(c)) {
			key_add(key, &len, c->string, cJSON_IsTrue(c) ? "true" : "false");
		} else if (cJSON_IsNumber(c)) {
			snprintf(num, sizeof(num), "%.17g", c->valuedouble);
			key_add(key, &len, c->string, num);
		}
	}
}

static void add_amounts(cJSON *sum, const cJSON *d)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, d) {
		if (!c->string || !cJSON_IsNumber(c) || !is_amount(c->string))
			continue;
		cJSON *s = cJSON_GetObjectItemCaseSensitive(sum, c->string);
		if (cJSON_IsNumber(s))
			cJSON_SetNumberValue(s, s->valuedouble + c->valuedouble);
		else
			cJSON_AddNumberToObject(sum, c->string, c->valuedouble);
	}
}

static void count_overflow(struct audit_limit *l, const char *type, const cJSON *d)
{
	const cJSON *dec = cJSON_GetObjectItemCaseSensitive(d, "decision");
	char key[OVERFLOW_KEY];
	unsigned i;

	snprintf(key, sizeof(key), "%s%s%s", type, cJSON_IsString(dec) ? " " : "",
		 cJSON_IsString(dec) ? dec->valuestring : "");
	for (i = 0; i < l->nover; i++)
		if (!strcmp(l->over[i].key, key))
			break;
	if (i == l->nover) {
		if (l->nover == OVERFLOW_SLOTS)
			i = OVERFLOW_SLOTS; /* the last slot counts everything else */
		else
			l->nover++;
		snprintf(l->over[i].key, sizeof(l->over[i].key), "%s", i == OVERFLOW_SLOTS ? "other" : key);
	}
	l->over[i].n++;
	l->over_total++;
}

/* Writes the interval's summaries and starts a new one at t (lock held). */
static void end_interval(struct audit_limit *l, uint64_t t)
{
	for (unsigned i = 0; i < l->nkinds; i++) {
		struct kind *k = &l->kinds[i];
		if (k->repeats) {
			cJSON_AddNumberToObject(k->sum, "repeats", (double)k->repeats);
			cJSON_AddNumberToObject(k->sum, "interval_ms", (double)l->o.interval_ms);
			l->o.emit(l->o.emit_arg, k->type, k->sum);
		} else {
			cJSON_Delete(k->sum);
		}
		free(k->key);
		free(k->type);
	}
	l->nkinds = 0;
	if (l->over_total) {
		cJSON *d = cJSON_CreateObject(), *counts = cJSON_AddObjectToObject(d, "counts");
		for (unsigned i = 0; i <= OVERFLOW_SLOTS; i++)
			if (l->over[i].n)
				cJSON_AddNumberToObject(counts, l->over[i].key, (double)l->over[i].n);
		cJSON_AddNumberToObject(d, "records", (double)l->over_total);
		cJSON_AddNumberToObject(d, "max_kinds", l->o.max_kinds);
		cJSON_AddNumberToObject(d, "interval_ms", (double)l->o.interval_ms);
		l->o.emit(l->o.emit_arg, "audit.overflow", d);
	}
	memset(l->over, 0, sizeof(l->over));
	l->nover = 0;
	l->over_total = 0;
	l->start = t;
}

static void maybe_end_interval(struct audit_limit *l, uint64_t t)
{
	if (!l->started) {
		l->started = true;
		l->start = t;
	} else if (t - l->start >= l->o.interval_ms) {
		end_interval(l, t);
	}
}

int audit_limit_new(const struct audit_limit_opts *o, struct audit_limit **out)
{
	struct audit_limit *l = calloc(1, sizeof(*l));

	if (!l || !o->emit) {
		free(l);
		return l ? -EINVAL : -ENOMEM;
	}
	l->o = *o;
	if (!l->o.interval_ms)
		l->o.interval_ms = AUDIT_LIMIT_INTERVAL_MS;
	if (!l->o.max_kinds)
		l->o.max_kinds = AUDIT_LIMIT_MAX_KINDS;
	if (!(l->kinds = calloc(l->o.max_kinds, sizeof(*l->kinds)))) {
		free(l);
		return -ENOMEM;
	}
	pthread_mutex_init(&l->lock, NULL);
	*out = l;
	return 0;
}

static struct kind *find_kind(struct audit_limit *l, const char *key)
{
	for (unsigned i = 0; i < l->nkinds; i++)
		if (!strcmp(l->kinds[i].key, key))
			return &l->kinds[i];
	return NULL;
}

/* A new kind in this interval: written at once, and kept to count repeats
 * (lock held).  false: no room (or memory) left, so only counted. */
static bool first_of_kind(struct audit_limit *l, const char *key, const char *type, cJSON *d)
{
	struct kind *k = &l->kinds[l->nkinds];

	if (l->nkinds == l->o.max_kinds)
		return false;
	k->key = strdup(key);
	k->type = strdup(type);
	k->sum = cJSON_Duplicate(d, true);
	if (!k->key || !k->type || !k->sum) {
		free(k->key);
		free(k->type);
		cJSON_Delete(k->sum);
		return false;
	}
	/* The summary sums the repeats' amounts only. */
	for (size_t i = 0; i < ARRAY_SIZE(amounts); i++)
		cJSON_DeleteItemFromObjectCaseSensitive(k->sum, amounts[i]);
	k->repeats = 0;
	l->nkinds++;
	l->o.emit(l->o.emit_arg, type, d);
	return true;
}

void audit_limit_event(struct audit_limit *l, const char *type, cJSON *details)
{
	char key[KEY_MAX];
	struct kind *k;

	if (!details)
		details = cJSON_CreateObject();
	make_key(type, details, key);
	pthread_mutex_lock(&l->lock);
	maybe_end_interval(l, now(l));
	if ((k = find_kind(l, key))) {
		k->repeats++;
		add_amounts(k->sum, details);
		cJSON_Delete(details);
	} else if (!first_of_kind(l, key, type, details)) {
		count_overflow(l, type, details);
		cJSON_Delete(details);
	}
	pthread_mutex_unlock(&l->lock);
}

void audit_limit_tick(struct audit_limit *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	if (l->started)
		maybe_end_interval(l, now(l));
	pthread_mutex_unlock(&l->lock);
}

void audit_limit_flush(struct audit_limit *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	end_interval(l, now(l));
	pthread_mutex_unlock(&l->lock);
}

void audit_limit_free(struct audit_limit *l)
{
	if (!l)
		return;
	audit_limit_flush(l);
	pthread_mutex_destroy(&l->lock);
	free(l->kinds);
	free(l);
}
