/* libFuzzer target: a template's template.json (supervisor/template.h),
 * which `kosa8 run`, `create` and `image prune` read from the state
 * directory.
 *
 * Whatever parses must hold together: absolute paths that fit PATH_MAX,
 * 1 to 64 vCPUs, the key it was asked for.  Anything else aborts.
 *
 *   fuzz/run.sh 60 template */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char key[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char kernel[PATH_MAX], image[PATH_MAX];
	uint64_t mem = 0;
	int cpus = 0;

	if (template_parse((const char *)data, size, key, kernel, image, &mem, &cpus))
		return 0;
	if (kernel[0] != '/' || image[0] != '/' || strlen(kernel) >= PATH_MAX ||
	    strlen(image) >= PATH_MAX || cpus < 1 || cpus > 64 || mem >= 1000000000000000ull)
		abort();
	return 0;
}
