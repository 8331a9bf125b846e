/*
 * compact.h: compaction: the oldest part of the working set summarised by
 * the conversation's model into a summary (store.h's summaries), after which
 * the working set starts. The log is untouched; the next revival starts from
 * the summary. Asked for by the supervisor (queued by wipc.h in w->compacts)
 * or by the configuration's compact_events when the worker goes idle.
 */
#ifndef AGENTD_AGENT_COMPACT_H
#define AGENTD_AGENT_COMPACT_H

#include "agent/worker.h"

#include <stddef.h>

/* Summarise the working set up to `keep` events short of its end, never past
 * the last turn boundary. 0 (also when nothing is old enough), or with a
 * message in err: -EINVAL (the log's tail cannot be read), -ENOMEM, -ENOENT
 * (the conversation's model is not configured), -EDQUOT (the budget is
 * spent: a summary's call is paid from it), -EIO (the model call failed).
 * Reports "compacting". Told to stop during the model call, exits 0; store
 * failures after the summary is committed exit (wstore.h). */
int compact_run(struct worker *w, int keep, char *err, size_t errlen);

/* Answer every queued compact request: one compaction answers all those
 * queued before it began; those that arrive during it (its model call reads
 * the socket) get the next one. Then reports w->reported again. */
void compact_answer(struct worker *w);

#endif
