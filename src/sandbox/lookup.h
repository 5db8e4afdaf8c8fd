/* Remembered answers: what a slow lookup found (the image a name stands
 * for, a template's key), kept with the files and environment variables
 * the answer was made from, and used again only while every one of them is
 * as it was.  A file is "as it was" when its device, inode, size, mtime and
 * ctime (nanoseconds) are the same: ctime cannot be set from user space, so
 * a rewrite always shows; an answer is stored only when every file is some
 * seconds old, so a file replaced within one clock tick of the store
 * cannot look unchanged.  A missing file is a dependency too (a recipe that
 * appears changes which one is found).
 *
 * One answer per file, in a directory of the user's own (the state
 * directory's "cache/"), as text:
 *
 *     kosa8-lookup 1
 *     file PATH        followed by " DEV INO SIZE MTIME CTIME" or " absent"
 *     env NAME         followed by " =VALUE" or " unset"
 *     answer TEXT
 *
 * Loading does not trust the numbers in the file: it takes the names,
 * writes the file it would store now, and compares the two byte for byte. */
#ifndef KOSA8_LOOKUP_H
#define KOSA8_LOOKUP_H

#include <stddef.h>

#define LOOKUP_FILE_MAX (64 * 1024)
#define LOOKUP_DEPS_MAX 32
#define LOOKUP_ANSWER_MAX 4096
/* Files changed this recently are not remembered (see above). */
#define LOOKUP_MIN_AGE_S 2

struct lookup_deps {
	const char *files[LOOKUP_DEPS_MAX];
	const char *env[LOOKUP_DEPS_MAX];
	size_t nfiles, nenv;
};

/* The answer remembered in text (a cache file's bytes) if everything it
 * depends on is as it was: 0, -ESTALE (something changed), -EBADMSG (not
 * such a file), -ENAMETOOLONG (answer does not fit len). */
int lookup_check(const char *text, size_t len, char *answer, size_t alen);

/* The same, read from path (-ENOENT if there is none). */
int lookup_load(const char *path, char *answer, size_t alen);

/* Remembers answer with what it depends on in path (written whole, then
 * renamed): 0, -EAGAIN when a file is too new to be remembered (nothing
 * written), -EINVAL for a name or answer with a newline. */
int lookup_store(const char *path, const struct lookup_deps *d, const char *answer);

/* The cache file for a question (any bytes) in the user's state directory,
 * which is made private if it is not: <state>/cache/lookup-<hash>. */
int lookup_path(const void *question, size_t qlen, char *buf, size_t len);

#endif
