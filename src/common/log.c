#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static enum log_level log_level = LOG_WARN;

void log_set_level(enum log_level lvl) { log_level = lvl; }

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	char buf[1024];
	va_list ap;

	if (lvl > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* One fprintf per line so that lines from several threads do not interleave. */
	fprintf(stderr, "kosa8: %s: %s\n", names[lvl], buf);
}

#define ONCE_SLOTS 256

static struct {
	uint32_t kind;
	uint64_t key;
	bool used;
} once_table[ONCE_SLOTS];
static unsigned once_used;
static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;

bool log_first_time(uint32_t kind, uint64_t key)
{
	bool first = false;

	pthread_mutex_lock(&once_lock);
	for (unsigned i = 0; i < once_used; i++) {
		if (once_table[i].kind == kind && once_table[i].key == key)
			goto out;
	}
	if (once_used < ONCE_SLOTS) {
		once_table[once_used].kind = kind;
		once_table[once_used].key = key;
		once_table[once_used].used = true;
		once_used++;
		first = true;
	}
out:
	pthread_mutex_unlock(&once_lock);
	return first;
}
