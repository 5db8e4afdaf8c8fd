/* The command table (src/cli/cmd_table.c) against the kosa8 binary of the
 * same build: every command answers --help and -h, the options the table
 * lists are the options each command's parser takes (both ways), the
 * guest's --help is left alone, man pages render, bash completion works. */
#include <limits.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shell_run.h"

#include "cli/cmd_table.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

static char kosa8[PATH_MAX], srcdir[PATH_MAX], tmp[64];

/* sh -c CMD with $K (kosa8) and $T (a scratch folder holding every kosa8
 * directory), stdin from /dev/null; stdout+stderr into out.  Exit status. */
static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len, "K='%s' T='%s'", kosa8, tmp);
}

static int setup(void **state)
{
	static const char *const env[][2] = {
		{"KOSA8_CONFIG_DIR", "cfg"}, {"KOSA8_STATE_DIR", "state"}, {"XDG_RUNTIME_DIR", "run"},
		{"KOSA8_CACHE_DIR", "cache"}, {"KOSA8_AUDIT_LOG", "audit.log"}, {"HOME", "home"},
	};
	struct sandbox_cfg cfg = {.mem = 256 << 20, .cpus = 1};
	char self[PATH_MAX - 32], path[PATH_MAX], sdir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <tree>/<build>/tests/test_cli_help -> <tree>/<build>/kosa8, <tree>/src/cli */
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	*strrchr(self, '/') = '\0';
	snprintf(srcdir, sizeof(srcdir), "%s/src/cli", self);
	snprintf(tmp, sizeof(tmp), "/tmp/kosa8-cli-help-XXXXXX");
	if (access(kosa8, X_OK) || access(srcdir, R_OK) || !mkdtemp(tmp))
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(env); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmp, env[i][1]);
		setenv(env[i][0], path, 1);
	}
	setenv("KOSA8_KERNEL", "/nonexistent/bzImage", 1);
	setenv("KOSA8_MACHINE", "never", 1); /* parsers here, not in a helper machine */
	mkdir_p(getenv("HOME"), 0700);
	/* Two sandboxes for completion to find. */
	for (int i = 0; i < 2; i++) {
		snprintf(cfg.name, sizeof(cfg.name), i ? "sb-two" : "sb-one");
		if (sandbox_state_dir(cfg.name, sdir, sizeof(sdir)) || mkdir_p(sdir, 0700) ||
		    sandbox_cfg_save(sdir, &cfg))
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	return run("rm -rf \"$T\"") ? -1 : 0;
}

/* "--name" or "-f": how an option is spelled on a command line. */
static const char *spelling(const struct cli_opt *o, bool shrt, char *buf, size_t len)
{
	if (shrt)
		snprintf(buf, len, "-%c", o->shrt);
	else
		snprintf(buf, len, "--%s", o->name);
	return buf;
}

static void check_help_lists(const struct cli_opt *o)
{
	char sp[64];

	for (; o && o->help; o++) {
		if (o->name && !strstr(out, spelling(o, false, sp, sizeof(sp))))
			fail_msg("no %s in:\n%s", sp, out);
		if (o->shrt && !strstr(out, spelling(o, true, sp, sizeof(sp))))
			fail_msg("no %s in:\n%s", sp, out);
	}
}

static void check_help(const struct cli_cmd *c, const struct cli_cmd *s)
{
	static const char *const forms[][2] = {{"", " --help"}, {"", " -h"}, {"help ", ""}};
	char words[128], head[160];

	snprintf(words, sizeof(words), "%s%s%s", c->name, s ? " " : "", s ? s->name : "");
	snprintf(head, sizeof(head), "Usage:  kosa8 %s", words);
	for (size_t f = 0; f < ARRAY_SIZE(forms); f++) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "%s%s%s", forms[f][0], words, forms[f][1]);
		if (run("\"$K\" %s", cmd) != 0 || strncmp(out, head, strlen(head)))
			fail_msg("kosa8 %s: not its help, or not exit 0:\n%s", cmd, out);
		check_help_lists((s ? s : c)->opts);
		if (s)
			check_help_lists(c->opts);
	}
}

static void test_every_command_answers_help(void **state)
{
	int n = 0;

	assert_int_equal(run("\"$K\" --help"), 0);
	check_help_lists(cli_global_opts);
	for (const struct cli_cmd *c = cli_commands; c->name; c++)
		if (!c->hidden && !strstr(out, c->name))
			fail_msg("kosa8 --help does not list %s", c->name);
	for (const struct cli_cmd *c = cli_commands; c->name; c++) {
		if (c->hidden)
			continue;
		check_help(c, NULL);
		for (const struct cli_cmd *s = c->subs; s && s->name; s++)
			check_help(c, s);
		n++;
	}
	/* Every command main dispatches is in the table: 'help --commands'
	 * lists it, and a name not in the table is refused. */
	assert_int_equal(run("\"$K\" help --commands | wc -l"), 0);
	assert_int_equal(atoi(out), n);
	assert_int_equal(run("\"$K\" no-such-command --help"), 2);
	assert_non_null(strstr(out, "unknown command"));
}

/* --help where the command takes options: not after "--", not in the
 * guest's command line, not as an option's argument. */
static void test_help_found_where_options_are(void **state)
{
	static const struct {
		const char *argv[8];
		bool help;
		const char *sub;
	} cases[] = {
		{{"run", "--help"}, true, NULL},
		{{"run", "--name", "x", "-h"}, true, NULL},
		{{"run", "--", "true", "--help"}, false, NULL},
		{{"run", "true", "--help"}, false, NULL},
		{{"run", "--name", "--help", "true"}, false, NULL},
		{{"run", "--name=x", "--help"}, true, NULL},
		{{"exec", "-h"}, true, NULL},
		{{"exec", "-t", "sb", "--help"}, true, NULL},
		{{"exec", "sb", "--", "ls", "-h"}, false, NULL},
		{{"exec", "sb", "ls", "-h"}, false, NULL},
		{{"exec", "-u", "-h", "sb", "ls"}, false, NULL},
		{{"checkpoint", "sb", "-m", "-h"}, false, NULL},
		{{"checkpoint", "rm", "--help"}, true, "rm"},
		{{"audit", "--log", "x", "show", "-h"}, true, "show"},
		{{"audit", "show", "--log", "-h"}, false, "show"},
		{{"audit", "--help", "show"}, true, NULL},
		{{"secret", "add", "N", "--host", "h", "--help"}, true, "add"},
		{{"stop", "--help"}, true, NULL},
		{{"rm", "-f", "-h"}, true, NULL},
		{{"stop", "sb"}, false, NULL},
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct cli_cmd *c = cli_find(cli_commands, cases[i].argv[0]), *s;
		int argc = 0;
		while (cases[i].argv[argc])
			argc++;
		assert_non_null(c);
		bool help = cli_wants_help(c, argc, (char **)cases[i].argv, &s);
		if (help != cases[i].help)
			fail_msg("case %zu (%s %s ...): help %d", i, cases[i].argv[0], cases[i].argv[1], help);
		if (help && (cases[i].sub ? !s || strcmp(s->name, cases[i].sub) : s != NULL))
			fail_msg("case %zu: subcommand %s", i, s ? s->name : "none");
	}
	/* For real: the guest's --help reaches the sandbox code, which fails
	 * here for want of a kernel or a running sandbox (exit 125). */
	assert_int_equal(run("\"$K\" run -- true --help"), 125);
	assert_non_null(strstr(out, "KOSA8_KERNEL"));
	assert_int_equal(run("\"$K\" exec sb-one -- ls -h"), 125);
	assert_non_null(strstr(out, "not running"));
	assert_int_equal(run("\"$K\" exec sb-one ls --help"), 125);
	assert_int_equal(run("\"$K\" exec -u root sb-one --help"), 0);
	assert_non_null(strstr(out, "Usage:  kosa8 exec"));
}

/* How a command line is made to stop right after its options are parsed
 * (so that an accepted option does nothing): %s is the option.  By
 * default a bogus option follows it; these commands need other words. */
static const struct {
	const char *key, *fmt;
} templates[] = {
	{"", "%s --zz-end"},
	{"rm", "rm %s nosuch"},
	{"ps", "ps %s"},
	{"vm", "vm %s --restore /nonexistent --kernel x"}, /* a conflict, found after parsing */
	{"checkpoint", "checkpoint nosuch %s"},
	{"image ls", "image ls %s"},
	{"policy", "policy show %s"},
	{"approvals watch", "approvals watch Not_A_Name %s"},
	{"secret add", "secret add NAME %s --zz-end"},
	{"oci", "oci %s --zz-end"}, /* runc's global options stand before the command */
};

static const char *template_for(const char *key)
{
	for (size_t i = 1; i < ARRAY_SIZE(templates); i++)
		if (!strcmp(templates[i].key, key))
			return templates[i].fmt;
	return NULL;
}

/* A value each kind of option argument accepts. */
static const char *sample(const char *arg)
{
	if (!strcmp(arg, "SIZE"))
		return "64M";
	if (!strcmp(arg, "N") || !strcmp(arg, "K"))
		return "3";
	if (!strcmp(arg, "TIME"))
		return "1h";
	if (!strcmp(arg, "UID:GID"))
		return "1000:1000";
	if (!strcmp(arg, "NAME=VALUE"))
		return "A=b";
	if (!strcmp(arg, "LOGFILE"))
		return "/dev/null"; /* written even by a refused command line */
	return "x";
}

/* "kosa8 " prefix fmt, the option in place of fmt's %s, into line. */
static void fill(char *line, size_t len, const char *prefix, const char *fmt, const char *opt)
{
	const char *at = strstr(fmt, "%s");

	snprintf(line, len, "\"$K\" %s %.*s%s%s", prefix, (int)(at - fmt), fmt, opt, at + 2);
}

/* Replaces every "from" in s by "to" (in place; s has room). */
static void replace(char *s, size_t cap, const char *from, const char *to)
{
	char *p = s;

	while ((p = strstr(p, from))) {
		size_t fl = strlen(from), tl = strlen(to), rest = strlen(p + fl);
		if ((size_t)(p - s) + tl + rest + 1 > cap)
			return;
		memmove(p + tl, p + fl, rest + 1);
		memcpy(p, to, tl);
		p += tl;
	}
}

/* Runs prefix + fmt with the option, and with a bogus one in its place:
 * a parser that took the option answers differently from one that did
 * not (the bogus answer is compared with the option's name put back). */
static void check_accepted(const char *prefix, const char *fmt, const struct cli_opt *o, bool shrt)
{
	static char bogus_out[sizeof(out)];
	char sp[64], word[128], bogus[128], line[512];
	const char *bogus_name = shrt ? "-Z" : "--zz-bogus";

	spelling(o, shrt, sp, sizeof(sp));
	snprintf(word, sizeof(word), "%s%s%s", sp, o->arg ? " " : "", o->arg ? sample(o->arg) : "");
	snprintf(bogus, sizeof(bogus), "%s%s%s", bogus_name, o->arg ? " " : "", o->arg ? sample(o->arg) : "");
	fill(line, sizeof(line), prefix, fmt, bogus);
	int bogus_rc = run("%s", line);
	memcpy(bogus_out, out, sizeof(out));
	replace(bogus_out, sizeof(bogus_out), bogus_name, sp);
	if (shrt)
		replace(bogus_out, sizeof(bogus_out), "'Z'", (char[]){'\'', o->shrt, '\'', 0});
	fill(line, sizeof(line), prefix, fmt, word);
	int rc = run("%s", line);
	if (bogus_rc == 0 || (rc == bogus_rc && !strcmp(out, bogus_out)))
		fail_msg("kosa8 %s: %s is not accepted (answer: %s)", prefix, word, out);
}

/* A template names the whole command line; else prefix starts it. */
static void check_opts_accepted(const char *prefix, const char *key, const struct cli_opt *o)
{
	const char *fmt = template_for(key);

	for (; o && o->help; o++) {
		if (o->name)
			check_accepted(fmt ? "" : prefix, fmt ? fmt : templates[0].fmt, o, false);
		if (o->shrt)
			check_accepted(fmt ? "" : prefix, fmt ? fmt : templates[0].fmt, o, true);
	}
}

static void test_table_options_are_accepted(void **state)
{
	char prefix[128], key[128];

	check_opts_accepted("", "", cli_global_opts);
	for (const struct cli_cmd *c = cli_commands; c->name; c++) {
		if (c->hidden)
			continue;
		/* The options of a command with subcommands go with one. */
		snprintf(prefix, sizeof(prefix), "%s %s", c->name, c->subs ? c->subs[0].name : "");
		check_opts_accepted(prefix, c->name, c->opts);
		for (const struct cli_cmd *s = c->subs; s && s->name; s++) {
			snprintf(key, sizeof(key), "%s %s", c->name, s->name);
			check_opts_accepted(key, key, s->opts);
		}
	}
}

/* The other way: every option a parser in src/cli/cmd_*.c names is in the
 * table under a command that file implements.  Parsers name options in
 * struct option arrays, getopt strings and strcmp()s. */
static bool in_opts(const struct cli_opt *o, const char *name, char shrt)
{
	for (; o && o->help; o++)
		if ((name && o->name && !strcmp(o->name, name)) || (shrt && o->shrt == shrt))
			return true;
	return false;
}

static bool file_has_opt(const char *cmds, const char *name, char shrt)
{
	if ((name && !strcmp(name, "help")) || shrt == 'h')
		return true; /* main answers it for every command */
	for (const struct cli_cmd *c = cli_commands; c->name; c++) {
		char word[64];
		snprintf(word, sizeof(word), " %s ", c->name);
		if (!strstr(cmds, word))
			continue;
		if (in_opts(c->opts, name, shrt))
			return true;
		for (const struct cli_cmd *s = c->subs; s && s->name; s++)
			if (in_opts(s->opts, name, shrt))
				return true;
	}
	return false;
}

static void scan_file(const char *path)
{
	static const char *const pats[] = {
		"\\{\"([a-z][a-z-]*)\", *(no|required|optional)_argument",
		"strn?cmp\\([^;]*\"--([a-z][a-z-]*)=?\"",
		"strn?cmp\\([^;]*\"-([a-zA-Z])\"",
		"getopt_long\\([^,]*, *[^,]*, *\"\\+?([a-zA-Z:]*)\"",
		"int cmd_([a-z_]+)\\(int argc",
	};
	char cmds[1024] = " ", line[4096];
	regmatch_t m[2];
	regex_t re[ARRAY_SIZE(pats)];
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	for (size_t i = 0; i < ARRAY_SIZE(pats); i++)
		assert_int_equal(regcomp(&re[i], pats[i], REG_EXTENDED), 0);
	/* The commands this file implements, first. */
	while (fgets(line, sizeof(line), f))
		if (!regexec(&re[4], line, 2, m, 0))
			snprintf(cmds + strlen(cmds), sizeof(cmds) - strlen(cmds), "%.*s ",
				 (int)(m[1].rm_eo - m[1].rm_so), line + m[1].rm_so);
	rewind(f);
	for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
		for (size_t i = 0; i < 4; i++) {
			const char *p = line;
			while (!regexec(&re[i], p, 2, m, 0)) {
				char w[64];
				snprintf(w, sizeof(w), "%.*s", (int)(m[1].rm_eo - m[1].rm_so), p + m[1].rm_so);
				p += m[0].rm_eo;
				if (i == 2 && !file_has_opt(cmds, NULL, w[0]))
					fail_msg("%s:%d: option -%s is not in the command table", path, ln, w);
				for (char *c = w; i == 3 && *c; c++)
					if (*c != ':' && !file_has_opt(cmds, NULL, *c))
						fail_msg("%s:%d: option -%c is not in the command table", path, ln, *c);
				if (i < 2 && !file_has_opt(cmds, w, 0))
					fail_msg("%s:%d: option --%s is not in the command table", path, ln, w);
			}
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(pats); i++)
		regfree(&re[i]);
	fclose(f);
}

static void test_parsers_take_only_table_options(void **state)
{
	assert_int_equal(run("ls '%s'/cmd_*.c", srcdir), 0);
	for (char *p = strtok(out, "\n"); p; p = strtok(NULL, "\n"))
		scan_file(p);
}

/* A parser that serves every subcommand at once (audit's) takes only the
 * options the table lists for the one named: "audit verify --since 1h"
 * must not verify the whole log and exit 0.  In process first, then each
 * sibling's option against each subcommand of the real binary. */
static void test_sub_refuses_sibling_options(void **state)
{
	static const struct {
		const char *argv[5];
		const char *bad;
	} cases[] = {
		{{"prove", "1", "-o", "f"}, NULL},
		{{"prove", "1", "-of", "--size=2"}, NULL},
		{{"show", "--log", "--json", "-f"}, NULL},
		{{"verify", "--pubkey", "--since"}, NULL},
		{{"verify", "--", "--since"}, NULL},
		{{"verify", "--since=1h"}, "--since=1h"},
		{{"show", "-fo", "x"}, "-fo"},
		{{"head", "-", "--follow"}, "--follow"},
	};
	const struct cli_cmd *audit = cli_find(cli_commands, "audit");
	char line[512];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int argc = 0;
		while (argc < 5 && cases[i].argv[argc])
			argc++;
		const char *bad = cli_unlisted_opt(audit, cli_find(audit->subs, cases[i].argv[0]), argc,
						   (char **)cases[i].argv);
		if (cases[i].bad ? !bad || strcmp(bad, cases[i].bad) : bad != NULL)
			fail_msg("case %zu: %s", i, bad ? bad : "(none)");
	}
	assert_int_equal(run("\"$K\" audit append --type t && \"$K\" audit sign"), 0);
	for (const struct cli_cmd *c = cli_commands; c->name; c++)
		for (const struct cli_cmd *s = c->subs; s && s->name; s++)
			for (const struct cli_cmd *t = c->subs; t->name; t++)
				for (const struct cli_opt *o = t->opts; o && o->help; o++) {
					char sp[64];
					if (in_opts(s->opts, o->name, o->shrt) || in_opts(c->opts, o->name, o->shrt))
						continue;
					spelling(o, !o->name, sp, sizeof(sp));
					snprintf(line, sizeof(line), "\"$K\" %s %s %s %s", c->name, s->name, sp,
						 o->arg ? sample(o->arg) : "");
					if (run("%s", line) == 0)
						fail_msg("%s: not refused (answer: %s)", line, out);
				}
}

/* make man's pages, rendered by groff (no warnings) and found by man. */
static void test_man_pages(void **state)
{
	assert_int_equal(run("mkdir -p \"$T/man/man1\" && \"$K\" help --man >\"$T/man/man1/kosa8.1\" && "
			    "for c in $(\"$K\" help --commands); do "
			    "\"$K\" help --man $c >\"$T/man/man1/kosa8-$c.1\" || exit 1; done"), 0);
	assert_int_equal(run("ls \"$T/man/man1\" | wc -l"), 0);
	assert_true(atoi(out) > 20);
	assert_int_equal(run("for f in \"$T\"/man/man1/*.1; do groff -man -Tutf8 -ww -z \"$f\" || exit 1; done"), 0);
	assert_string_equal(out, "");
	assert_int_equal(run("MANPATH=\"$T/man\" MANPAGER=cat MANWIDTH=100 LC_ALL=C man kosa8-run"), 0);
	assert_non_null(strstr(out, "kosa8-run - run a command in a new sandbox"));
	assert_non_null(strstr(out, "kosa8 run [OPTIONS] [--] COMMAND [ARG...]"));
	assert_non_null(strstr(out, "--workspace DIR"));
	assert_int_equal(run("MANPAGER=cat MANWIDTH=100 LC_ALL=C man -l \"$T/man/man1/kosa8-audit.1\""), 0);
	assert_non_null(strstr(out, "kosa8 audit check-proof FILE [--pubkey KEY]"));
	assert_int_equal(run("MANPAGER=cat MANWIDTH=100 LC_ALL=C man -l \"$T/man/man1/kosa8.1\""), 0);
	assert_non_null(strstr(out, "kosa8-approvals(1)"));
}

/* COMPREPLY of _kosa8 for the words after "bash comp.sh", one a line. */
static const char *complete(const char *words)
{
	assert_int_equal(run("bash \"$T/comp.sh\" \"$K\" %s", words), 0);
	return out;
}

static void test_bash_completion(void **state)
{
	assert_int_equal(run("\"$K\" completion bash >\"$T/kosa8.bash\" && "
			    "bash -c '. \"$1/kosa8.bash\" && complete -p kosa8' sh \"$T\""), 0);
	assert_string_equal(out, "complete -F _kosa8 kosa8\n");
	assert_int_equal(run("cat >\"$T/comp.sh\" <<'EOF'\n"
			    ". \"$(dirname \"$0\")/kosa8.bash\"\n"
			    "COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1))\n"
			    "_kosa8 && { [ ${#COMPREPLY[@]} -eq 0 ] || printf '%%s\\n' \"${COMPREPLY[@]}\" | sort; }\n"
			    "EOF\n"), 0);
	assert_non_null(strstr(complete("''"), "\naudit\n"));
	assert_null(strstr(out, "__supervise"));
	assert_string_equal(complete("ru"), "run\n");
	assert_string_equal(complete("run --wo"), "--workspace\n");
	assert_non_null(strstr(complete("audit ''"), "check-proof\n"));
	assert_string_equal(complete("audit show --s"), "--sandbox\n--since\n");
	assert_string_equal(complete("start ''"), "sb-one\nsb-two\n");
	assert_string_equal(complete("rm -f sb-t"), "sb-two\n");
	assert_string_equal(complete("exec -u root ''"), "sb-one\nsb-two\n");
	assert_string_equal(complete("checkpoint ''"), "rm\nsb-one\nsb-two\n");
	assert_string_equal(complete("approvals deny ''"), "sb-one\nsb-two\n");
	assert_string_equal(complete("exec sb-one ls -"), "");
	assert_string_equal(complete("run -- ls -"), "");
	assert_string_equal(complete("run --name ''"), "");
	/* compgen -W expands its words: a folder in the state dir named like a
	 * command substitution is not a sandbox name, so never offered. */
	assert_int_equal(run("d=\"$KOSA8_STATE_DIR/sandboxes/sb-\\$(touch pwned)\" && mkdir \"$d\" && "
			    "cp \"$KOSA8_STATE_DIR/sandboxes/sb-one/sandbox.json\" \"$d/\""), 0);
	assert_int_equal(run("ls \"$KOSA8_STATE_DIR/sandboxes\" | grep -c touch"), 0);
	assert_string_equal(out, "1\n");
	assert_string_equal(complete("stop ''"), "sb-one\nsb-two\n");
	assert_int_equal(run("test -e pwned && rm pwned"), 1);
	assert_int_equal(run("mkdir -p \"$T/wsdir\""), 0);
	assert_non_null(strstr(complete("run --workspace \"$T/wsd\""), "/wsdir\n"));
}

/* fish for real (complete -C asks it what it would offer); zsh through its
 * bash emulation, as bashcompinit calls the bash completion (zsh's own
 * compadd does the prefix filtering there, so only membership is checked). */
static void test_fish_zsh_completion(void **state)
{
	assert_int_equal(run("\"$K\" completion fish >\"$T/kosa8.fish\" && fish -n \"$T/kosa8.fish\""), 0);
	assert_int_equal(run("PATH=\"$(dirname \"$K\"):$PATH\" fish -c 'source $argv[1]; complete -C \"kosa8 ru\"; "
			    "complete -C \"kosa8 audit show --s\"; complete -C \"kosa8 stop \"' \"$T/kosa8.fish\""), 0);
	assert_string_equal(out, "run\trun a command in a new sandbox\n"
				 "--sandbox\tonly records of this sandbox\n"
				 "--since\tonly records from TIME: 2026-12-02T09:00:00Z, @UNIXSECONDS, or an age such as "
				 "30s, 15m, 2h, 7d\n"
				 "sb-one\nsb-two\n");
	assert_int_equal(run("\"$K\" completion zsh >\"$T/kosa8.zsh\" && zsh -n \"$T/kosa8.zsh\" && "
			    "zsh -fc 'source $1; emulate -L sh; setopt kshglob noshglob braceexpand; "
			    "COMP_WORDS=(\"$2\" start \"\"); COMP_CWORD=2; _kosa8; print -l -- \"${COMPREPLY[@]}\"; "
			    "COMP_WORDS=(\"$2\" audit show --s); COMP_CWORD=3; COMPREPLY=(); _kosa8; "
			    "print -l -- \"${COMPREPLY[@]}\"' zsh \"$T/kosa8.zsh\" \"$K\""), 0);
	if (!strstr(out, "sb-one\n") || !strstr(out, "sb-two\n") || !strstr(out, "\n--sandbox\n") ||
	    strstr(out, "not found"))
		fail_msg("zsh completion:\n%s", out);
}

/* kosa8 --version and kosa8 version: the commit this tree is at. */
/* kosa8 is linked without the libraries of the commands it hands to
 * kosa8-tools (src/cli/tools.c: what every other command saves), and those
 * commands still work through it, or fail clearly where it is missing. */
static void test_tools_split(void **state)
{
	static const char *const heavy[] = {"libcurl", "libarchive", "libmicrohttpd"};

	assert_int_equal(run("objdump -p \"$K\" | awk '/NEEDED/ { print $2 }'"), 0);
	for (size_t i = 0; i < ARRAY_SIZE(heavy); i++)
		if (strstr(out, heavy[i]))
			fail_msg("kosa8 links %s:\n%s", heavy[i], out);
	assert_int_equal(run("objdump -p \"$K\"-tools | awk '/NEEDED/ { print $2 }'"), 0);
	for (size_t i = 0; i < ARRAY_SIZE(heavy); i++)
		if (!strstr(out, heavy[i]))
			fail_msg("kosa8-tools does not link %s:\n%s", heavy[i], out);
	/* Through kosa8-tools: export's own answer. */
	assert_int_equal(run("\"$K\" image export no-such \"$T/x.tar\""), 1);
	assert_non_null(strstr(out, "no image 'no-such'"));
	assert_int_equal(run("\"$K\" image import \"$T/none.tar\" --sha256 bad"), 2);
	assert_non_null(strstr(out, "--sha256 takes 64 hex digits"));
	/* A kosa8 without kosa8-tools beside it: help still, the command not. */
	assert_int_equal(run("mkdir -p \"$T/lone\" && cp \"$K\" \"$T/lone/kosa8\""), 0);
	assert_int_equal(run("\"$T/lone/kosa8\" ui --help"), 0);
	assert_int_equal(run("\"$T/lone/kosa8\" ui"), 127);
	assert_non_null(strstr(out, "kosa8-tools: not found"));
	assert_int_equal(run("\"$T/lone/kosa8\" image export no-such \"$T/x.tar\""), 127);
	assert_int_equal(run("KOSA8_KERNEL=\"$K\" KOSA8_IMAGE_SOURCE=\"$T/none.tar\" \"$T/lone/kosa8\" create --cold --name t1"), 1);
	assert_non_null(strstr(out, "kosa8-tools: not found"));
}

static void test_version(void **state)
{
	char want[128], line[256];

	assert_int_equal(run("\"$K\" --version"), 0);
	assert_true(strlen(out) < sizeof(line));
	memcpy(line, out, strlen(out) + 1);
	assert_int_equal(run("\"$K\" version"), 0);
	assert_string_equal(out, line);
	assert_int_equal(strncmp(line, "kosa8 ", 6), 0);
	assert_true(strstr(line, ", release build)\n") || strstr(line, ", san build)\n"));
	/* In this project's own git tree: its commit (describe's, less -dirty). */
	if (run("cd '%s/../..' && [ \"$(git rev-parse --show-toplevel)\" = \"$PWD\" ] && "
	       "git describe --always", srcdir) == 0) {
		snprintf(want, sizeof(want), "(commit %.*s", (int)strcspn(out, "\n"), out);
		if (!strstr(line, want))
			fail_msg("%s has not %s", line, want);
	} else {
		assert_non_null(strstr(line, "(commit unknown,"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_command_answers_help),
		cmocka_unit_test(test_help_found_where_options_are),
		cmocka_unit_test(test_table_options_are_accepted),
		cmocka_unit_test(test_parsers_take_only_table_options),
		cmocka_unit_test(test_sub_refuses_sibling_options),
		cmocka_unit_test(test_man_pages),
		cmocka_unit_test(test_bash_completion),
		cmocka_unit_test(test_fish_zsh_completion),
		cmocka_unit_test(test_tools_split),
		cmocka_unit_test(test_version),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
