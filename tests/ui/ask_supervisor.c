/* The browser test's sandbox supervisor, as far as approvals go
 * (tests/unit/served_approvals.h: the supervisor's own queue behind the
 * sandbox's control socket and owner lock).  For each HOST in argv it asks
 * approvals_ask("connect", HOST, 443), as the egress proxy does for an
 * `ask` rule, and prints "HOST allow|deny WHO" when answered; then exits.
 *
 *   ask_supervisor SANDBOX HOST...      (kosa8 folders from the environment) */
#include <stdio.h>
#include <string.h>

#include "served_approvals.h"

int main(int argc, char **argv)
{
	struct served s = {0};
	char who[64];

	if (argc < 3) {
		fprintf(stderr, "usage: ask_supervisor SANDBOX HOST...\n");
		return 2;
	}
	if (served_start(&s, argv[1])) {
		fprintf(stderr, "ask_supervisor: cannot serve sandbox %s\n", argv[1]);
		return 1;
	}
	fprintf(stderr, "ask_supervisor: serving %s\n", argv[1]);
	for (int i = 2; i < argc; i++) {
		enum policy_action r = approvals_ask(s.a, "connect", argv[i], 443, who, sizeof(who));
		printf("%s %s %s\n", argv[i], r == POLICY_ALLOW ? "allow" : "deny", who);
		fflush(stdout);
	}
	served_stop(&s);
	return 0;
}
