/* kosa8 secret: the secrets the egress proxy puts into requests for the
 * guest, kept on the host (src/proxy/secrets.h, docs/egress.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "proxy/secrets.h"

/* The value from stdin: without echo on a terminal; one trailing newline
 * is not part of it. */
static int read_value(const char *name, char *buf, size_t cap, size_t *len)
{
	struct termios old, quiet;
	bool tty = isatty(0) && tcgetattr(0, &old) == 0;
	size_t n = 0;
	bool big = false;
	int c;

	if (tty) {
		fprintf(stderr, "value for %s: ", name);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(0, TCSAFLUSH, &quiet);
	}
	while ((c = getchar()) != EOF && !(tty && c == '\n')) {
		if (n + 1 >= cap) {
			big = true;
			break;
		}
		buf[n++] = (char)c;
	}
	if (tty) {
		tcsetattr(0, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	if (big)
		return -E2BIG;
	if (n && buf[n - 1] == '\n')
		n--;
	if (n && buf[n - 1] == '\r')
		n--;
	buf[n] = '\0';
	*len = n;
	return 0;
}

static int add_host(struct secret *s, const char *h)
{
	int err = secret_add_host(s, h);

	if (err == -E2BIG)
		fprintf(stderr, "kosa8 secret: at most %d hosts\n", SECRET_HOSTS_MAX);
	else if (err)
		fprintf(stderr, "kosa8 secret: '%s' is not HOST or HOST:PORT (IP addresses and wildcards "
				"are not allowed)\n", h);
	return err ? -1 : 0;
}

static int copy_opt(char *dst, size_t cap, const char *opt, const char *v)
{
	if (strlen(v) >= cap) {
		fprintf(stderr, "kosa8 secret: %s value too long\n", opt);
		return -1;
	}
	strcpy(dst, v);
	return 0;
}

static int parse_add(int argc, char **argv, struct secret *s, bool *force)
{
	for (int i = 3; i < argc; i++) {   /* after 'secret add NAME' */
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int r = 0;
		if (!strcmp(a, "--force")) {
			*force = true;
			continue;
		}
		if (!v || a[0] != '-') {
			fprintf(stderr, "kosa8 secret add: unexpected '%s'\n", a);
			cli_usage_error("secret", "add");
			return -1;
		}
		if (!strcmp(a, "--host"))
			r = add_host(s, v);
		else if (!strcmp(a, "--header"))
			r = copy_opt(s->header, sizeof(s->header), a, v);
		else if (!strcmp(a, "--format"))
			r = copy_opt(s->format, sizeof(s->format), a, v);
		else if (!strcmp(a, "--from-env"))
			r = copy_opt(s->from_env, sizeof(s->from_env), a, v);
		else
			r = (fprintf(stderr, "kosa8 secret add: unknown option '%s'\n", a), -1);
		if (r)
			return r;
		i++;
	}
	return 0;
}

static int secret_add_cmd(int argc, char **argv)
{
	struct secret s = {0};
	bool force = false;
	char *value = NULL;
	size_t len = 0;
	int err;

	if (argc < 3 || !secret_name_valid(argv[2])) {
		fprintf(stderr, "kosa8 secret add: NAME must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)\n");
		return 2;
	}
	strcpy(s.name, argv[2]);
	if (parse_add(argc, argv, &s, &force))
		return 2;
	if (!s.nhosts) {
		fprintf(stderr, "kosa8 secret add: at least one --host is needed\n");
		return 2;
	}
	if (s.header[0] && !s.format[0])
		strcpy(s.format, "{}");
	if (!s.header[0] && s.format[0]) {
		fprintf(stderr, "kosa8 secret add: --format goes with --header\n");
		return 2;
	}
	if (!s.from_env[0]) {
		/* room for the longest value, a CR LF after it, and the NUL */
		if (!(value = malloc(SECRET_VALUE_MAX + 3)) ||
		    read_value(s.name, value, SECRET_VALUE_MAX + 3, &len)) {
			fprintf(stderr, "kosa8 secret add: value longer than %d bytes\n", SECRET_VALUE_MAX);
			err = -E2BIG;
			goto out;
		}
		if (!secret_value_valid(value, len)) {
			fprintf(stderr, "kosa8 secret add: the value must be 1-%d bytes without control characters\n",
				SECRET_VALUE_MAX);
			err = -EINVAL;
			goto out;
		}
	}
	err = secret_store(&s, value, len, force);
	if (err == -EEXIST)
		fprintf(stderr, "kosa8 secret: %s exists (--force replaces it)\n", s.name);
	else if (err == -EINVAL)
		fprintf(stderr, "kosa8 secret: invalid --header or --format (one '{}', a header field name)\n");
	else if (err)
		fprintf(stderr, "kosa8 secret: cannot store %s: %s\n", s.name, strerror(-err));
out:
	if (value) {
		OPENSSL_cleanse(value, SECRET_VALUE_MAX + 3);
		free(value);
	}
	return err ? 1 : 0;
}

static int secret_ls_cmd(void)
{
	char **names;
	int n = secret_names(&names);

	if (n < 0) {
		fprintf(stderr, "kosa8 secret: cannot list secrets: %s\n", strerror(-n));
		return 1;
	}
	if (n)
		printf("%-24s %-12s %-24s %s\n", "NAME", "SOURCE", "HEADER", "HOSTS");
	for (int i = 0; i < n; i++) {
		struct secret s;
		char src[SECRET_NAME_MAX + 8];
		if (secret_read(names[i], false, &s)) {
			printf("%-24s (unreadable)\n", names[i]);
			continue;
		}
		snprintf(src, sizeof(src), "%s%s", s.from_env[0] ? "env:" : "stored", s.from_env);
		printf("%-24s %-12s %-24s", s.name, src, s.header[0] ? s.header : "-");
		for (size_t h = 0; h < s.nhosts; h++)
			printf("%s%s:%u", h ? "," : " ", s.hosts[h], secret_host_port(&s, h));
		printf("\n");
	}
	secret_names_free(names, (size_t)n);
	return 0;
}

int cmd_secret(int argc, char **argv)
{
	int err;

	if (argc < 2)
		return cli_usage_error("secret", NULL);
	/* add reads a value from stdin: not dumpable before it is read. */
	if (!strcmp(argv[1], "add"))
		return process_hold_secrets() ? 1 : secret_add_cmd(argc, argv);
	if (!strcmp(argv[1], "ls") && argc == 2)
		return secret_ls_cmd();
	if (!strcmp(argv[1], "rm") && argc == 3) {
		if ((err = secret_remove(argv[2]))) {
			fprintf(stderr, "kosa8 secret: cannot remove %s: %s\n", argv[2],
				err == -ENOENT ? "no such secret" : strerror(-err));
			return 1;
		}
		return 0;
	}
	return cli_usage_error("secret", argv[1]);
}
