/* A sandbox's synthetic addresses: each host name the DNS answers for gets
 * one IPv4 address from a per-sandbox range, and the egress proxy maps a
 * connection's destination address back to that name.  An address that is
 * not in the table (an IP literal the guest chose) maps to nothing.
 *
 * The range is 198.18.0.0/15 (RFC 2544, never routed on the Internet), so a
 * guest address can never be mistaken for a real host.  Thread-safe: the
 * DNS and proxy threads share one table. */
#ifndef KOSA8_PROXY_NAMES_H
#define KOSA8_PROXY_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define NAMES_BASE 0xc6120000u   /* 198.18.0.0 */
#define NAMES_COUNT 131070u      /* .0.1 .. .1.254 */

struct names;

int names_new(struct names **out);
void names_free(struct names *t);

/* The address for a normalised name, given out before or new (host byte
 * order).  -ENOSPC when the range is used up. */
int names_assign(struct names *t, const char *name, uint32_t *addr);
/* The name an address was given to.  -ENOENT if none. */
int names_lookup(struct names *t, uint32_t addr, char *name, size_t namelen);

#endif
