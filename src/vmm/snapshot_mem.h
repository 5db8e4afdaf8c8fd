/* Checkpoint memory in layers: a full memory file at the bottom, and above
 * it layers that hold only the pages written since the checkpoint below
 * (docs/snapshot-format.md, "Memory layers").
 *
 * The VMM writes a layer when the checkpoint it last wrote or ran from is
 * a sibling directory still holding the same memory; a restore maps the
 * bottom file MAP_PRIVATE and each layer's runs of pages MAP_PRIVATE over
 * it (read instead for a layer of very many runs), so it reads nothing up
 * front and forks of one checkpoint share its layers' pages too.  Removing a
 * checkpoint that others stand on first folds its pages into them
 * (snapmem_detach_children), so no layer is ever left without its parent. */
#ifndef KOSA8_SNAPSHOT_MEM_H
#define KOSA8_SNAPSHOT_MEM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/guest_mem.h"
#include "vmm/snapshot.h"

struct snapmem_layer {
	char dir[PATH_MAX];
	struct snap_memory_desc md;
	uint64_t *pages;            /* layers only: the pages this one holds */
};

/* l[0] is the checkpoint asked for, l[n - 1] the full file under it. */
struct snapmem_chain {
	int n;
	struct snapmem_layer l[SNAP_MAX_MEM_DEPTH + 1];
};

/* Reads the state files from dir down to the full file, checking that each
 * parent is the memory its layer was taken over (same id, same size). */
int snapmem_chain_load(const char *dir, struct snapmem_chain *c, char *err, size_t errlen);
void snapmem_chain_free(struct snapmem_chain *c);

/* Guest RAM as the chain describes it (guest_mem_open_file on the bottom,
 * then each layer's pages mapped over it, lowest first). */
int snapmem_map(struct guest_mem *m, const struct snapmem_chain *c, char *err, size_t errlen);

/* Before checkpoint dir is deleted: every sibling checkpoint whose memory
 * is a layer over it gets dir's pages it lacks, and then stands on dir's
 * parent (or becomes full).  Returns how many were changed, or -errno with
 * err set; a failure leaves every checkpoint loadable.  *copied gets the
 * bytes written into them. */
int snapmem_detach_children(const char *dir, uint64_t *copied, char *err, size_t errlen);

#endif
