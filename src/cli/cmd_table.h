/* The kosa8 command table: every command and subcommand, its synopsis and
 * its options, written once.  main.c dispatches from it; --help, the man
 * pages (kosa8 help --man) and the shell completions (kosa8 completion) are
 * generated from it (cli_help.c), and a unit test holds each command's
 * parser to the options listed here. */
#ifndef KOSA8_CLI_CMD_TABLE_H
#define KOSA8_CLI_CMD_TABLE_H

#include <stdbool.h>
#include <stdio.h>

struct cli_opt {
	const char *name; /* long name without "--", or NULL (short only) */
	char shrt;        /* short letter, or 0 */
	const char *arg;  /* the argument's name, NULL for a flag */
	const char *help;
};

/* What a command's operands complete to in a shell. */
enum cli_operand { CLI_OPERAND_NONE, CLI_OPERAND_SANDBOX, CLI_OPERAND_FILE, CLI_OPERAND_COMMAND };

struct cli_cmd {
	const char *name;
	const char *summary;   /* one line, lower case, no full stop */
	const char *usage;     /* synopsis after "kosa8 NAME ", lines split by '\n' */
	const char *text;      /* paragraphs after the synopsis, or NULL */
	const struct cli_opt *opts;  /* ends with {0}, or NULL */
	const struct cli_cmd *subs;  /* subcommands, ends with {0}, or NULL */
	int (*run)(int argc, char **argv); /* argv[0] is the command's name */
	/* >= 0: a guest command line starts at this operand (run 0, exec 1):
	 * what follows belongs to it, --help included. */
	int guest_argv_at;
	enum cli_operand operand;
	bool hidden;           /* internal: not listed, no help */
};

extern const struct cli_cmd cli_commands[]; /* ends with {0} */
extern const struct cli_opt cli_global_opts[];

const struct cli_cmd *cli_find(const struct cli_cmd *list, const char *name);
/* The option of cmd (or of parent, whose options its subcommands share)
 * spelled arg ("--name", "--name=x", "-n"), or NULL. */
const struct cli_opt *cli_find_opt(const struct cli_cmd *parent, const struct cli_cmd *cmd,
				   const char *arg);

/* argv[0] is cmd's name.  True when --help or -h stands where cmd takes
 * options: before "--" and before a guest command line, not as an option's
 * argument.  *sub gets the subcommand named before it, or NULL. */
bool cli_wants_help(const struct cli_cmd *cmd, int argc, char **argv, const struct cli_cmd **sub);

/* For a parser that takes every option of parent's subcommands at once:
 * argv[0] is sub's name.  The first option before "--" that the table
 * lists neither under sub nor under parent, or NULL. */
const char *cli_unlisted_opt(const struct cli_cmd *parent, const struct cli_cmd *sub, int argc,
			     char **argv);

/* cli_help.c: the help text, man pages and completion scripts. */
void cli_print_usage(FILE *f);
void cli_print_help(FILE *f, const struct cli_cmd *cmd, const struct cli_cmd *sub);
/* "usage: kosa8 CMD [SUB] ..." lines on stderr and a pointer to --help; 2. */
int cli_usage_error(const char *cmd, const char *sub);
int cli_print_man(FILE *f, const struct cli_cmd *cmd);
int cli_print_completion(FILE *f, const char *shell);
const char *cli_version(void);

int cmd_help(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_completion(int argc, char **argv);

#endif
