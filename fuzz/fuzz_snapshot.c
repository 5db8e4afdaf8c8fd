/* libFuzzer target: a checkpoint state file from arbitrary bytes
 * (src/vmm/snapshot.c), the file `kosa8 vm --restore` reads first.
 *
 * Whatever parses must hold together: every section lies inside the input,
 * is found again by its tag and index, the disk chain, the memory
 * description and a memory layer's parent and page map decode or are
 * refused cleanly, and writing the parsed
 * sections out again gives a file that parses to the same sections.
 * Anything else aborts, which libFuzzer reports.  Built with
 * -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION so that checksums do not stop
 * the fuzzer at the door.
 *
 *   fuzz/run.sh 60 snapshot */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "disk/disk.h"
#include "vmm/snapshot.h"

static void check_section(const uint8_t *data, size_t size, const struct snapshot *s,
			  const struct snap_section *sec)
{
	const struct snap_section *found;
	struct snap_memory_desc md;
	const char *paths[DISK_MAX_LAYERS];
	char *storage;
	int n;

	if (sec->data < data || sec->len > size || sec->data + sec->len > data + size)
		abort();
	found = snapshot_find(s, sec->tag, sec->index);
	if (!found || found->tag != sec->tag || found->index != sec->index)
		abort();
	if (sec->tag == SNAP_SEC_DISK) {
		storage = malloc((size_t)sec->len + 1);
		if (!storage)
			abort();
		n = snapshot_disk_chain(sec, storage, (size_t)sec->len + 1, paths, DISK_MAX_LAYERS);
		for (int i = 0; i < n; i++)
			if (!paths[i][0] || strchr(paths[i], '\n'))
				abort();
		free(storage);
	}
	if (sec->tag == SNAP_SEC_MEMORY && snapshot_memory_desc(sec, &md) == 0 &&
	    md.data_bytes > md.size)
		abort();
}

/* A memory layer's parent must be a plain sibling name, and its page map
 * may name only pages the guest has. */
static void check_layer(const struct snapshot *s)
{
	uint8_t id[SNAP_MEM_ID_LEN];
	char name[SNAP_MAX_PARENT_NAME + 1];
	uint64_t *pages, npages = s->h.mem_size / 4096;

	if (snapshot_memory_parent(s, id, name) == 0 &&
	    (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
	     !snapshot_name_ok(name)))
		abort();
	if (snapshot_memory_pages(s, &pages) != 0)
		return;
	for (uint64_t p = npages; p < (npages + 63) / 64 * 64; p++)
		if (pages[p / 64] >> (p % 64) & 1)
			abort();
	free(pages);
}

/* Writes the parsed sections out again: the result must parse, to the same. */
static void check_rewrite(const struct snapshot *s)
{
	struct snap_writer w;
	struct snapshot again;
	char err[SNAP_ERR_LEN];

	snap_writer_init(&w, &s->h);
	for (uint32_t i = 0; i < s->nsections; i++)
		snap_writer_add(&w, s->secs[i].tag, s->secs[i].index, s->secs[i].data,
				s->secs[i].len);
	if (snap_writer_finish(&w) != 0)
		abort();
	if (snapshot_parse(w.buf, w.len, &again, err, sizeof(err)) != 0)
		abort();
	if (again.nsections != s->nsections || again.h.ncpus != s->h.ncpus ||
	    again.h.mem_size != s->h.mem_size || memcmp(again.h.cpu_fp, s->h.cpu_fp, SNAP_FP_LEN))
		abort();
	for (uint32_t i = 0; i < s->nsections; i++)
		if (again.secs[i].tag != s->secs[i].tag || again.secs[i].len != s->secs[i].len ||
		    memcmp(again.secs[i].data, s->secs[i].data, s->secs[i].len))
			abort();
	snapshot_free(&again);
	snap_writer_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snapshot s;
	char err[SNAP_ERR_LEN];

	err[0] = '\0';
	if (snapshot_parse(data, size, &s, err, sizeof(err)) != 0) {
		if (!err[0])
			abort(); /* every refusal says why */
		return 0;
	}
	for (uint32_t i = 0; i < s.nsections; i++)
		check_section(data, size, &s, &s.secs[i]);
	check_layer(&s);
	check_rewrite(&s);
	snapshot_free(&s);
	return 0;
}
