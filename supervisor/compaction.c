/* compaction.c: the compact op's reply, parked until the worker reports (see compaction.h). */
#include "supervisor/compaction.h"
#include "conv/conv.h"
#include "supervisor/control.h"
#include "supervisor/workers.h"

#include <bsd/sys/queue.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* One compact request waiting for its worker. */
struct parked {
	LIST_ENTRY(parked) link;
	store *st;
	char conv[STORE_ID_MAX + 1];
	struct slot *slot; /* NULL: its client went */
	json_t *id;
};

static LIST_HEAD(, parked) parked = LIST_HEAD_INITIALIZER(parked);

/* workers_compacted_fn: the reply the client waited for. */
static void compacted(void *arg, int err, const char *why, size_t len)
{
	struct parked *p = arg;
	if (p->slot) {
		struct client *c = slot_client(p->slot);
		char msg[300];
		if (!err) {
			json_t *sum;
			int e = conv_summary_read(p->st, p->conv, &sum);
			if (e) {
				snprintf(msg, sizeof msg, "compacted, but reading the summary failed: %s", store_strerror(e));
				slot_error(p->slot, p->id, PERR_INTERNAL, msg);
			} else {
				slot_ok(p->slot, p->id, json_pack("{so}", "summary", sum)); /* NULL: out of memory */
			}
		} else {
			/* The worker's reason says what failed; agentd's own says it all. */
			snprintf(msg, sizeof msg, "%s%.*s", err == -EIO ? "compaction failed: " : "", (int)len, why);
			slot_error(p->slot, p->id, PERR_INTERNAL, msg);
		}
		client_flush(c);
	}
	LIST_REMOVE(p, link);
	json_decref(p->id);
	free(p);
}

int compaction_ask(store *st, const char *conv, struct slot *s, json_t *id)
{
	if (!st || !conv)
		return -EINVAL;
	struct parked *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->st = st;
	snprintf(p->conv, sizeof p->conv, "%s", conv);
	p->slot = s;
	p->id = json_incref(id);
	LIST_INSERT_HEAD(&parked, p, link);
	int e = workers_compact(conv, compacted, p);
	if (e) {
		LIST_REMOVE(p, link);
		json_decref(p->id);
		free(p);
	}
	return e;
}

void compaction_client_gone(struct client *c)
{
	struct parked *p;
	LIST_FOREACH(p, &parked, link)
		if (p->slot && slot_client(p->slot) == c)
			p->slot = NULL;
}
