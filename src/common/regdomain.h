/* The registered domain of a host name (the part a registrar sold: one
 * label below its public suffix), from the public suffix list through
 * libpsl.  What a person answering an approval must see apart: in
 * `api.openai.com.evil.example` it is `evil.example`, not openai.com. */
#ifndef KOSA8_COMMON_REGDOMAIN_H
#define KOSA8_COMMON_REGDOMAIN_H

#include <stddef.h>

/* The registered domain of host (ASCII, any case; a trailing dot is
 * ignored) into out, lower case.  -EINVAL when host has none (a public
 * suffix itself, an IP literal, not a name), -ENAMETOOLONG when out is
 * too short. */
int regdomain_of(const char *host, char *out, size_t len);

#endif
