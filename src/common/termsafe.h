/* Untrusted bytes on a terminal: what a guest prints (kosa8 logs) or a log
 * record holds (kosa8 audit show) must not move the cursor, retitle the
 * window, reorder text (bidi overrides) or hide itself.  One function
 * writes such bytes with everything a terminal acts on escaped:
 *
 *   C0 controls (except \n and \t when TERM_KEEP_LINES) and DEL  -> \xHH
 *   C1 controls U+0080..U+009F                                   -> \u0085
 *   bidi controls U+061C, U+200E, U+200F, U+202A..U+202E,
 *   U+2066..U+2069, and the separators U+2028, U+2029            -> \u202e
 *   characters that print as nothing (zero-width spaces/joiners,
 *   U+00AD, U+2060..U+206F, U+FEFF, fillers, the tag block
 *   U+E0000..U+E007F: text a reader cannot see)                  -> \u200b
 *   (above U+FFFF: \U000e0041, in JSON a surrogate pair)
 *   bytes that are not well-formed UTF-8 (RFC 3629: no overlongs,
 *   no surrogates, nothing above U+10FFFF)                       -> \xHH
 *
 * With TERM_KEEP_LINES a "\r\n" is written as "\n" (a console's line end;
 * a lone \r, which could overwrite a line, is escaped).  With TERM_JSON the
 * input is JSON text (already escaped by a JSON printer for C0): C1 and
 * bidi become JSON \uXXXX escapes of the same character and invalid bytes
 * \ufffd, so the output is still the same JSON.  Escaped output is for
 * people: it cannot be turned back into the bytes (use --raw for those). */
#ifndef KOSA8_COMMON_TERMSAFE_H
#define KOSA8_COMMON_TERMSAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define TERM_KEEP_LINES 1u /* pass \n and \t (and \r\n as \n) */
#define TERM_JSON 2u       /* input is JSON text: escapes stay valid JSON */
#define TERM_FINAL 4u      /* no more input follows: escape a cut-off tail too */

/* Writes buf[0..n) to f, escaped.  Returns the bytes consumed: all of them
 * with TERM_FINAL, else possibly fewer when the input ends in the middle of
 * a UTF-8 sequence or on a \r (at most 3 bytes), which the caller passes
 * again in front of its next chunk. */
size_t term_write(FILE *f, const void *buf, size_t n, unsigned flags);

/* Copies everything read from fd in to out, escaped with flags (plus
 * TERM_FINAL at the end), or as it is when raw.  0 or -errno. */
int term_copy_fd(int in, FILE *out, unsigned flags, bool raw);

#endif
