/* kosa8 __ui-state: the console's view as JSON lines.  Apart from
 * cmd_ui.c, whose server is in kosa8-tools (tools.c): this one runs
 * where the supervisors are, in kosa8 itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "ui/state.h"

/* kosa8 __ui-state [SECONDS]: what the console shows, as one JSON line;
 * with SECONDS (1-3600) a line each time it changes (read every second)
 * for that long.  The console runs it where the supervisors are: forwarded
 * into the helper machine (cmd_machine.c lists it). */
int cmd_ui_state(int argc, char **argv)
{
	char *last = NULL, *text;
	unsigned long secs = 0;
	uint64_t end;
	char *e = NULL;

	if (argc == 2 && argv[1][0] >= '1' && argv[1][0] <= '9')
		secs = strtoul(argv[1], &e, 10);
	if (argc > 2 || (argc == 2 && (!e || *e || secs > 3600)))
		return cli_usage_error("__ui-state", NULL);
	end = mono_ms() + secs * 1000;
	do {
		cJSON *st = ui_state_read();
		text = cJSON_PrintUnformatted(st);
		cJSON_Delete(st);
		if (!text)
			return cli_fail("__ui-state", "out of memory");
		if (!last || strcmp(last, text)) {
			if (printf("%s\n", text) < 0 || fflush(stdout))
				break;
			free(last);
			last = text;
		} else {
			free(text);
		}
	} while (secs && mono_ms() < end && !usleep(1000 * 1000));
	free(last);
	return 0;
}
