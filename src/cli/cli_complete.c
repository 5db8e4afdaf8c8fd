/* Shell completion scripts generated from the command table: bash (and zsh
 * through its bash compatibility), and fish.  Sandbox names come from
 * 'kosa8 ps -q' when the shell asks. */
#include <string.h>

#include "cli/cmd_table.h"

/* Option arguments that name files get file completion. */
static bool file_arg(const char *arg)
{
	static const char *const kinds[] = {"FILE", "DIR", "PATH", "DELTA", "IMAGE", NULL};

	for (int i = 0; kinds[i]; i++)
		if (strstr(arg, kinds[i]))
			return true;
	return false;
}

static void words_opts(FILE *f, const struct cli_opt *o, bool args_only, bool files_only)
{
	for (; o && o->help; o++) {
		if ((args_only && !o->arg) || (files_only && (!o->arg || !file_arg(o->arg))))
			continue;
		if (o->name)
			fprintf(f, " --%s", o->name);
		if (o->shrt)
			fprintf(f, " -%c", o->shrt);
	}
}

static const char *operand_kind(enum cli_operand k)
{
	switch (k) {
	case CLI_OPERAND_SANDBOX: return "sandbox";
	case CLI_OPERAND_FILE: return "file";
	default: return "none";
	}
}

/* One case arm per command and subcommand: "what:key) echo words;;". */
static void bash_arms(FILE *f, const char *key, const struct cli_cmd *c, const struct cli_cmd *parent)
{
	fprintf(f, "\t\"opts:%s\") echo '", key);
	words_opts(f, c->opts, false, false);
	if (parent)
		words_opts(f, parent->opts, false, false);
	fprintf(f, " --help -h';;\n\t\"argopts:%s\") echo '", key);
	words_opts(f, c->opts, true, false);
	if (parent)
		words_opts(f, parent->opts, true, false);
	fprintf(f, "';;\n\t\"fileopts:%s\") echo '", key);
	words_opts(f, c->opts, false, true);
	if (parent)
		words_opts(f, parent->opts, false, true);
	fprintf(f, "';;\n\t\"operand:%s\") echo %s;;\n", key, operand_kind(c->operand));
	if (c->guest_argv_at >= 0)
		fprintf(f, "\t\"guestat:%s\") echo %d;;\n", key, c->guest_argv_at);
	if (c->subs) {
		fprintf(f, "\t\"subs:%s\") echo '", key);
		for (const struct cli_cmd *s = c->subs; s->name; s++)
			fprintf(f, " %s", s->name);
		fprintf(f, "';;\n");
	}
}

static const char bash_main[] =
	"_kosa8() {\n"
	"\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
	"\tlocal cmd='' sub='' key='' w i n=0\n"
	"\tCOMPREPLY=()\n"
	"\tfor ((i = 1; i < COMP_CWORD; i++)); do\n"
	"\t\tw=${COMP_WORDS[i]}\n"
	"\t\t[[ $w == -- ]] && return 0\n"
	"\t\tif [[ $w == -* ]]; then\n"
	"\t\t\t[[ \" $(_kosa8_words argopts \"$key\") \" == *\" $w \"* ]] && ((i++))\n"
	"\t\t\tcontinue\n"
	"\t\tfi\n"
	"\t\tif [[ -z $cmd ]]; then\n"
	"\t\t\tcmd=$w key=$w\n"
	"\t\telif [[ -z $sub && $n -eq 0 && \" $(_kosa8_words subs \"$cmd\") \" == *\" $w \"* ]]; then\n"
	"\t\t\tsub=$w key=\"$cmd $w\"\n"
	"\t\telse\n"
	"\t\t\t# The guest's command line: nothing of kosa8's to complete.\n"
	"\t\t\t[[ $(_kosa8_words guestat \"$key\") == \"$n\" ]] && return 0\n"
	"\t\t\t((n++))\n"
	"\t\tfi\n"
	"\tdone\n"
	"\tif [[ $prev == -* && \" $(_kosa8_words argopts \"$key\") \" == *\" $prev \"* ]]; then\n"
	"\t\t[[ \" $(_kosa8_words fileopts \"$key\") \" == *\" $prev \"* ]] &&\n"
	"\t\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n"
	"\t\treturn 0\n"
	"\tfi\n"
	"\tif [[ $cur == -* ]]; then\n"
	"\t\tCOMPREPLY=($(compgen -W \"$(_kosa8_words opts \"$key\")\" -- \"$cur\"))\n"
	"\t\treturn 0\n"
	"\tfi\n"
	"\tlocal words=''\n"
	"\t[[ -z $sub && $n -eq 0 ]] && words=$(_kosa8_words subs \"$key\")\n"
	"\tcase $(_kosa8_words operand \"$key\") in\n"
	"\tsandbox) [[ $n -eq 0 ]] && words=\"$words $(\"${COMP_WORDS[0]}\" ps -q 2>/dev/null)\";;\n"
	"\tfile) COMPREPLY=($(compgen -f -- \"$cur\"));;\n"
	"\tesac\n"
	"\tCOMPREPLY+=($(compgen -W \"$words\" -- \"$cur\"))\n"
	"}\n"
	"complete -F _kosa8 kosa8\n";

static void print_bash(FILE *f)
{
	fprintf(f, "# bash completion for kosa8, generated from its command table by\n"
		   "# 'kosa8 completion bash'.\n"
		   "_kosa8_words() {\n\tcase \"$1:$2\" in\n\t\"opts:\") echo '");
	words_opts(f, cli_global_opts, false, false);
	fprintf(f, "';;\n\t\"subs:\") echo '");
	for (const struct cli_cmd *c = cli_commands; c->name; c++)
		if (!c->hidden)
			fprintf(f, " %s", c->name);
	fprintf(f, "';;\n");
	for (const struct cli_cmd *c = cli_commands; c->name; c++) {
		if (c->hidden)
			continue;
		bash_arms(f, c->name, c, NULL);
		for (const struct cli_cmd *s = c->subs; s && s->name; s++) {
			char key[128];
			snprintf(key, sizeof(key), "%s %s", c->name, s->name);
			bash_arms(f, key, s, c);
		}
	}
	fprintf(f, "\tesac\n}\n%s", bash_main);
}

/* A fish string in single quotes: \ and ' escaped. */
static void fish_str(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\\' || *s == '\'')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/* The condition: after command c (and subcommand s, if given). */
static void fish_cond(FILE *f, const struct cli_cmd *c, const struct cli_cmd *s)
{
	if (!c) {
		fputs(" -n __fish_use_subcommand", f);
		return;
	}
	fprintf(f, " -n '__fish_seen_subcommand_from %s", c->name);
	if (s)
		fprintf(f, "; and __fish_seen_subcommand_from %s", s->name);
	fputc('\'', f);
}

static void fish_opts(FILE *f, const struct cli_cmd *c, const struct cli_cmd *s, const struct cli_opt *o)
{
	for (; o && o->help; o++) {
		fputs("complete -c kosa8", f);
		fish_cond(f, c, s);
		if (o->name)
			fprintf(f, " -l %s", o->name);
		if (o->shrt)
			fprintf(f, " -s %c", o->shrt);
		if (o->arg)
			fputs(file_arg(o->arg) ? " -r -F" : " -r", f);
		fputs(" -d ", f);
		fish_str(f, o->help);
		fputc('\n', f);
	}
}

static void fish_operand(FILE *f, const struct cli_cmd *c, const struct cli_cmd *s, enum cli_operand k)
{
	if (k != CLI_OPERAND_SANDBOX && k != CLI_OPERAND_FILE)
		return;
	fputs("complete -c kosa8", f);
	fish_cond(f, c, s);
	fputs(k == CLI_OPERAND_SANDBOX ? " -a '(kosa8 ps -q 2>/dev/null)'\n" : " -F\n", f);
}

static void fish_cmd(FILE *f, const struct cli_cmd *c)
{
	fprintf(f, "complete -c kosa8 -n __fish_use_subcommand -a %s -d ", c->name);
	fish_str(f, c->summary);
	fputc('\n', f);
	for (const struct cli_cmd *s = c->subs; s && s->name; s++) {
		fprintf(f, "complete -c kosa8 -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from",
			c->name);
		for (const struct cli_cmd *t = c->subs; t->name; t++)
			fprintf(f, " %s", t->name);
		fprintf(f, "' -a %s -d ", s->name);
		fish_str(f, s->summary);
		fputc('\n', f);
		fish_opts(f, c, s, s->opts);
		fish_operand(f, c, s, s->operand);
	}
	fish_opts(f, c, NULL, c->opts);
	fish_operand(f, c, NULL, c->operand);
}

static void print_fish(FILE *f)
{
	fprintf(f, "# fish completion for kosa8, generated from its command table by\n"
		   "# 'kosa8 completion fish'.\ncomplete -c kosa8 -f\n");
	fish_opts(f, NULL, NULL, cli_global_opts);
	for (const struct cli_cmd *c = cli_commands; c->name; c++)
		if (!c->hidden)
			fish_cmd(f, c);
}

int cli_print_completion(FILE *f, const char *shell)
{
	if (!strcmp(shell, "bash")) {
		print_bash(f);
	} else if (!strcmp(shell, "zsh")) {
		fprintf(f, "#compdef kosa8\n# zsh completion for kosa8: its bash completion, through zsh's\n"
			   "# bashcompinit.  Load it with: source <(kosa8 completion zsh)\n"
			   "(( $+functions[compdef] )) || { autoload -U compinit && compinit; }\n"
			   "autoload -U +X bashcompinit && bashcompinit\n");
		print_bash(f);
	} else if (!strcmp(shell, "fish")) {
		print_fish(f);
	} else {
		return -1;
	}
	return 0;
}
