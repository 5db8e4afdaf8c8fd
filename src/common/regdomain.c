/* The list is Debian's (publicsuffix, through libpsl's psl_latest: the
 * newer of the file and the list built into the library), loaded once. */
#include "common/regdomain.h"

#include <errno.h>
#include <libpsl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define HOST_MAX 253

static const psl_ctx_t *psl;
static pthread_once_t psl_once = PTHREAD_ONCE_INIT;

static void psl_load(void)
{
	psl = psl_latest(NULL);
	if (!psl)
		psl = psl_builtin();
}

int regdomain_of(const char *host, char *out, size_t len)
{
	char low[HOST_MAX + 2];
	const char *reg;
	size_t n = strlen(host);

	if (n && host[n - 1] == '.')
		n--;
	if (!n || n > HOST_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)host[i];
		if (c <= ' ' || c >= 0x7f || c == '/' || c == ':')
			return -EINVAL;
		low[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	low[n] = '\0';
	/* An IPv4 literal has no registered domain, whatever the list says. */
	if (strspn(low, "0123456789.") == n)
		return -EINVAL;
	pthread_once(&psl_once, psl_load);
	if (!psl || !(reg = psl_registrable_domain(psl, low)))
		return -EINVAL;
	if ((size_t)snprintf(out, len, "%s", reg) >= len)
		return -ENAMETOOLONG;
	return 0;
}
