/* Logging for kosa8: one line per message on stderr, prefixed with the
 * program name.  log_once() keeps a small table of keys so that a guest
 * hammering an unhandled port cannot flood the host's terminal or disk. */
#ifndef KOSA8_LOG_H
#define KOSA8_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_set_level(enum log_level lvl);
void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Returns true the first time it sees (kind, key), false afterwards.
 * Thread-safe; the table is bounded, and once full every key counts as seen. */
bool log_first_time(uint32_t kind, uint64_t key);

#define log_err(...)   log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#define log_once(kind, key, ...)                                   \
	do {                                                       \
		if (log_first_time((kind), (key)))                 \
			log_msg(LOG_INFO, __VA_ARGS__);            \
	} while (0)

/* For a guest that broke a device's rules (a malformed chain, a hostile
 * packet): worth the operator's eye at the default level, once.  Normal
 * guests never trigger these; log_once is for what they may. */
#define log_warn_once(kind, key, ...)                              \
	do {                                                       \
		if (log_first_time((kind), (key)))                 \
			log_msg(LOG_WARN, __VA_ARGS__);            \
	} while (0)

#endif
