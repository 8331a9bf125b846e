/*
 * workset.c: the worker's view of its conversation (workset.h).
 */
#include "agent/workset.h"
#include "agent/wstore.h"
#include "common/log.h"

#include <errno.h>
#include <string.h>

/* 0 with *out, -ENOMEM, or STORE_E_CORRUPT (its content cannot be decoded). */
static int ev_json(const struct store_event *ev, json_t **out)
{
	json_t *c;
	int e = jsonmp_decode(ev->content.ptr, ev->content.len, &c);
	if (e)
		return e == -ENOMEM ? e : STORE_E_CORRUPT;
	*out = json_pack("{sIss#so}", "seq", (json_int_t)ev->seq, "type", (const char *)ev->type.ptr, (int)ev->type.len,
			 "content", c);
	return *out ? 0 : -ENOMEM;
}

static int ws_add(void *arg, const struct store_event *ev)
{
	struct worker *w = arg;
	json_t *e = NULL;
	int r = ev_json(ev, &e);
	if (r == STORE_E_CORRUPT)
		log_error("%s: event %llu cannot be decoded", w->conv, (unsigned long long)ev->seq);
	if (!r && json_array_append_new(w->events, e))
		r = -ENOMEM; /* never a working set short of an event */
	if (r)
		return r;
	w->last_seq = ev->seq;
	return 0;
}

static void load_settings(struct worker *w, store_txn *t)
{
	struct store_conv c;
	int e = store_conv_get(t, w->conv, &c);
	if (e) {
		store_txn_abort(t);
		wstore_die(w, e, "read conversation");
	}
	w->ended = c.status == STORE_ENDED;
	w->active = c.status == STORE_ACTIVE;
	w->paused = c.status == STORE_PAUSED;
	json_decref(w->settings);
	w->settings = NULL;
	if (jsonmp_decode(c.settings.ptr, c.settings.len, &w->settings) == -ENOMEM)
		wstore_die_oom(w, t, "reading the conversation's settings");
	if (!json_is_object(w->settings)) {
		store_txn_abort(t);
		wstore_die(w, STORE_E_CORRUPT, "conversation settings");
	}
}

/* Revival read: the latest summary and every event after it. */
void workset_load(struct worker *w)
{
	store_txn *t = wstore_rbegin(w);
	struct store_summary s;
	int has = 0;
	load_settings(w, t);
	if (!(w->events = json_array()))
		wstore_die_oom(w, t, "reading the log");
	int e = store_load_since(t, w->conv, &s, &has, ws_add, w);
	if (e == -ENOMEM)
		wstore_die_oom(w, t, "reading the log");
	if (e) {
		store_txn_abort(t);
		wstore_die(w, e, "load_since");
	}
	if (has) {
		uint64_t last = 0;
		if ((e = store_event_latest_seq(t, w->conv, &last)) == 0 && last < s.to_seq)
			e = STORE_E_CORRUPT; /* a summary past the log: nothing read from here is sound */
		if (e) {
			store_txn_abort(t);
			wstore_die(w, e, "summary");
		}
		w->sum_to = s.to_seq;
		w->sum_version = s.version;
		if (!w->last_seq)
			w->last_seq = s.to_seq;
		json_t *content = NULL;
		if (jsonmp_decode(s.content.ptr, s.content.len, &content) == -ENOMEM)
			wstore_die_oom(w, t, "reading the summary");
		if (!content) {
			store_txn_abort(t);
			wstore_die(w, STORE_E_CORRUPT, "summary");
		}
		w->summary = json_pack("{sIsIsosI}", "from_seq", (json_int_t)s.from_seq, "to_seq", (json_int_t)s.to_seq,
				      "content", content, "version", (json_int_t)s.version);
		if (!w->summary)
			wstore_die_oom(w, t, "reading the summary"); /* never a turn rendered without it */
	}
	store_txn_abort(t);
}

/* Pick up events committed since (by the supervisor: sends, resolutions,
 * expiries) and the current settings. */
void workset_refresh(struct worker *w)
{
	store_txn *t = wstore_rbegin(w);
	load_settings(w, t);
	struct store_range r = { .after = w->last_seq };
	int e = store_events_stream(t, w->conv, &r, ws_add, w);
	store_txn_abort(t);
	if (e)
		wstore_die(w, e, "read events");
}

/* A tool this conversation may use: configured and in its settings. */
const struct tool_cfg *workset_tool(struct worker *w, const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(w->settings, "tools"), i, n)
		if (json_is_string(n) && !strcmp(json_string_value(n), name))
			return config_tool(&w->cfg, name);
	/* PREFIX+tool: a tool of an MCP server the conversation offers. */
	json_array_foreach(json_object_get(w->settings, "tools"), i, n) {
		const struct tool_cfg *tc = json_is_string(n) ? config_tool(&w->cfg, json_string_value(n)) : NULL;
		if (mcp_tool_name(tc, name))
			return tc;
	}
	return NULL;
}

/* The conversation's max_tool_rounds, else the configuration's. */
int workset_max_tool_rounds(struct worker *w)
{
	json_t *v = json_object_get(w->settings, "max_tool_rounds");
	return json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 1000000
		       ? (int)json_integer_value(v)
		       : w->cfg.max_tool_rounds;
}

/* The working set's events with lo <= seq <= hi: a new array, or NULL
 * when out of memory (never one short of an event). */
json_t *workset_between(struct worker *w, uint64_t lo, uint64_t hi)
{
	json_t *a = json_array();
	int oom = !a;
	size_t i;
	json_t *e;
	json_array_foreach(w->events, i, e) {
		uint64_t seq = (uint64_t)json_integer_value(json_object_get(e, "seq"));
		if (seq >= lo && seq <= hi && json_array_append(a, e))
			oom = 1;
	}
	if (oom) {
		json_decref(a);
		return NULL;
	}
	return a;
}
