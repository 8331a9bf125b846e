/*
 * convs.h: what a person does to conversations from agentd-web's page
 * (docs/web.md, "Acting on a conversation", "Search"): send a message,
 * cancel, resume, fork and end one, as agentctl does, each logged on
 * stderr with the person and recorded in the conversation; find them by
 * id, metadata and the text of their last events, in bounded pages.
 */
#ifndef AGENTD_WEB_CONVS_H
#define AGENTD_WEB_CONVS_H

#include "web/api.h"

enum convs_act { CONVS_SEND, CONVS_CANCEL, CONVS_RESUME, CONVS_END, CONVS_FORK };

/* POST /api/send, cancel, resume, end, fork: the body checked (400 naming
 * what is wrong, nothing asked of agentd), the act asked of agentd as w's
 * person, its reply answered (with "recorded" where the name is written
 * after the act). */
enum MHD_Result convs_act(struct MHD_Connection *c, struct api_req *rq, const struct api_who *w, enum convs_act a);
/* GET /api/search?q=&after=: the matches among one list page. */
enum MHD_Result convs_search(struct MHD_Connection *c);

#endif
