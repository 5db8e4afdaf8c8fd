/* Keeps secret values out of what a server sends back to the guest.
 *
 * A server may reflect a secret it was sent: whole, in part, or encoded.
 * The redactor removes from a byte stream every run of at least
 * REDACT_RUN bytes of any secret value (the whole value when it is
 * shorter), found
 *
 *   - as it is,
 *   - in hex (upper, lower or mixed case, either digit alignment),
 *   - in base64 or base64url (any of the four character alignments, so
 *     any byte offset of the value; padded or not),
 *   - percent-encoded (%XX in either case mixed with plain bytes; '+' as a
 *     space too when a value holds a space),
 *   - escaped as in a JSON or JavaScript string (\/ \" \\ \uXXXX \xXX) or
 *     an HTML page (&#NN; &#xHH; &amp; &lt; &gt; &quot; &apos;),
 *
 * by decoding the text each of those ways and looking up every window of
 * REDACT_RUN decoded bytes among the windows of the values.  A run that
 * is a whole value as it is becomes that secret's placeholder (the guest
 * knows it, and a response echoing the key reads as it did before); any
 * other run of marked bytes becomes REDACT_MARK.
 *
 * Streaming: a feed may end anywhere (inside a value, a %XX, a base64
 * group).  The redactor holds back the last bytes that may still start a
 * match and keeps a little emitted context to see a run that crosses the
 * boundary; it emits the rest through a callback. */
#ifndef KOSA8_PROXY_REDACT_H
#define KOSA8_PROXY_REDACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REDACT_RUN 8
#define REDACT_MARK "[k8s-redacted]"
#define REDACT_VALUES_MAX 64

/* The values to keep out, built once (per sandbox) and shared read-only. */
struct redact_set;

/* An empty set. -ENOMEM. */
int redact_set_new(struct redact_set **out);
/* Adds a value (1..8192 bytes, no NUL) and what a whole literal occurrence
 * becomes.  Both are copied.  -EINVAL, -E2BIG past REDACT_VALUES_MAX,
 * -ENOMEM. */
int redact_set_add(struct redact_set *rs, const char *value, size_t len, const char *placeholder);
/* Wipes and frees. */
void redact_set_free(struct redact_set *rs);

typedef int (*redact_emit_fn)(void *arg, const uint8_t *p, size_t n);

/* One stream being redacted. */
struct redactor {
	const struct redact_set *rs;
	uint8_t *buf;            /* emitted context, then bytes not yet emitted */
	uint8_t *mark;
	struct redact_view *view;   /* decoding scratch, kept for the stream */
	size_t len, cap, ctx;
	bool in_run;             /* the last byte emitted was in a marked run */
};

void redactor_init(struct redactor *r, const struct redact_set *rs);
/* Takes n more bytes; emits what is decided.  final: the stream ends here,
 * emit everything (the redactor is then ready for a new stream).  Returns
 * 0, emit's error or -ENOMEM. */
int redactor_feed(struct redactor *r, const uint8_t *in, size_t n, bool final, redact_emit_fn emit,
		  void *arg);
/* Wipes and frees what the redactor holds. */
void redactor_free(struct redactor *r);

#endif
