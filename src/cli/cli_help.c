/* What the command table (cmd_table.c) turns into: --help text, man pages
 * (roff) and shell completion scripts.  Nothing here names a command: a
 * command added to the table has all three. */
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"

#define WIDTH 80
#define OPT_COL 28

const struct cli_opt cli_global_opts[] = {
	{"verbose", 'v', NULL, "say more on stderr (-vv: debugging detail)"},
	{"version", 0, NULL, "print the version, the commit it was built from and the build, and exit"},
	{"help", 'h', NULL, "this help"},
	{0},
};

static const struct cli_opt help_opts[] = {{"help", 'h', NULL, "this help"}, {0}};

/* Prints text from column col, words wrapped at WIDTH onto lines indented
 * by indent, and ends the line. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
	while (*text) {
		size_t n = strcspn(text, " ");
		if (col > indent && col + 1 + (int)n > WIDTH) {
			fprintf(f, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', f);
			col++;
		}
		fwrite(text, 1, n, f);
		col += (int)n;
		text += n;
		text += strspn(text, " ");
	}
	fputc('\n', f);
}

static void print_opt(FILE *f, const struct cli_opt *o)
{
	int col;

	col = fprintf(f, "  %c%c%s", o->shrt ? '-' : ' ', o->shrt ? o->shrt : ' ',
		      o->shrt && o->name ? ", " : "  ");
	if (o->name)
		col += fprintf(f, "--%s", o->name);
	if (o->arg)
		col += fprintf(f, " %s", o->arg);
	if (col + 2 > OPT_COL) {
		fputc('\n', f);
		col = 0;
	}
	fprintf(f, "%*s", OPT_COL - col, "");
	wrap(f, o->help, OPT_COL, OPT_COL);
}

static void print_opts(FILE *f, const struct cli_opt *o)
{
	for (; o && o->help; o++)
		print_opt(f, o);
}

/* "kosa8 audit show" into buf. */
static const char *full_name(char *buf, size_t len, const struct cli_cmd *cmd, const struct cli_cmd *sub)
{
	snprintf(buf, len, "kosa8 %s%s%s", cmd->name, sub ? " " : "", sub ? sub->name : "");
	return buf;
}

static void print_synopsis(FILE *f, const char *lead, const char *name, const char *usage)
{
	const char *line = usage;

	do {
		size_t n = strcspn(line, "\n");
		fprintf(f, "%*s%s%s%.*s\n", (int)strlen(lead), line == usage ? lead : "", name, n ? " " : "",
			(int)n, line);
		line += n;
	} while (*line++);
}

void cli_print_usage(FILE *f)
{
	fprintf(f, "Usage:  kosa8 [OPTIONS] COMMAND [ARG...]\n\n"
		   "A local sandbox for AI coding agents: each sandbox is a microVM.\n\nCommands:\n");
	for (const struct cli_cmd *c = cli_commands; c->name; c++)
		if (!c->hidden)
			fprintf(f, "  %-12s %s\n", c->name, c->summary);
	fprintf(f, "\nOptions:\n");
	print_opts(f, cli_global_opts);
	fprintf(f, "\nRun 'kosa8 COMMAND --help' for a command's options.\n");
}

void cli_print_help(FILE *f, const struct cli_cmd *cmd, const struct cli_cmd *sub)
{
	const struct cli_cmd *c = sub ? sub : cmd;
	char name[128], line[256];

	print_synopsis(f, "Usage:  ", full_name(name, sizeof(name), cmd, sub), c->usage);
	fputc('\n', f);
	/* The summary as a sentence. */
	snprintf(line, sizeof(line), "%s", c->summary);
	if (line[0] >= 'a' && line[0] <= 'z')
		line[0] = (char)(line[0] - 'a' + 'A');
	wrap(f, line, 0, 0);
	if (c->text) {
		fputc('\n', f);
		wrap(f, c->text, 0, 0);
	}
	if (c->subs) {
		fprintf(f, "\nCommands:\n");
		for (const struct cli_cmd *s = c->subs; s->name; s++) {
			int col = fprintf(f, "  %-12s", s->name);
			wrap(f, s->summary, col + 1, 15);
		}
	}
	fprintf(f, "\nOptions:\n");
	print_opts(f, c->opts);
	if (sub)
		print_opts(f, cmd->opts);
	print_opts(f, help_opts);
	if (c->subs)
		fprintf(f, "\nRun '%s COMMAND --help' for more on a command.\n", name);
}

int cli_usage_error(const char *cmd, const char *sub)
{
	const struct cli_cmd *c = cli_find(cli_commands, cmd), *s = c && sub ? cli_find(c->subs, sub) : NULL;
	char name[128];

	if (!c)
		return 2;
	print_synopsis(stderr, "usage: ", full_name(name, sizeof(name), c, s), (s ? s : c)->usage);
	fprintf(stderr, "See '%s --help'.\n", name);
	return 2;
}


/* ---- man pages ---- */

/* roff text: backslashes, hyphens (minus signs in option names), and a
 * line start that would read as a request. */
static void roff(FILE *f, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", f);
		else if (*s == '-')
			fputs("\\-", f);
		else
			fputc(*s, f);
	}
}

static void man_opts(FILE *f, const struct cli_opt *o)
{
	for (; o && o->help; o++) {
		fputs(".TP\n", f);
		if (o->shrt)
			fprintf(f, "\\fB\\-%c\\fR%s", o->shrt, o->name ? ", " : "");
		if (o->name) {
			fputs("\\fB\\-\\-", f);
			roff(f, o->name);
			fputs("\\fR", f);
		}
		if (o->arg) {
			fputs(" \\fI", f);
			roff(f, o->arg);
			fputs("\\fR", f);
		}
		fputc('\n', f);
		roff(f, o->help);
		fputc('\n', f);
	}
}

static void man_synopsis(FILE *f, const char *name, const char *usage)
{
	const char *line = usage;

	do {
		size_t n = strcspn(line, "\n");
		char *l = strndup(line, n);
		fputs(".br\n.B ", f);
		roff(f, name);
		fputc('\n', f);
		if (l && *l) {
			roff(f, l);
			fputc('\n', f);
		}
		free(l);
		line += n;
	} while (*line++);
}

static void man_head(FILE *f, const char *title, const char *name, const char *summary)
{
	fprintf(f, ".\\\" Generated by 'kosa8 help --man' from the kosa8 command table.\n");
	fprintf(f, ".TH %s 1 \"\" \"kosa8 %s\" \"kosa8 Manual\"\n.SH NAME\n", title, cli_version());
	roff(f, name);
	fputs(" \\- ", f);
	roff(f, summary);
	fputs("\n.SH SYNOPSIS\n", f);
}

static void man_kosa8(FILE *f)
{
	man_head(f, "KOSA8", "kosa8", "a local sandbox for AI coding agents");
	man_synopsis(f, "kosa8", "[OPTIONS] COMMAND [ARG...]");
	fputs(".SH DESCRIPTION\nEach sandbox is a microVM with its own kernel, a host-side egress "
	      "proxy, secrets that never enter it, approvals, a signed audit log and checkpoints.\n"
	      ".SH OPTIONS\n", f);
	man_opts(f, cli_global_opts);
	fputs(".SH COMMANDS\n", f);
	for (const struct cli_cmd *c = cli_commands; c->name; c++) {
		if (c->hidden)
			continue;
		fprintf(f, ".TP\n\\fBkosa8\\-%s\\fR(1)\n", c->name);
		roff(f, c->summary);
		fputc('\n', f);
	}
	fputs(".SH SEE ALSO\nThe kosa8 README.md and docs/ folder.\n", f);
}

int cli_print_man(FILE *f, const struct cli_cmd *cmd)
{
	char title[64], name[64];

	if (!cmd) {
		man_kosa8(f);
		return 0;
	}
	snprintf(name, sizeof(name), "kosa8-%s", cmd->name);
	for (size_t i = 0; i <= strlen(name); i++)
		title[i] = name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i];
	man_head(f, title, name, cmd->summary);
	snprintf(name, sizeof(name), "kosa8 %s", cmd->name);
	man_synopsis(f, name, cmd->usage);
	fputs(".SH DESCRIPTION\n", f);
	roff(f, cmd->text ? cmd->text : cmd->summary);
	fputs("\n.SH OPTIONS\n", f);
	man_opts(f, cmd->opts);
	man_opts(f, help_opts);
	if (cmd->subs) {
		fputs(".SH COMMANDS\n", f);
		for (const struct cli_cmd *s = cmd->subs; s->name; s++) {
			char sname[128];
			snprintf(sname, sizeof(sname), "kosa8 %s %s", cmd->name, s->name);
			fputs(".SS \"", f);
			roff(f, sname);
			fputs("\"\n", f);
			man_synopsis(f, sname, s->usage);
			fputs(".PP\n", f);
			roff(f, s->summary);
			if (s->text) {
				fputs(". ", f);
				roff(f, s->text);
			}
			fputc('\n', f);
			man_opts(f, s->opts);
		}
	}
	fputs(".SH SEE ALSO\n\\fBkosa8\\fR(1)\n", f);
	return 0;
}
