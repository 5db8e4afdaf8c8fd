/* Bounds-checked codec for the kosa8 agent protocol (docs/agent-protocol.md).
 * Integers on the wire are little-endian.  Every decoder returns -EBADMSG for
 * input that does not fit, never reads past len, and allocates only what the
 * (already size-limited) payload asks for. */
#include "agentproto/proto.h"

#include "common/guarded.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void le16(uint8_t *b, uint16_t v) { b[0] = v; b[1] = v >> 8; }
static void le32(uint8_t *b, uint32_t v) { le16(b, v); le16(b + 2, v >> 16); }
static uint16_t rd16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint32_t rd32(const uint8_t *b) { return rd16(b) | (uint32_t)rd16(b + 2) << 16; }

int ap_hdr_decode(const uint8_t *buf, struct ap_hdr *h)
{
	h->len = rd32(buf);
	h->type = rd16(buf + 4);
	h->flags = rd16(buf + 6);
	h->chan = rd32(buf + 8);
	if (h->len > AP_MAX_PAYLOAD || h->flags != 0 || h->type == 0 || h->type > AP_TYPE_MAX)
		return -EBADMSG;
	return 0;
}

void ap_hdr_encode(uint8_t *buf, uint16_t type, uint32_t chan, uint32_t len)
{
	le32(buf, len);
	le16(buf + 4, type);
	le16(buf + 6, 0);
	le32(buf + 8, chan);
}

void ap_rd_init(struct ap_rd *r, const void *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->off = 0;
}

int ap_get_bytes(struct ap_rd *r, size_t n, const uint8_t **v)
{
	if (n > r->len - r->off)
		return -EBADMSG;
	*v = r->p + r->off;
	r->off += n;
	return 0;
}

int ap_get_u8(struct ap_rd *r, uint8_t *v)
{
	const uint8_t *b;
	int rc = ap_get_bytes(r, 1, &b);
	if (rc == 0)
		*v = b[0];
	return rc;
}

int ap_get_u16(struct ap_rd *r, uint16_t *v)
{
	const uint8_t *b;
	int rc = ap_get_bytes(r, 2, &b);
	if (rc == 0)
		*v = rd16(b);
	return rc;
}

int ap_get_u32(struct ap_rd *r, uint32_t *v)
{
	const uint8_t *b;
	int rc = ap_get_bytes(r, 4, &b);
	if (rc == 0)
		*v = rd32(b);
	return rc;
}

int ap_get_u64(struct ap_rd *r, uint64_t *v)
{
	const uint8_t *b;
	int rc = ap_get_bytes(r, 8, &b);
	if (rc == 0)
		*v = rd32(b) | (uint64_t)rd32(b + 4) << 32;
	return rc;
}

int ap_get_tlv(struct ap_rd *r, uint16_t *tag, const uint8_t **v, uint32_t *len)
{
	if (r->off == r->len)
		return 0;
	if (ap_get_u16(r, tag) || ap_get_u32(r, len) || ap_get_bytes(r, *len, v))
		return -EBADMSG;
	return 1;
}

void ap_wr_init(struct ap_wr *w)
{
	memset(w, 0, sizeof(*w));
}

void ap_wr_free(struct ap_wr *w)
{
	free(w->p);
	ap_wr_init(w);
}

void ap_put_bytes(struct ap_wr *w, const void *v, size_t n)
{
	if (w->err)
		return;
	if (n > w->cap - w->len) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap - w->len < n)
			cap *= 2;
		uint8_t *p = realloc(w->p, cap);
		if (!p) {
			w->err = -ENOMEM;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	if (n)
		memcpy(w->p + w->len, v, n);
	w->len += n;
}

void ap_put_u8(struct ap_wr *w, uint8_t v) { ap_put_bytes(w, &v, 1); }
void ap_put_u16(struct ap_wr *w, uint16_t v) { uint8_t b[2]; le16(b, v); ap_put_bytes(w, b, 2); }
void ap_put_u32(struct ap_wr *w, uint32_t v) { uint8_t b[4]; le32(b, v); ap_put_bytes(w, b, 4); }
void ap_put_u64(struct ap_wr *w, uint64_t v) { ap_put_u32(w, (uint32_t)v); ap_put_u32(w, v >> 32); }

void ap_put_tlv(struct ap_wr *w, uint16_t tag, const void *v, size_t n)
{
	ap_put_u16(w, tag);
	ap_put_u32(w, (uint32_t)n);
	ap_put_bytes(w, v, n);
}

void ap_put_tlv_str(struct ap_wr *w, uint16_t tag, const char *s)
{
	ap_put_tlv(w, tag, s, strlen(s));
}

int ap_wr_status(const struct ap_wr *w)
{
	return w->err;
}

/* A NUL-terminated copy of a wire string, refusing embedded NULs (they would
 * silently truncate an argument or a path). */
static int dup_str(const uint8_t *v, uint32_t len, char **out)
{
	if (memchr(v, 0, len))
		return -EBADMSG;
	char *s = malloc((size_t)len + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, v, len);
	s[len] = 0;
	*out = s;
	return 0;
}

static int set_once(char **slot, const uint8_t *v, uint32_t len)
{
	if (*slot)
		return -EBADMSG;
	return dup_str(v, len, slot);
}

static int push_str(char ***vec, size_t *n, const uint8_t *v, uint32_t len)
{
	if (*n >= AP_MAX_ARGS)
		return -E2BIG;
	char **nv = realloc(*vec, (*n + 2) * sizeof(char *));
	if (!nv)
		return -ENOMEM;
	*vec = nv;
	nv[*n + 1] = NULL;
	int rc = dup_str(v, len, &nv[*n]);
	if (rc == 0)
		(*n)++;
	else
		nv[*n] = NULL;
	return rc;
}

static int exec_field(struct ap_exec_req *q, uint16_t tag, const uint8_t *v, uint32_t len)
{
	struct ap_rd r;
	switch (tag) {
	case AP_T_ARG:
		return push_str(&q->argv, &q->argc, v, len);
	case AP_T_ENV:
		if (!memchr(v, '=', len) || len == 0 || v[0] == '=')
			return -EBADMSG;
		return push_str(&q->env, &q->envc, v, len);
	case AP_T_CWD:
		return set_once(&q->cwd, v, len);
	case AP_T_USER:
		return set_once(&q->user, v, len);
	case AP_T_TERM:
		return set_once(&q->term, v, len);
	case AP_T_PTY:
		ap_rd_init(&r, v, len);
		if (q->pty || len != 4 || ap_get_u16(&r, &q->rows) || ap_get_u16(&r, &q->cols))
			return -EBADMSG;
		q->pty = true;
		return 0;
	default:
		return -EBADMSG;
	}
}

int ap_exec_req_decode(const uint8_t *p, size_t len, struct ap_exec_req *q)
{
	struct ap_rd r;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vlen;
	int rc;

	memset(q, 0, sizeof(*q));
	ap_rd_init(&r, p, len);
	while ((rc = ap_get_tlv(&r, &tag, &v, &vlen)) == 1) {
		rc = exec_field(q, tag, v, vlen);
		if (rc)
			break;
	}
	if (rc == 0 && q->argc == 0)
		rc = -EBADMSG;
	if (rc)
		ap_exec_req_free(q);
	return rc;
}

static void free_vec(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

void ap_exec_req_free(struct ap_exec_req *q)
{
	free_vec(q->argv);
	free_vec(q->env);
	free(q->cwd);
	free(q->user);
	free(q->term);
	memset(q, 0, sizeof(*q));
}

int ap_path_req_decode(const uint8_t *p, size_t len, struct ap_path_req *q)
{
	struct ap_rd r;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vlen;
	int rc;

	memset(q, 0, sizeof(*q));
	ap_rd_init(&r, p, len);
	while ((rc = ap_get_tlv(&r, &tag, &v, &vlen)) == 1) {
		if (vlen > AP_MAX_PATH)
			rc = -ENAMETOOLONG;
		else if (tag == AP_T_PATH)
			rc = set_once(&q->path, v, vlen);
		else if (tag == AP_T_USER)
			rc = set_once(&q->user, v, vlen);
		else
			rc = -EBADMSG;
		if (rc)
			break;
	}
	if (rc == 0 && (!q->path || !q->path[0]))
		rc = -EBADMSG;
	if (rc)
		ap_path_req_free(q);
	return rc;
}

bool ap_hostname_valid(const char *s, size_t len)
{
	if (len == 0 || len > AP_HOSTNAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

void ap_hostname_from(const char *name, char out[AP_HOSTNAME_MAX + 1])
{
	size_t i;

	for (i = 0; i < AP_HOSTNAME_MAX && name[i]; i++)
		out[i] = ap_hostname_valid(&name[i], 1) ? name[i] : '-';
	out[i] = 0;
}

/* One AP_FIXUP field, each at most once (seen: bit per tag). */
static int fixup_field(struct ap_fixup_req *q, uint16_t tag, const uint8_t *v, uint32_t vlen,
		       unsigned *seen)
{
	if (tag < AP_T_SEED || tag > AP_T_MACHINE_ID || (*seen & (1u << tag)))
		return -EBADMSG;
	*seen |= 1u << tag;
	switch (tag) {
	case AP_T_SEED:
		if (vlen < AP_FIXUP_SEED_MIN || vlen > AP_FIXUP_SEED_MAX)
			return -EBADMSG;
		memcpy(q->seed, v, vlen);
		q->seed_len = vlen;
		return 0;
	case AP_T_TIME:
		if (vlen != 8)
			return -EBADMSG;
		for (int i = 7; i >= 0; i--)
			q->time_ns = q->time_ns << 8 | v[i];
		return 0;
	case AP_T_HOSTNAME:
		if (!ap_hostname_valid((const char *)v, vlen))
			return -EBADMSG;
		memcpy(q->hostname, v, vlen);
		q->hostname[vlen] = 0;
		return 0;
	default:
		if (vlen != sizeof(q->machine_id))
			return -EBADMSG;
		memcpy(q->machine_id, v, vlen);
		return 0;
	}
}

int ap_fixup_req_decode(const uint8_t *p, size_t len, struct ap_fixup_req *q)
{
	const unsigned ident = 1u << AP_T_HOSTNAME | 1u << AP_T_MACHINE_ID;
	struct ap_rd r;
	uint16_t tag;
	const uint8_t *v;
	uint32_t vlen;
	unsigned seen = 0;
	int rc;

	memset(q, 0, sizeof(*q));
	ap_rd_init(&r, p, len);
	while ((rc = ap_get_tlv(&r, &tag, &v, &vlen)) == 1)
		if ((rc = fixup_field(q, tag, v, vlen, &seen)))
			break;
	if (rc == 0 && (!(seen & 1u << AP_T_SEED) || !(seen & 1u << AP_T_TIME) ||
			((seen & ident) && (seen & ident) != ident)))
		rc = -EBADMSG;
	q->identity = rc == 0 && (seen & ident) == ident;
	return rc;
}

void ap_fixup_req_encode(struct ap_wr *w, const struct ap_fixup_req *q)
{
	uint8_t t[8];

	for (int i = 0; i < 8; i++)
		t[i] = (uint8_t)(q->time_ns >> (8 * i));
	ap_put_tlv(w, AP_T_SEED, q->seed, q->seed_len);
	ap_put_tlv(w, AP_T_TIME, t, sizeof(t));
	if (q->identity) {
		ap_put_tlv_str(w, AP_T_HOSTNAME, q->hostname);
		ap_put_tlv(w, AP_T_MACHINE_ID, q->machine_id, sizeof(q->machine_id));
	}
}

void ap_path_req_free(struct ap_path_req *q)
{
	free(q->path);
	free(q->user);
	memset(q, 0, sizeof(*q));
}

int ap_entry_decode(const uint8_t *p, size_t len, struct ap_entry *e)
{
	struct ap_rd r;
	uint8_t pad8;
	uint16_t pad16;
	const uint8_t *s;

	memset(e, 0, sizeof(*e));
	ap_rd_init(&r, p, len);
	if (ap_get_u8(&r, &e->kind) || ap_get_u8(&r, &pad8) || ap_get_u16(&r, &pad16) ||
	    ap_get_u32(&r, &e->mode) || ap_get_u64(&r, &e->size) ||
	    ap_get_u16(&r, &e->path_len) || ap_get_bytes(&r, e->path_len, &s))
		return -EBADMSG;
	e->path = (const char *)s;
	if (ap_get_u16(&r, &e->target_len) || ap_get_bytes(&r, e->target_len, &s) || r.off != len)
		return -EBADMSG;
	e->target = (const char *)s;
	bool linky = e->kind == AP_E_SYMLINK || e->kind == AP_E_HARDLINK;
	if (pad8 || pad16 || e->kind < AP_E_FILE || e->kind > AP_E_KIND_MAX || (e->mode & ~07777u))
		return -EBADMSG;
	if ((e->kind != AP_E_FILE && e->size) || linky != (e->target_len > 0))
		return -EBADMSG;
	if (ap_path_check(e->path, e->path_len))
		return -EBADMSG;
	if (linky && memchr(e->target, 0, e->target_len))
		return -EBADMSG;
	return 0;
}

void ap_entry_encode(struct ap_wr *w, const struct ap_entry *e)
{
	ap_put_u8(w, e->kind);
	ap_put_u8(w, 0);
	ap_put_u16(w, 0);
	ap_put_u32(w, e->mode);
	ap_put_u64(w, e->size);
	ap_put_u16(w, e->path_len);
	ap_put_bytes(w, e->path, e->path_len);
	ap_put_u16(w, e->target_len);
	ap_put_bytes(w, e->target, e->target_len);
}

int ap_exit_decode(const uint8_t *p, size_t len, struct ap_exit *x)
{
	struct ap_rd r;
	uint16_t pad;
	uint32_t code;

	ap_rd_init(&r, p, len);
	if (len != 8 || ap_get_u8(&r, &x->kind) || ap_get_u8(&r, &x->core) ||
	    ap_get_u16(&r, &pad) || ap_get_u32(&r, &code))
		return -EBADMSG;
	x->code = (int32_t)code;
	if (pad || x->kind > AP_KILLED || x->core > 1)
		return -EBADMSG;
	if (x->kind == AP_EXITED ? (code > 255 || x->core) : (code < 1 || code > 64))
		return -EBADMSG;
	return 0;
}

int ap_path_check(const char *path, size_t len)
{
	return gw_path_check(path, len);
}

uint32_t ap_crc32(uint32_t crc, const void *buf, size_t len)
{
	static uint32_t table[256];
	static int ready;
	const uint8_t *p = buf;

	/* The table is a pure function of the polynomial, so a racing second
	 * initialisation writes the same values. */
	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
			table[i] = c;
		}
		__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	}
	crc = ~crc;
	while (len--)
		crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

void ap_text(const uint8_t *p, size_t len, char *buf, size_t bufsz)
{
	size_t n = 0;
	if (bufsz == 0)
		return;
	for (size_t i = 0; i < len && n + 1 < bufsz; i++)
		buf[n++] = (p[i] < 0x20 || p[i] == 0x7f) ? '?' : (char)p[i];
	buf[n] = 0;
}
