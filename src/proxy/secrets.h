/* Secrets that never enter the VM.
 *
 * A secret is a value (an API key) the user stores on the host with
 * `kosa8 secret add NAME --host H`, bound to the host names it may be sent
 * to.  A sandbox started with `--secret NAME` gets NAME=<placeholder> in its
 * environment; the egress proxy (intercept.c) swaps the placeholder for the
 * value in requests to the bound hosts only, and swaps the value back for
 * the placeholder in what those hosts answer.
 *
 * Store: <kosa8 config dir>/secrets/NAME.json, mode 0600, folder 0700.  A
 * secret either holds its value there or names a host environment variable
 * (--from-env VAR) read when a sandbox loads the set.  Placeholders are
 * random per sandbox and stable across its restarts: <state dir>/
 * secret-placeholders.json (0600).  docs/egress.md has the whole story. */
#ifndef KOSA8_PROXY_SECRETS_H
#define KOSA8_PROXY_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define SECRET_NAME_MAX 64          /* an environment variable name */
#define SECRET_HOSTS_MAX 16
#define SECRET_PORT_DEFAULT 443
#define SECRET_HEADER_MAX 64
#define SECRET_FORMAT_MAX 256
#define SECRET_VALUE_MAX 8192
#define SECRET_SET_MAX 64           /* secrets one sandbox may use */
/* "k8s-placeholder-" NAME "-" 32 hex digits */
#define SECRET_PLACEHOLDER_MAX (16 + SECRET_NAME_MAX + 1 + 32)

struct secret {
	char name[SECRET_NAME_MAX + 1];
	char hosts[SECRET_HOSTS_MAX][POLICY_NAME_MAX + 1];   /* normalised */
	/* The port each host is bound with; 0 means SECRET_PORT_DEFAULT.  A
	 * secret goes to host:port, not to every port of the host. */
	uint16_t ports[SECRET_HOSTS_MAX];
	size_t nhosts;
	/* "" : the placeholder is replaced wherever it appears in a request
	 * header value.  Otherwise this header is set on every request to a
	 * bound host, to format with "{}" replaced by the value. */
	char header[SECRET_HEADER_MAX + 1];
	char format[SECRET_FORMAT_MAX + 1];
	char from_env[SECRET_NAME_MAX + 1];   /* "" : the value is stored */
	char *value;                          /* NULL unless loaded for use */
	size_t value_len;
	char placeholder[SECRET_PLACEHOLDER_MAX + 1];   /* set by secret_set_load */
};

/* A secret name is an environment variable name: [A-Za-z_][A-Za-z0-9_]*,
 * at most SECRET_NAME_MAX bytes. */
bool secret_name_valid(const char *name);
/* A value may go into an HTTP header: 1..SECRET_VALUE_MAX bytes, no control
 * characters (CR, LF, NUL would split or cut a header). */
bool secret_value_valid(const char *value, size_t len);

/* <config>/secrets, created 0700 when create is set. */
int secret_store_dir(char *buf, size_t len, bool create);

/* Stores s (hosts, header, format, from_env) and, unless s->from_env is set,
 * value.  -EEXIST if NAME exists and replace is false; -EINVAL for an
 * invalid name, host, header, format or value. */
int secret_store(const struct secret *s, const char *value, size_t value_len, bool replace);
/* Reads NAME's definition; with_value also its value (stored, or from the
 * environment variable now: -ENOKEY if that is unset or invalid).  Free the
 * value with secret_clear.  -ENOENT if there is no such secret. */
int secret_read(const char *name, bool with_value, struct secret *s);
/* Wipes and frees a loaded value. */
void secret_clear(struct secret *s);
int secret_remove(const char *name);
/* The stored names, sorted; free with secret_names_free.  Count or -errno. */
int secret_names(char ***names);
void secret_names_free(char **names, size_t n);

/* The secrets one sandbox uses, values loaded. */
struct secret_set;
struct redact_set;

/* Loads the named secrets (values included) and gives each its placeholder,
 * made on first use and kept in state_dir.  Any missing or unusable secret
 * fails the whole load (-ENOENT, -ENOKEY, ...): a sandbox does not start
 * with half its secrets.  At most SECRET_SET_MAX names (-E2BIG). */
int secret_set_load(const char *const *names, size_t n, const char *state_dir,
		    struct secret_set **out);
void secret_set_free(struct secret_set *set);
/* Gives the sandbox in to_dir the placeholders of the one in from_dir (a
 * fork: its memory holds the parent's placeholders, in the environments of
 * processes started before the fork, and they must keep working there).
 * Nothing to copy is not an error. */
int secret_placeholders_copy(const char *from_dir, const char *to_dir);
/* "NAME=placeholder" for each secret, NULL-terminated, owned by the set:
 * what the exec path adds to the guest's environment. */
const char *const *secret_set_env(const struct secret_set *set);
/* Whether any secret of the set is bound to host:port (host normalised or
 * not). */
bool secret_set_binds(const struct secret_set *set, const char *host, uint16_t port);
size_t secret_set_count(const struct secret_set *set);
const struct secret *secret_set_get(const struct secret_set *set, size_t i);
/* Whether secret s may be sent to host:port (host a normalised name). */
bool secret_bound_to(const struct secret *s, const char *host, uint16_t port);
/* Parses "HOST" or "HOST:PORT" into s's next host (normalised; port 443
 * when none is given).  -EINVAL, -E2BIG past SECRET_HOSTS_MAX. */
int secret_add_host(struct secret *s, const char *spec);
/* The port s's i-th host is bound with (SECRET_PORT_DEFAULT for 0). */
uint16_t secret_host_port(const struct secret *s, size_t i);
/* The values of the set, for the redaction of responses (redact.h). */
const struct redact_set *secret_set_redactions(const struct secret_set *set);

#endif
