/* Redaction of secret values and their runs, plain and encoded (redact.h). */
#include "proxy/redact.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "common/util.h"

#define VALUE_MAX 8192
/* The longest text one decoded byte can take (an escape such as
 * "&#x10FFFF;"), and so one REDACT_RUN-byte window.  Context kept before
 * the unemitted bytes must cover a window that began there, plus a
 * partial escape or base64 group. */
#define ESC_MAX 10
#define SPAN_MAX (ESC_MAX * REDACT_RUN)
#define CONTEXT (SPAN_MAX + 16)
#define VIEW_MAX 4096

/* A set of packed windows of one length, open addressing; 0 is empty (a
 * value has no NUL, so no window packs to 0). */
struct wtable {
	uint64_t *slot;
	size_t mask, n;
};

struct rvalue {
	uint8_t *v;
	size_t len;
	char *placeholder;
};

struct redact_set {
	struct rvalue val[REDACT_VALUES_MAX];
	size_t nval, longest;
	bool has_space;          /* '+' may stand for a space */
	struct wtable win[REDACT_RUN + 1];   /* by window length */
	size_t wmin;             /* the shortest length with windows */
	/* Which two bytes start some window: most text fails this test and
	 * never reaches the hash. */
	uint64_t pairs[65536 / 64];
};

static size_t pair_of(const uint8_t *p)
{
	return (size_t)p[0] << 8 | p[1];
}

static uint64_t pack(const uint8_t *p, size_t w)
{
	uint64_t k = 0;

	for (size_t i = 0; i < w; i++)
		k |= (uint64_t)p[i] << (8 * i);
	return k;
}

static size_t slot_of(const struct wtable *t, uint64_t k)
{
	return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & t->mask;
}

static bool wt_has(const struct wtable *t, uint64_t k)
{
	if (!t->n || !k)
		return false;
	for (size_t i = slot_of(t, k);; i = (i + 1) & t->mask) {
		if (t->slot[i] == k)
			return true;
		if (!t->slot[i])
			return false;
	}
}

static int wt_put(struct wtable *t, uint64_t k)
{
	if (wt_has(t, k))
		return 0;
	if (2 * (t->n + 1) > t->mask + 1 || !t->slot) {
		struct wtable g = {.mask = t->slot ? 2 * t->mask + 1 : 63};
		if (!(g.slot = calloc(g.mask + 1, sizeof(*g.slot))))
			return -ENOMEM;
		for (size_t i = 0; t->slot && i <= t->mask; i++) {
			if (t->slot[i]) {
				size_t j = slot_of(&g, t->slot[i]);
				while (g.slot[j])
					j = (j + 1) & g.mask;
				g.slot[j] = t->slot[i];
				g.n++;
			}
		}
		free(t->slot);
		*t = g;
	}
	size_t j = slot_of(t, k);
	while (t->slot[j])
		j = (j + 1) & t->mask;
	t->slot[j] = k;
	t->n++;
	return 0;
}

int redact_set_new(struct redact_set **out)
{
	return (*out = calloc(1, sizeof(**out))) ? 0 : -ENOMEM;
}

int redact_set_add(struct redact_set *rs, const char *value, size_t len, const char *placeholder)
{
	struct rvalue *v;
	size_t w = len < REDACT_RUN ? len : REDACT_RUN;
	int err;

	if (!len || len > VALUE_MAX || memchr(value, 0, len))
		return -EINVAL;
	if (rs->nval == REDACT_VALUES_MAX)
		return -E2BIG;
	v = &rs->val[rs->nval];
	if (!(v->v = malloc(len)) || !(v->placeholder = strdup(placeholder))) {
		free(v->v);
		return -ENOMEM;
	}
	memcpy(v->v, value, len);
	v->len = len;
	rs->nval++;
	if (len > rs->longest)
		rs->longest = len;
	if (!rs->wmin || w < rs->wmin)
		rs->wmin = w;
	if (memchr(value, ' ', len))
		rs->has_space = true;
	for (size_t i = 0; i + w <= len; i++) {
		if ((err = wt_put(&rs->win[w], pack(v->v + i, w))))
			return err;
		if (w >= 2)
			rs->pairs[pair_of(v->v + i) / 64] |= 1ull << (pair_of(v->v + i) % 64);
	}
	return 0;
}

void redact_set_free(struct redact_set *rs)
{
	if (!rs)
		return;
	for (size_t i = 0; i < rs->nval; i++) {
		OPENSSL_cleanse(rs->val[i].v, rs->val[i].len);
		free(rs->val[i].v);
		free(rs->val[i].placeholder);
	}
	for (size_t w = 0; w <= REDACT_RUN; w++) {
		if (rs->win[w].slot)
			OPENSSL_cleanse(rs->win[w].slot, (rs->win[w].mask + 1) * sizeof(uint64_t));
		free(rs->win[w].slot);
	}
	free(rs);
}

/* ---- decoding views ---- */

/* A run of decoded bytes, each with the span of text it came from. */
struct redact_view {
	uint8_t b[VIEW_MAX];
	uint32_t s[VIEW_MAX], e[VIEW_MAX];
	size_t n;
};

struct scan {
	const struct redact_set *rs;
	uint8_t *mark;
	struct redact_view *v;
};

/* Looks up every window of the run so far and marks what matched. */
static void lookup(struct scan *sc)
{
	struct redact_view *v = sc->v;

	/* Most runs (a hex view of text, say) are shorter than any window. */
	if (!sc->rs->wmin || v->n < sc->rs->wmin)
		return;
	for (size_t w = sc->rs->wmin; w <= REDACT_RUN; w++) {
		if (!sc->rs->win[w].n)
			continue;
		for (size_t k = 0; k + w <= v->n; k++) {
			size_t pr = w >= 2 ? pair_of(v->b + k) : 0;
			if (w >= 2 && !(sc->rs->pairs[pr / 64] >> (pr % 64) & 1))
				continue;
			if (wt_has(&sc->rs->win[w], pack(v->b + k, w)))
				memset(sc->mark + v->s[k], 1, v->e[k + w - 1] - v->s[k]);
		}
	}
}

/* The run ends here. */
static void flush(struct scan *sc)
{
	lookup(sc);
	sc->v->n = 0;
}

/* A long run: look up what is there, keep a window's worth less one, so
 * that no window is lost at the cut.  Out of line, so that push (once per
 * decoded byte of every view) stays small enough to inline. */
static __attribute__((noinline)) void cut_run(struct scan *sc)
{
	struct redact_view *v = sc->v;

	lookup(sc);
	memmove(v->b, v->b + v->n - (REDACT_RUN - 1), REDACT_RUN - 1);
	memmove(v->s, v->s + v->n - (REDACT_RUN - 1), (REDACT_RUN - 1) * sizeof(v->s[0]));
	memmove(v->e, v->e + v->n - (REDACT_RUN - 1), (REDACT_RUN - 1) * sizeof(v->e[0]));
	v->n = REDACT_RUN - 1;
}

static inline void push(struct scan *sc, uint8_t b, size_t s, size_t e)
{
	struct redact_view *v = sc->v;

	if (v->n == VIEW_MAX)
		cut_run(sc);
	v->b[v->n] = b;
	v->s[v->n] = (uint32_t)s;
	v->e[v->n] = (uint32_t)e;
	v->n++;
}

static int b64val(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' || c == '-' ? 62 : c == '/' || c == '_' ? 63 : -1;
}

static void view_plain(struct scan *sc, const uint8_t *t, size_t len)
{
	for (size_t i = 0; i < len; i++)
		push(sc, t[i], i, i + 1);
	flush(sc);
}

static void view_hex(struct scan *sc, const uint8_t *t, size_t len, size_t a)
{
	for (size_t i = a; i + 1 < len; i += 2) {
		int hi = hex_digit(t[i]), lo = hex_digit(t[i + 1]);
		if (hi < 0 || lo < 0)
			flush(sc);
		else
			push(sc, (uint8_t)(hi << 4 | lo), i, i + 2);
	}
	flush(sc);
}

/* Groups of four characters from offset a; a group cut short (padding,
 * the end of the text, another character) gives its first bytes and ends
 * the run. */
static void view_b64(struct scan *sc, const uint8_t *t, size_t len, size_t a)
{
	for (size_t i = a; i < len; i += 4) {
		int v[4];
		size_t c = 0;
		while (c < 4 && i + c < len && (v[c] = b64val(t[i + c])) >= 0)
			c++;
		if (c >= 2)
			push(sc, (uint8_t)(v[0] << 2 | v[1] >> 4), i, i + 2);
		if (c >= 3)
			push(sc, (uint8_t)(v[1] << 4 | v[2] >> 2), i + 1, i + 3);
		if (c == 4)
			push(sc, (uint8_t)(v[2] << 6 | v[3]), i + 2, i + 4);
		else
			flush(sc);
	}
	flush(sc);
}

static void view_percent(struct scan *sc, const uint8_t *t, size_t len, bool plus_space)
{
	for (size_t i = 0; i < len;) {
		int hi, lo;
		if (t[i] == '%' && i + 2 < len && (hi = hex_digit(t[i + 1])) >= 0 && (lo = hex_digit(t[i + 2])) >= 0) {
			push(sc, (uint8_t)(hi << 4 | lo), i, i + 3);
			i += 3;
		} else {
			push(sc, plus_space && t[i] == '+' ? ' ' : t[i], i, i + 1);
			i++;
		}
	}
	flush(sc);
}

/* A code point as the UTF-8 bytes it stands for, all from one span. */
static void push_utf8(struct scan *sc, uint32_t cp, size_t s, size_t e)
{
	if (cp < 0x80) {
		push(sc, (uint8_t)cp, s, e);
	} else if (cp < 0x800) {
		push(sc, (uint8_t)(0xc0 | cp >> 6), s, e);
		push(sc, (uint8_t)(0x80 | (cp & 0x3f)), s, e);
	} else if (cp < 0x10000) {
		push(sc, (uint8_t)(0xe0 | cp >> 12), s, e);
		push(sc, (uint8_t)(0x80 | (cp >> 6 & 0x3f)), s, e);
		push(sc, (uint8_t)(0x80 | (cp & 0x3f)), s, e);
	} else {
		push(sc, (uint8_t)(0xf0 | cp >> 18), s, e);
		push(sc, (uint8_t)(0x80 | (cp >> 12 & 0x3f)), s, e);
		push(sc, (uint8_t)(0x80 | (cp >> 6 & 0x3f)), s, e);
		push(sc, (uint8_t)(0x80 | (cp & 0x3f)), s, e);
	}
}

/* Digits in base from t[i], at most max of them, ended by term (0: no
 * terminator).  Returns the text used, 0 if it is not such a number. */
static size_t number(const uint8_t *t, size_t len, size_t i, int base, size_t max, uint8_t term,
		     uint32_t *cp)
{
	size_t k = 0;
	int d;

	*cp = 0;
	while (k < max && i + k < len && (d = hex_digit(t[i + k])) >= 0 && d < base) {
		*cp = *cp * (uint32_t)base + (uint32_t)d;
		k++;
	}
	if (!k || *cp > 0x10ffff)
		return 0;
	if (!term)
		return k == max ? k : 0;
	return i + k < len && t[i + k] == term ? k + 1 : 0;
}

/* The length of the escape at t[i] (JSON, JavaScript, HTML) and what it
 * stands for, or 0. */
static size_t escape_at(const uint8_t *t, size_t len, size_t i, uint32_t *cp)
{
	static const struct {
		const char *name;
		char c;
	} ent[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
	size_t n;

	if (t[i] == '\\' && i + 1 < len) {
		uint8_t c = t[i + 1];
		if (c == '/' || c == '\\' || c == '"' || c == '\'') {
			*cp = c;
			return 2;
		}
		if (c == 'u' && (n = number(t, len, i + 2, 16, 4, 0, cp)))
			return 2 + n;
		if (c == 'x' && (n = number(t, len, i + 2, 16, 2, 0, cp)))
			return 2 + n;
		return 0;
	}
	if (t[i] != '&')
		return 0;
	if (i + 2 < len && t[i + 1] == '#' && (t[i + 2] | 0x20) == 'x' &&
	    (n = number(t, len, i + 3, 16, 6, ';', cp)))
		return 3 + n;
	if (i + 1 < len && t[i + 1] == '#' && (n = number(t, len, i + 2, 10, 7, ';', cp)))
		return 2 + n;
	for (size_t k = 0; k < sizeof(ent) / sizeof(ent[0]); k++) {
		n = strlen(ent[k].name);
		if (n <= len - i && !memcmp(t + i, ent[k].name, n)) {
			*cp = (uint8_t)ent[k].c;
			return n;
		}
	}
	return 0;
}

/* JSON and JavaScript backslash escapes, HTML character references: a
 * value echoed inside a JSON string or an HTML page. */
static void view_escapes(struct scan *sc, const uint8_t *t, size_t len)
{
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n = escape_at(t, len, i, &cp);
		if (n) {
			push_utf8(sc, cp, i, i + n);
			i += n;
		} else {
			push(sc, t[i], i, i + 1);
			i++;
		}
	}
	flush(sc);
}

static void mark_all(const struct redact_set *rs, const uint8_t *t, size_t len, uint8_t *mark,
		     struct redact_view *v)
{
	struct scan sc = {rs, mark, v};
	bool pct = memchr(t, '%', len);

	v->n = 0;
	memset(mark, 0, len);
	view_plain(&sc, t, len);
	/* Text with nothing to unescape decodes to the plain view again:
	 * the same windows, nothing more to mark. */
	if (pct) {
		view_percent(&sc, t, len, false);
		if (rs->has_space)
			view_percent(&sc, t, len, true);
	} else if (rs->has_space && memchr(t, '+', len)) {
		view_percent(&sc, t, len, true);
	}
	if (memchr(t, '\\', len) || memchr(t, '&', len))
		view_escapes(&sc, t, len);
	for (size_t a = 0; a < 2; a++)
		view_hex(&sc, t, len, a);
	for (size_t a = 0; a < 4; a++)
		view_b64(&sc, t, len, a);
}

/* ---- the stream ---- */

void redactor_init(struct redactor *r, const struct redact_set *rs)
{
	*r = (struct redactor){.rs = rs};
}

void redactor_free(struct redactor *r)
{
	if (r->buf)
		OPENSSL_cleanse(r->buf, r->cap);
	if (r->view)
		OPENSSL_cleanse(r->view, sizeof(*r->view));
	free(r->buf);
	free(r->mark);
	free(r->view);
	r->buf = r->mark = NULL;
	r->view = NULL;
	r->len = r->cap = r->ctx = 0;
}

static int grow(struct redactor *r, size_t need)
{
	uint8_t *nb, *nm;
	size_t cap = r->cap ? r->cap : 4096;

	if (need <= r->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (!(nb = malloc(cap)) || !(nm = malloc(cap))) {
		free(nb);
		return -ENOMEM;
	}
	if (r->buf) {
		memcpy(nb, r->buf, r->len);
		OPENSSL_cleanse(r->buf, r->cap);
	}
	free(r->buf);
	free(r->mark);
	r->buf = nb;
	r->mark = nm;
	r->cap = cap;
	return 0;
}

/* The longest value whose literal occurrence starts at i, if any. */
static const struct rvalue *literal_at(const struct redact_set *rs, const uint8_t *t, size_t len,
				       size_t i)
{
	const struct rvalue *best = NULL;

	for (size_t k = 0; k < rs->nval; k++) {
		const struct rvalue *v = &rs->val[k];
		if (v->len <= len - i && (!best || v->len > best->len) && !memcmp(t + i, v->v, v->len))
			best = v;
	}
	return best;
}

/* Emits buf[ctx, end) redacted; returns where it stopped (a placeholder
 * may carry it past end), or -errno. */
static long emit_upto(struct redactor *r, size_t end, redact_emit_fn emit, void *arg)
{
	size_t i = r->ctx, plain = i;
	int err;

	while (i < end) {
		const struct rvalue *v;
		if (!r->mark[i]) {
			r->in_run = false;
			i++;
			continue;
		}
		if ((err = emit(arg, r->buf + plain, i - plain)))
			return err;
		if ((v = literal_at(r->rs, r->buf, r->len, i))) {
			if ((err = emit(arg, (const uint8_t *)v->placeholder, strlen(v->placeholder))))
				return err;
			i += v->len;
			r->in_run = false;
		} else {
			if (!r->in_run && (err = emit(arg, (const uint8_t *)REDACT_MARK, strlen(REDACT_MARK))))
				return err;
			r->in_run = true;
			i++;
		}
		plain = i;
	}
	if ((err = emit(arg, r->buf + plain, i - plain)))
		return err;
	return (long)i;
}

int redactor_feed(struct redactor *r, const uint8_t *in, size_t n, bool final, redact_emit_fn emit,
		  void *arg)
{
	size_t hold = r->rs->longest > SPAN_MAX ? r->rs->longest - 1 : SPAN_MAX - 1, end;
	long done;
	int err;

	if (!r->len && !n) {
		r->ctx = 0;
		r->in_run = false;
		return 0;   /* nothing held, nothing to say (buf may be NULL) */
	}
	if ((err = grow(r, r->len + n)))
		return err;
	if (n)
		memcpy(r->buf + r->len, in, n);
	r->len += n;
	end = final ? r->len : r->len > r->ctx + hold ? r->len - hold : r->ctx;
	if (end == r->ctx && !final)
		return 0;
	if (!r->view && !(r->view = malloc(sizeof(*r->view))))
		return -ENOMEM;
	mark_all(r->rs, r->buf, r->len, r->mark, r->view);
	if ((done = emit_upto(r, end, emit, arg)) < 0)
		return (int)done;
	if (final) {
		OPENSSL_cleanse(r->buf, r->len);
		r->len = r->ctx = 0;
		r->in_run = false;
		return 0;
	}
	/* Keep CONTEXT emitted bytes before what is still to come. */
	size_t drop = (size_t)done > CONTEXT ? (size_t)done - CONTEXT : 0;
	memmove(r->buf, r->buf + drop, r->len - drop);
	OPENSSL_cleanse(r->buf + r->len - drop, drop);
	r->len -= drop;
	r->ctx = (size_t)done - drop;
	return 0;
}
