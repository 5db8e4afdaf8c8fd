/* The console's page, script and style sheet, built into the binary from
 * src/ui/assets/ as they are (no build step, nothing fetched): the
 * assembler includes each file's bytes and a NUL after them.  The Makefile
 * makes this object depend on those files. */
#include "ui/ui.h"

#define UI_ASSET(sym, file)                                  \
	__asm__(".section .rodata\n"                         \
		".global " #sym "\n"                         \
		".type " #sym ", @object\n"                  \
		#sym ":\n"                                   \
		".incbin \"src/ui/assets/" file "\"\n"       \
		".byte 0\n"                                  \
		".size " #sym ", . - " #sym "\n"             \
		".previous\n")

UI_ASSET(ui_index_html, "index.html");
UI_ASSET(ui_app_js, "app.js");
UI_ASSET(ui_app_css, "app.css");
