// agentd approvals page (docs/web.md). Everything that comes from agentd is data: it is put on the page with
// textContent and text nodes only, never parsed as HTML (no DOM property or call that parses markup).
'use strict';

const S = { csrf: '', name: '', by: '', role: '', accounts: false, pollMs: 1000, fromProxy: false, pending: new Map(), view: null };

// ---- helpers ----

// el('div', {class: 'x', onclick: f}, 'text', child): children that are not nodes become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : ''; }

function fmtLeft(ms) {
  if (ms <= 0) return '0s';
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24;
  const m = Math.floor(s / 60) % 60, sec = s % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

// A size: bytes, KiB, MiB, GiB or TiB (binary units: a map size is a power of two), one decimal past KiB.
function fmtBytes(n) {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i ? `${n.toFixed(1).replace(/\.0$/, '')} ${units[i]}` : `${n} bytes`;
}

// A duration: milliseconds under a second, else as fmtLeft.
function fmtDuration(ms) { return ms < 1000 ? `${Math.max(0, ms)} ms` : fmtLeft(ms); }

function json(v, indent) { return JSON.stringify(v, null, indent); }

// A value readable as is: strings without quotes, short values as one line of JSON, the rest indented.
function readable(v) {
  if (typeof v === 'string') return v;
  const line = json(v);
  return line === undefined || line.length <= 60 ? String(line) : json(v, 2);
}

function banner(msg, signIn) {
  const b = document.getElementById('banner');
  clear(b);
  b.hidden = !msg;
  if (msg) b.append(msg);
  if (signIn) b.append(' ', el('a', { href: '/login' }, 'Sign in again'));
}

class HttpError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
  }
}

async function request(path, opts) {
  const r = await fetch(path, Object.assign({ credentials: 'same-origin', cache: 'no-store' }, opts || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) banner('Your session ended.', true);
  if (!r.ok) throw new HttpError(r.status, body);
  return body;
}

const api = (path) => request(path);
const post = (path, body) => request(path, {
  method: 'POST', body: json(body),
  headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': S.csrf },
});

// ---- approvals (one card per pending human tool call) ----

function argsView(args) {
  if (args && typeof args === 'object' && !Array.isArray(args) && Object.keys(args).length) {
    return el('table', { class: 'args' },
      Object.entries(args).map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, el('pre', {}, readable(v))))));
  }
  return el('pre', { class: 'args' }, readable(args));
}

function cardSetStatus(card, state, text) {
  card.node.classList.remove('warn');
  card.node.classList.add(state);
  card.state = state;
  card.status.textContent = text;
  for (const b of card.node.querySelectorAll('button, input, textarea')) b.disabled = true;
  // Said, then out of the way: a minute later the card goes.
  if ((state === 'expired' || state === 'stale') && !card.leaving) card.leaving = setTimeout(() => removeCard(card), 60000);
}

async function decide(card, decision) {
  if (card.state !== 'pending' || card.busy) return; // a double click answers once
  card.busy = true;
  for (const b of card.node.querySelectorAll('button')) b.disabled = true;
  // What was approved is what runs: the digest of the args this card shows (agentd refuses others).
  const body = { tool_call_id: card.tc.id, decision };
  if (card.tc.args_digest) body.args_digest = card.tc.args_digest;
  const comment = card.comment.value.trim(), result = card.result.value.trim();
  card.status.textContent = '';
  if (result) {
    try { body.result = JSON.parse(result); } catch (e) {
      card.status.textContent = 'The result is not valid JSON: ' + e.message;
      card.busy = false;
      for (const b of card.node.querySelectorAll('button')) b.disabled = false;
      return;
    }
  } else if (comment) {
    body.comment = comment;
  }
  await sendDecision(card, '/api/resolve', body, `${decision === 'approve' ? 'Approved' : 'Denied'} by ${S.by}.`,
    'Already answered elsewhere, or expired: nothing more to do here.');
}

// A tool with approvers > 1 (docs/tools.md, "A second pair of eyes"): who has approved so far.
function setApprovals(card, tc) {
  if (!card.approvals) return;
  const names = tc.approved_by || [];
  card.approvals.textContent = tc.approvers > 1
    ? `Approvals: ${names.length} of ${tc.approvers}` + (names.length ? ` (${names.join(', ')})` : '') : '';
}

// A card's decision sent: said done, or stale (answered elsewhere), or the error with the buttons back.
async function sendDecision(card, url, body, doneText, staleText) {
  try {
    const r = await post(url, body);
    if (r && r.settled === false) {
      // Counted, not settled: the card stays, showing who has approved, until the others do.
      card.tc.approved_by = (card.tc.approved_by || []).concat([S.by]);
      setApprovals(card, card.tc);
      card.status.textContent = `${doneText} ${r.approvals} of ${r.approvers} approvals: waiting for another person.`;
      for (const b of card.node.querySelectorAll('button')) b.disabled = false;
      return;
    }
    cardSetStatus(card, 'done', doneText);
    setTimeout(() => removeCard(card), 4000);
  } catch (e) {
    if (e.code === 'stale') {
      cardSetStatus(card, 'stale', staleText);
      explainGone(card);
    } else if (e.code === 'conflict' && /approved it already/.test(e.message)) {
      card.status.textContent = `Not counted again: ${e.message}`;
      for (const b of card.node.querySelectorAll('button')) b.disabled = false;
    } else if (e.code === 'conflict') {
      card.status.textContent = 'Not sent: the arguments are no longer those shown here. Reload the page to see them.';
    } else {
      card.status.textContent = `Could not send the decision: ${e.message}`;
      for (const b of card.node.querySelectorAll('button')) b.disabled = false;
    }
  } finally {
    card.busy = false;
  }
}

function removeCard(card) {
  card.node.remove();
  if (S.pending.get(card.tc.id) === card) S.pending.delete(card.tc.id);
  updateCount();
}

// A card whose call is no longer pending: say what became of it.
async function explainGone(card) {
  try {
    const tc = (await api('/api/tool_call?id=' + encodeURIComponent(card.tc.id))).tool_call;
    if (tc.status === 'expired') {
      cardSetStatus(card, 'expired', 'Expired: nobody answered in time.');
    } else if (card.state === 'stale') {
      cardSetStatus(card, 'stale', `Already answered elsewhere (${tc.status}).`);
    } else {
      removeCard(card); // answered elsewhere (agentctl, another browser): it just goes
    }
  } catch (e) {
    removeCard(card);
  }
}

// A call whose outcome is unknown (docs/tools.md): retry, done (with a result) or failed, by settle.
async function settleCard(card, outcome) {
  if (card.state !== 'pending' || card.busy) return;
  card.busy = true;
  for (const b of card.node.querySelectorAll('button')) b.disabled = true;
  const body = { conversation: card.tc.conversation, tool_call_id: card.tc.id, outcome };
  const result = card.result.value.trim();
  card.status.textContent = '';
  if (result && outcome !== 'retry') {
    try { body.result = JSON.parse(result); } catch (e) {
      card.status.textContent = 'The result is not valid JSON: ' + e.message;
      card.busy = false;
      for (const b of card.node.querySelectorAll('button')) b.disabled = false;
      return;
    }
  }
  const said = { retry: 'Run again', done: 'Marked done', failed: 'Marked failed' }[outcome];
  await sendDecision(card, '/api/settle', body, `${said} by ${S.by}.`, 'Already decided elsewhere: nothing more to do here.');
}

function makeUnknownCard(tc, showConversation) {
  const card = { tc, state: 'pending', busy: false, unknown: true };
  card.time = el('span', { class: 'time' }, 'no deadline');
  card.status = el('div', { class: 'card-status', role: 'status' });
  card.result = el('textarea', { class: 'result', placeholder: 'result as JSON (optional: done\'s result, or the failure)' });
  card.node = el('section', { class: 'card unknown', 'data-tool-call': tc.id, 'data-kind': 'unknown' },
    el('div', { class: 'title' }, tc.name,
      showConversation ? el('span', { class: 'muted' }, ' in ',
        el('a', { href: '#/c/' + encodeURIComponent(tc.conversation) }, tc.conversation)) : null),
    el('div', { class: 'prompt' }, 'Outcome unknown: this call was interrupted after it started, and running it twice may not be safe. Did it happen?'),
    argsView(tc.args),
    el('div', { class: 'muted' }, `asked ${fmtTime(tc.inserted_at)} · ${tc.attempts} attempt(s) · ${tc.id}`),
    el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'retry', onclick: () => settleCard(card, 'retry') }, 'Run again'),
      el('button', { type: 'button', class: 'approve', onclick: () => settleCard(card, 'done') }, 'It happened'),
      el('button', { type: 'button', class: 'deny', onclick: () => settleCard(card, 'failed') }, 'It did not')),
    el('details', {}, el('summary', { class: 'muted' }, 'with a result'), card.result),
    card.status);
  return card;
}

// What led to an approval (docs/web.md, "Context on a card"): the conversation's last user message and the
// model's text before the call, the tools it was escalated along, read once per card from /api/events.
const CONTEXT_CHARS = 600;
function short(c) {
  const t = c && typeof c.text === 'string' ? c.text : json(c);
  return t.length > CONTEXT_CHARS ? t.slice(0, CONTEXT_CHARS) + '…' : t;
}

async function loadContext(card) {
  const tc = card.tc;
  const q = (p) => api('/api/events?' + new URLSearchParams(Object.assign({ conversation: tc.conversation }, p)));
  const line = (cls, label, text) => el('div', { class: cls }, el('span', { class: 'muted' }, label), text);
  try {
    const calls = await q({ type: 'tool_call', limit: '1000' });
    const ev = calls.events.find((e) => e.content && e.content.tool_call_id === tc.id);
    if (!ev) { card.context.textContent = 'Not among the conversation\'s last 1,000 tool calls: see its log.'; return; }
    const [u, m, esc] = await Promise.all([q({ type: 'user_msg', before: ev.seq, limit: '1' }),
      q({ type: 'assistant_msg', before: ev.seq, limit: '1' }), q({ type: 'escalation', after: ev.seq, limit: '1000' })]);
    const user = u.events[0], model = m.events[0];
    const chain = esc.events.filter((e) => e.content.tool_call_id === tc.id).pop();
    clear(card.context).append(
      line('ctx-user', 'User: ', user ? short(user.content) : '(no user message before it)'),
      line('ctx-model', 'Model: ', model && model.content.text ? short(model.content) : '(no text before the call)'),
      chain ? line('ctx-chain', 'Escalated: ', chain.content.chain.join(' → ')) : null,
      el('a', { class: 'ctx-log', href: '#/c/' + encodeURIComponent(tc.conversation) }, `the log (call at #${ev.seq})`));
  } catch (e) {
    card.context.textContent = `Cannot read the context: ${e.message}`;
  }
}

function makeCard(tc, showConversation) {
  if (tc.kind === 'unknown' || tc.status === 'unknown') return makeUnknownCard(tc, showConversation);
  const card = { tc, state: 'pending', busy: false };
  card.time = el('span', { class: 'time' });
  card.status = el('div', { class: 'card-status', role: 'status' });
  card.comment = el('input', { type: 'text', class: 'comment', placeholder: 'comment (optional)', maxlength: 2000 });
  card.result = el('textarea', { class: 'result', placeholder: 'result as JSON (optional, instead of a comment)' });
  card.node = el('section', { class: 'card', 'data-tool-call': tc.id },
    el('div', { class: 'title' }, tc.name,
      showConversation ? el('span', { class: 'muted' }, ' in ',
        el('a', { href: '#/c/' + encodeURIComponent(tc.conversation) }, tc.conversation)) : null),
    card.prompt = el('div', { class: 'prompt' }, tc.prompt || 'Approve?'),
    card.context = el('div', { class: 'context' }, el('span', { class: 'muted' }, 'reading the context…')),
    card.approvals = el('div', { class: 'approvals muted' }),
    argsView(tc.args),
    el('div', { class: 'muted' }, `asked ${fmtTime(tc.inserted_at)} · `, card.time,
      card.deadline = el('span', { class: 'deadline' }), ` · ${tc.id}`),
    el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'approve', onclick: () => decide(card, 'approve') }, 'Approve'),
      el('button', { type: 'button', class: 'deny', onclick: () => decide(card, 'deny') }, 'Deny'),
      card.comment),
    el('details', {}, el('summary', { class: 'muted' }, 'answer with a result'), card.result),
    card.status);
  setApprovals(card, tc);
  setDeadline(card);
  tick(card);
  loadContext(card);
  return card;
}

function setDeadline(card) {
  card.deadline.textContent = card.tc.deadline ? ` · deadline ${fmtTime(card.tc.deadline)}` : '';
}

// A call escalated (docs/tools.md, "When nobody answers") has another tool's prompt and deadline now: the
// card shows them, and its context the chain.
function refreshCard(card, tc) {
  if (card.unknown || (tc.prompt === card.tc.prompt && tc.deadline === card.tc.deadline)) return;
  Object.assign(card.tc, { prompt: tc.prompt, deadline: tc.deadline });
  if (card.state === 'expired') { // the countdown ran out here, but agentd handed the call on: it waits again
    card.state = 'pending';
    card.node.classList.remove('expired');
    card.status.textContent = '';
    clearTimeout(card.leaving);
    card.leaving = null;
    for (const b of card.node.querySelectorAll('button, input, textarea')) b.disabled = false;
  }
  card.prompt.textContent = tc.prompt || 'Approve?';
  setDeadline(card);
  tick(card);
  loadContext(card);
}

// The countdown: the warning state in the last fifth of the time (at least the last minute).
function tick(card) {
  const dl = card.tc.deadline;
  if (card.state !== 'pending' || card.unknown) return;
  if (!dl) { card.time.textContent = 'no deadline'; return; }
  const left = dl - Date.now(), total = dl - card.tc.inserted_at;
  if (left <= 0) {
    card.time.textContent = 'expired';
    cardSetStatus(card, 'expired', 'Expired: nobody answered in time.');
    return;
  }
  const warn = left <= Math.max(60000, total / 5);
  card.time.textContent = `expires in ${fmtLeft(left)}`;
  card.time.classList.toggle('warn', warn);
  card.node.classList.toggle('warn', warn);
}

function updateCount() {
  const n = [...S.pending.values()].filter((c) => c.state === 'pending').length;
  document.getElementById('pending-count').textContent = n ? String(n) : '';
  document.title = n ? `(${n}) agentd approvals` : 'agentd approvals';
}

// The pending list across every conversation, polled (docs/web.md says why polling).
async function pollPending() {
  try {
    const r = await api('/api/pending');
    if (!document.getElementById('banner').textContent.includes('session')) banner('');
    const seen = new Set();
    for (const tc of r.pending) {
      seen.add(tc.id);
      if (!S.pending.has(tc.id)) {
        const card = makeCard(tc, true);
        card.node.classList.add('new');
        S.pending.set(tc.id, card);
        if (S.view && S.view.onNewCard) S.view.onNewCard(card);
      } else {
        const card = S.pending.get(tc.id);
        card.tc.approved_by = tc.approved_by;
        setApprovals(card, tc); // others' approvals since the page showed it
        refreshCard(card, tc);
      }
    }
    for (const card of [...S.pending.values()]) {
      if (!seen.has(card.tc.id) && card.state === 'pending' && !card.busy) {
        card.state = 'gone';
        explainGone(card);
      }
    }
    updateCount();
  } catch (e) {
    if (e.status !== 401) banner(`Cannot list pending approvals: ${e.message}`);
  } finally {
    setTimeout(pollPending, S.pollMs);
  }
}

// ---- views ----

function viewPending(main) {
  const list = el('div', { id: 'pending-list' });
  const nameBox = el('input', { type: 'text', id: 'name', value: S.name, maxlength: 100, placeholder: 'your name' });
  const saved = el('span', { class: 'muted', role: 'status' });
  const empty = el('p', { class: 'muted', id: 'pending-empty' }, 'Nothing waits for a decision.');
  main.append(el('h1', {}, 'Pending approvals'),
    S.fromProxy ? el('p', { class: 'muted' }, `Decisions are recorded as ${S.by} (from the proxy).`)
      : S.accounts ? el('p', { class: 'muted', id: 'account' }, `Signed in as ${S.by} (${S.role}): decisions are recorded as ${S.by}.`)
      : el('p', { class: 'filters' }, 'Your name, recorded with each decision:', nameBox,
        el('button', { type: 'button', onclick: async () => {
          try {
            await post('/api/session', { name: nameBox.value.trim() });
            await loadSession();
            saved.textContent = 'saved';
          } catch (e) { saved.textContent = e.message; }
        } }, 'Save'), saved),
    empty, list);
  const refresh = () => { empty.hidden = [...list.children].length > 0; };
  for (const card of S.pending.values()) list.append(card.node);
  refresh();
  const obs = new MutationObserver(refresh);
  obs.observe(list, { childList: true });
  return { onNewCard: (card) => list.append(card.node), close: () => obs.disconnect() };
}

// The conversation list's filter lives in the URL, so a filtered view can be bookmarked and shared:
//   #/conversations?status=idle&model=M&meta.KEY=VALUE&meta.KEY2=VALUE2&updated_after=ISO&updated_before=ISO&limit=N
// (times in UTC, ISO 8601). /api/conversations takes the same names, with the times in milliseconds.
function readFilter(params) {
  const f = { status: params.get('status') || '', model: params.get('model') || '', meta: [],
    after: params.get('updated_after') || '', before: params.get('updated_before') || '', limit: params.get('limit') || '' };
  for (const [k, v] of params) if (k.startsWith('meta.')) f.meta.push([k.slice(5), v]);
  return f;
}

function filterHash(f) {
  const q = new URLSearchParams();
  if (f.status) q.set('status', f.status);
  if (f.model) q.set('model', f.model);
  for (const [k, v] of f.meta) q.append('meta.' + k, v);
  if (f.after) q.set('updated_after', f.after);
  if (f.before) q.set('updated_before', f.before);
  if (f.limit) q.set('limit', f.limit);
  const s = q.toString();
  return '#/conversations' + (s ? '?' + s : '');
}

// An ISO time for a datetime-local input (local time, to the second), and back.
function toLocalInput(iso) {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return '';
  return new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

function timeInput(id, iso) {
  const input = el('input', { type: 'datetime-local', id, step: 1, value: toLocalInput(iso) });
  // Unchanged, it keeps the URL's exact time (the input shows whole seconds only). Compared as times, not
  // as text: the browser drops ':00' seconds from the value it gives back.
  input.isoOf = () => {
    if (!input.value) return '';
    const shown = new Date(input.value).getTime();
    return shown === Date.parse(toLocalInput(iso)) ? iso : new Date(shown).toISOString();
  };
  return input;
}

function metaRow(k, v) {
  const row = el('span', { class: 'meta-row' },
    el('input', { type: 'text', class: 'meta-key', placeholder: 'key', value: k, maxlength: 64, 'aria-label': 'metadata key' }), '=',
    el('input', { type: 'text', class: 'meta-value', placeholder: 'value', value: v, 'aria-label': 'metadata value' }));
  row.append(el('button', { type: 'button', class: 'link', title: 'remove', onclick: () => row.remove() }, '×'));
  return row;
}

// A conversation's metadata as key=value chips; each links to the list filtered by that pair too.
function metaChips(meta, f) {
  return Object.entries(meta || {}).map(([k, v]) => el('a', { class: 'meta', title: 'filter by this',
    href: filterHash(Object.assign({}, f, { meta: f.meta.filter(([fk]) => fk !== k).concat([[k, v]]) })) }, `${k}=${v}`));
}

function viewConversations(main, params) {
  const f = readFilter(params);
  const form = el('form', { id: 'filter', class: 'filters' });
  const sel = el('select', { id: 'status-filter', onchange: () => form.requestSubmit() },
    ['', 'active', 'suspended', 'idle', 'ended', 'paused'].map((s) => el('option', { value: s, selected: s === f.status }, s || 'any status')));
  const model = el('input', { type: 'text', id: 'model-filter', value: f.model, placeholder: 'any model', maxlength: 128 });
  const metas = el('span', { id: 'meta-filter' }, f.meta.map(([k, v]) => metaRow(k, v)), metaRow('', ''));
  const after = timeInput('after-filter', f.after), before = timeInput('before-filter', f.before);
  const error = el('p', { id: 'list-error', class: 'error', role: 'alert', hidden: true });
  const count = el('p', { id: 'list-count', class: 'muted' });
  const body = el('tbody');
  const more = el('button', { type: 'button', id: 'more', hidden: true }, 'More');
  let cursor = null, shown = 0;

  form.append(el('label', {}, 'Status ', sel), el('label', {}, 'Model ', model),
    el('span', {}, 'Metadata ', metas, el('button', { type: 'button', class: 'link', id: 'meta-add',
      onclick: () => metas.append(metaRow('', '')) }, '+ pair')),
    el('label', {}, 'Updated after ', after), el('label', {}, 'before ', before),
    el('button', { type: 'submit' }, 'Filter'), el('a', { href: '#/conversations' }, 'clear'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const pairs = [...metas.querySelectorAll('.meta-row')].map((r) => [r.querySelector('.meta-key').value, r.querySelector('.meta-value').value]);
    const hash = filterHash({ status: sel.value, model: model.value.trim(), limit: f.limit, after: after.isoOf(), before: before.isoOf(),
      meta: pairs.filter(([k, v]) => k !== '' || v !== '') });
    if (location.hash === hash) route(); else location.hash = hash;
  });

  const fail = (msg) => { error.textContent = msg; error.hidden = false; };
  const load = async () => {
    more.disabled = true;
    const q = new URLSearchParams({ limit: f.limit || '100' });
    for (const [name, v] of [['status', f.status], ['model', f.model], ['after', cursor]]) if (v) q.set(name, v);
    for (const [name, iso] of [['updated_after', f.after], ['updated_before', f.before]]) {
      if (!iso) continue;
      const ms = Date.parse(iso);
      if (Number.isNaN(ms)) return fail(`This filter was not accepted: '${name}' is not a time (${iso}).`);
      q.set(name, String(ms));
    }
    for (const [k, v] of f.meta) q.append('meta.' + k, v);
    try {
      const r = await api('/api/conversations?' + q);
      for (const c of r.conversations) {
        body.append(el('tr', { 'data-conversation': c.id },
          el('td', {}, el('a', { href: '#/c/' + encodeURIComponent(c.id) }, c.id)),
          el('td', {}, c.status), el('td', {}, c.settings.model), el('td', { class: 'meta-cell' }, metaChips(c.metadata, f)),
          el('td', {}, c.worker ? c.worker.state : ''), el('td', {}, c.last_seq), el('td', {}, fmtTime(c.updated_at))));
      }
      shown += r.conversations.length;
      cursor = r.next || null;
      more.hidden = !cursor;
      count.textContent = shown ? `${shown} shown${cursor ? ', more match' : ''}` : 'No conversation matches this filter.';
    } catch (e) {
      if (e.code === 'bad_request') fail(`This filter was not accepted: ${e.message}`);
      else fail(`Cannot list conversations: ${e.message}`);
    } finally { more.disabled = false; }
  };
  more.addEventListener('click', load);
  main.append(el('h1', {}, 'Conversations'), form, error, count,
    el('table', {}, el('thead', {}, el('tr', {}, ['id', 'status', 'model', 'metadata', 'worker', 'events', 'updated'].map((h) => el('th', {}, h)))), body),
    more);
  load();
  return {};
}

function eventSummary(ev) {
  const c = ev.content || {};
  switch (ev.type) {
    case 'user_msg': case 'assistant_msg':
      return typeof c.text === 'string' ? el('pre', {}, c.text) : el('pre', {}, json(c, 2));
    case 'tool_call':
      return el('div', {}, el('strong', {}, c.name), ` (${c.executor}, ${c.tool_call_id}) `, argsView(c.args));
    case 'suspension':
      return el('div', {}, `waiting for a person: ${c.prompt} (${c.tool_call_id})`);
    case 'tool_result': case 'resolution': {
      const by = !c.by ? '' : c.by.uid === undefined ? ` by ${c.by.name}` : ` by ${c.by.name ? c.by.name + ', ' : ''}uid ${c.by.uid}`;
      return el('div', {}, `${c.tool_call_id} ${c.status}${by}: `, el('pre', {}, readable(c.result)));
    }
    case 'approval_vote':
      return el('div', {}, `${c.tool_call_id} approved by ${c.by && c.by.name}: ${c.approvals} of ${c.approvers}`);
    case 'error':
      return el('pre', {}, c.message);
    default:
      return el('pre', {}, json(c, 2));
  }
}

// A conversation's runs (model turn attempts, docs/protocol.md "Runs"), newest first: one row per run,
// kept by id, so a run streamed by the watch (or read again) replaces its row or goes in its place.
function runsTable(conv) {
  const body = el('tbody', { id: 'runs-body' });
  const more = el('button', { type: 'button', id: 'runs-more', hidden: true }, 'More');
  const note = el('p', { id: 'runs-note', class: 'muted' });
  const rows = new Map();
  const cell = (cls, text) => el('td', { class: cls }, text);
  const duration = (r) => (r.ended_at ? fmtDuration(r.ended_at - r.started_at)
    : `${fmtDuration(Date.now() - r.started_at)} so far`);
  const put = (r) => {
    const tr = el('tr', { 'data-run': r.id, 'data-status': r.status, class: 'run-' + r.status },
      cell('run-id', r.id),
      el('td', { class: 'run-turn', title: `answers events ${r.from_seq + 1} to ${r.to_seq}` },
        r.to_seq > r.from_seq + 1 ? `#${r.from_seq + 1}–#${r.to_seq}` : `#${r.to_seq}`),
      cell('run-attempt', r.attempt), cell('run-status', r.status), cell('run-model', r.model),
      cell('run-started', fmtTime(r.started_at)), cell('run-ended', r.ended_at ? fmtTime(r.ended_at) : ''),
      cell('run-duration', duration(r)),
      cell('run-usage', r.usage ? `${r.usage.input_tokens} in, ${r.usage.output_tokens} out` : ''));
    tr.run = r;
    const old = rows.get(r.id);
    rows.set(r.id, tr);
    note.textContent = '';
    if (old) { old.replaceWith(tr); return; }
    const after = [...body.children].find((x) => x.run && x.run.id < r.id);
    body.insertBefore(tr, after || null);
  };
  let cursor = null; // the `next` of the oldest page read: "More" reads on from it
  // first: the newest page, read again at every (re)connection of the watch (runs stream from then on, so
  // what changed before is read here); else the page after the oldest one shown.
  const load = async (first) => {
    more.disabled = true;
    try {
      const q = new URLSearchParams({ conversation: conv, limit: '50' });
      if (!first && cursor) q.set('before', cursor);
      const r = await api('/api/runs?' + q);
      for (const run of r.runs) put(run);
      if (!first || cursor === null) { cursor = r.next || 0; more.hidden = !r.next; }
      if (!rows.size) note.textContent = 'No model turn has run yet.';
    } catch (e) { note.textContent = `Cannot list the runs: ${e.message}`; } finally { more.disabled = false; }
  };
  more.addEventListener('click', () => load(false));
  // a running run's duration grows
  const tick = () => { for (const tr of rows.values()) if (!tr.run.ended_at) tr.querySelector('.run-duration').textContent = duration(tr.run); };
  return {
    put, load, tick,
    nodes: [el('table', { id: 'runs' }, el('thead', {}, el('tr', {},
      ['run', 'turn (events)', 'attempt', 'status', 'model', 'started', 'ended', 'duration', 'tokens'].map((h) => el('th', {}, h)))), body),
    note, more],
  };
}

// Acting on a conversation (docs/web.md, "Acting on a conversation"): send a message, cancel its turn, resume,
// fork, end. Cancel and end ask first, in the page.
function actionsPanel(id, done) {
  const status = el('div', { id: 'act-status', class: 'card-status', role: 'status' });
  const confirmBox = el('div', { id: 'act-confirm', class: 'confirm', hidden: true });
  const text = el('textarea', { id: 'send-text', placeholder: 'a message to the conversation', maxlength: 100000 });
  const seq = el('input', { type: 'number', id: 'fork-seq', min: 1, placeholder: 'at seq (default: the last)' });
  const buttons = [];
  const button = (bid, cls, label, fn) => { const b = el('button', { type: 'button', id: bid, class: cls, onclick: fn }, label); buttons.push(b); return b; };
  const act = async (path, body, said) => {
    clear(status);
    confirmBox.hidden = true;
    for (const b of buttons) b.disabled = true;
    try {
      const r = await post(path, Object.assign({ conversation: id }, body));
      status.append(said(r));
      if (r.recorded === false) status.append(` (not recorded in its metadata: ${r.record_error})`);
      done();
      return r;
    } catch (e) {
      status.append(`Not done: ${e.message}`);
      return null;
    } finally { for (const b of buttons) b.disabled = false; }
  };
  const ask = (what, fn) => {
    clear(status);
    clear(confirmBox).append(`Really ${what}? `,
      el('button', { type: 'button', id: 'act-yes', class: 'deny', onclick: fn }, `Yes, ${what}`),
      el('button', { type: 'button', id: 'act-no', onclick: () => { confirmBox.hidden = true; } }, 'No'));
    confirmBox.hidden = false;
  };
  const eventId = () => 'web-' + [...crypto.getRandomValues(new Uint8Array(12))].map((x) => x.toString(16).padStart(2, '0')).join('');
  let pendingId = null; // one event_id per message typed: sending it again (a retry) writes it once
  text.addEventListener('input', () => { pendingId = null; });
  return el('div', { id: 'conv-actions' },
    el('div', { class: 'actions' }, text),
    el('div', { class: 'actions' },
      button('act-send', 'approve', 'Send', async () => {
        if (!text.value.trim()) { status.textContent = 'Type a message first.'; return; }
        pendingId = pendingId || eventId();
        if (await act('/api/send', { text: text.value, event_id: pendingId }, (r) => `Sent by ${S.by} (#${r.seq}).`)) {
          text.value = '';
          pendingId = null;
        }
      }),
      button('act-cancel', 'deny', 'Cancel the turn', () => ask('cancel the running turn', () => act('/api/cancel', {},
        (r) => (r.cancelled ? `Cancelled by ${S.by}.` : `Nothing to cancel: ${r.message}`)))),
      button('act-resume', '', 'Resume', () => act('/api/resume', {},
        (r) => (r.resumed ? `Resumed by ${S.by}.` : `Nothing to resume: ${r.message}`))),
      seq,
      button('act-fork', '', 'Fork', () => act('/api/fork', seq.value ? { seq: Number(seq.value) } : {},
        (r) => el('span', {}, `Forked by ${S.by} at #${r.forked_from.seq} as `,
          el('a', { href: '#/c/' + encodeURIComponent(r.conversation), id: 'forked' }, r.conversation), '.'))),
      button('act-end', 'deny', 'End', () => ask('end this conversation', () => act('/api/end', {}, () => `Ended by ${S.by}.`)))),
    confirmBox, status);
}

function viewConversation(main, id) {
  const head = el('div', { id: 'conv-head', class: 'muted' });
  const meta = el('div', { id: 'conv-meta', class: 'meta-cell' });
  const approvals = el('div', { id: 'conv-approvals' });
  const calls = el('tbody');
  const audit = el('tbody');
  const runs = runsTable(id);
  const log = el('div', { id: 'log' });
  const delta = el('div', { id: 'delta', 'aria-live': 'polite' });
  const live = el('span', { class: 'live off', id: 'live' }, 'connecting…');
  const cards = new Map();
  let last = 0, es = null, closed = false;

  const approvalsHead = el('h2', { hidden: true }, 'Waiting for a decision');
  main.append(el('h1', {}, 'Conversation ', el('span', { id: 'conv-id' }, id)), head, meta,
    el('h2', {}, 'Act on it'), actionsPanel(id, () => loadHead()),
    approvalsHead, approvals,
    el('h2', {}, 'Log ', live), log, delta,
    el('h2', {}, 'Runs'), ...runs.nodes,
    el('h2', {}, 'Tool calls'),
    el('table', {}, el('thead', {}, el('tr', {}, ['id', 'name', 'executor', 'status', 'args', 'result', 'asked', 'settled'].map((h) => el('th', {}, h)))), calls),
    el('h2', {}, 'Model calls (audit)'),
    el('table', {}, el('thead', {}, el('tr', {}, ['turn', 'task', 'model', 'latency ms', 'usage', 'at'].map((h) => el('th', {}, h)))), audit));

  const loadHead = async () => {
    try {
      const c = (await api('/api/conversation?id=' + encodeURIComponent(id))).conversation;
      clear(head).append(`status ${c.status} · model ${c.settings.model} · worker ${c.worker ? c.worker.state : 'none'} · `,
        `tokens in ${c.usage.input_tokens} out ${c.usage.output_tokens} · created ${fmtTime(c.created_at)}`);
      head.dataset.status = c.status;
      const chips = metaChips(c.metadata, readFilter(new URLSearchParams()));
      clear(meta).append('metadata ', ...(chips.length ? chips : [el('span', { class: 'muted' }, 'none')]));
    } catch (e) { clear(head).append(`Cannot load the conversation: ${e.message}`); }
  };
  const loadCalls = async () => {
    try {
      const r = await api('/api/tool_calls?conversation=' + encodeURIComponent(id));
      clear(calls);
      for (const tc of r.tool_calls) {
        calls.append(el('tr', { 'data-tool-call': tc.id }, el('td', { class: 'tc-id' }, tc.id), el('td', {}, tc.name), el('td', {}, tc.executor),
          el('td', { class: 'tc-status' }, tc.status), el('td', {}, argsView(tc.args)), el('td', {}, el('pre', {}, readable(tc.result))),
          el('td', {}, fmtTime(tc.inserted_at)), el('td', {}, fmtTime(tc.resolved_at))));
        if (((tc.status === 'pending' && tc.executor === 'human') || tc.status === 'unknown') && !cards.has(tc.id)) {
          const card = makeCard(tc, false);
          cards.set(tc.id, card);
          approvals.append(card.node);
        }
      }
      for (const [tcid, card] of cards) {
        const now = r.tool_calls.find((t) => t.id === tcid);
        if (now && now.status === 'pending' && !card.unknown) refreshCard(card, now);
        if (now && now.status !== (card.unknown ? 'unknown' : 'pending') && card.state === 'pending' && !card.busy) {
          if (now.status === 'expired') cardSetStatus(card, 'expired', 'Expired: nobody answered in time.');
          else { card.node.remove(); cards.delete(tcid); }
        }
      }
      approvalsHead.hidden = cards.size === 0;
    } catch (e) { /* the head says what is wrong */ }
  };
  const loadAudit = async () => {
    try {
      const r = await api('/api/audit?conversation=' + encodeURIComponent(id));
      clear(audit);
      for (const m of r.model_calls) {
        audit.append(el('tr', {}, el('td', {}, m.turn_ref), el('td', {}, m.task), el('td', {}, m.model),
          el('td', {}, m.latency_ms), el('td', {}, json(m.usage)), el('td', {}, fmtTime(m.inserted_at))));
      }
      if (!r.model_calls.length) audit.append(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'none recorded (audit is off in agentd\'s configuration, or no turn ran)')));
    } catch (e) { /* optional */ }
  };
  const addEvent = (ev, fresh) => {
    if (ev.seq <= last) return;
    last = ev.seq;
    const row = el('div', { class: `event ${ev.type}${fresh ? ' new' : ''}`, 'data-seq': ev.seq },
      el('span', { class: 'muted' }, '#' + ev.seq), el('span', { class: 'muted' }, new Date(ev.inserted_at).toLocaleTimeString()),
      el('span', {}, ev.type), el('div', { class: 'content' }, eventSummary(ev)));
    log.append(row);
    if (ev.type === 'assistant_msg') delta.textContent = '';
  };
  const connect = () => {
    if (closed) return;
    es = new EventSource(`/api/watch?conversation=${encodeURIComponent(id)}&after=${last}&runs=1`);
    es.addEventListener('ready', () => {
      live.textContent = 'live';
      live.className = 'live on';
      runs.load(true);
    });
    es.addEventListener('run', (m) => runs.put(JSON.parse(m.data)));
    es.addEventListener('event', (m) => {
      const ev = JSON.parse(m.data);
      addEvent(ev, true);
      if (['tool_call', 'suspension', 'resolution', 'tool_result', 'escalation', 'deadline_extended'].includes(ev.type)) loadCalls();
      if (ev.type === 'assistant_msg') loadAudit();
      loadHead();
    });
    es.addEventListener('delta', (m) => { delta.append(JSON.parse(m.data).text || ''); });
    es.addEventListener('end', () => {
      es.close();
      live.textContent = 'ended (the conversation was deleted, or agentd stopped)';
      live.className = 'live off';
    });
    es.onerror = () => { if (!closed) { live.textContent = 'reconnecting…'; live.className = 'live off'; } };
  };

  (async () => {
    await loadHead();
    try {
      const r = await api('/api/events?limit=500&conversation=' + encodeURIComponent(id));
      for (const ev of r.events) addEvent(ev, false);
      last = Math.max(last, r.last_seq);
    } catch (e) { /* the head says it */ }
    await loadCalls();
    await loadAudit();
    connect();
  })();
  const timer = setInterval(() => { for (const c of cards.values()) tick(c); runs.tick(); }, 1000);
  return { close: () => { closed = true; if (es) es.close(); clearInterval(timer); } };
}

// The nodes sharing the store (docs/scale-out.md): a table when there are several, else this node's id.
function nodesView(s, n) {
  const list = (n && n.nodes) || [];
  if (list.length <= 1) {
    const id = (s.node && s.node.id) || n.node;
    return el('p', { id: 'node' }, 'node ', el('strong', {}, id || 'unknown'),
      n.error ? el('span', { class: 'muted' }, ` (cannot list the nodes: ${n.error})`) : null);
  }
  const live = list.filter((x) => x.live).length;
  return el('div', {},
    el('h2', {}, `Nodes (${list.length}, ${live} live)`),
    el('p', { class: 'muted' }, `this page's agentd is node ${n.node}; leases last ${fmtDuration(n.lease_ms)}, renewed every ${fmtDuration(n.heartbeat_ms)}`),
    el('table', { id: 'nodes' },
      el('thead', {}, el('tr', {}, ['node', 'state', 'leases', 'last heartbeat', 'started'].map((h) => el('th', {}, h)))),
      el('tbody', {}, list.map((x) => el('tr', { 'data-node': x.node, class: x.live ? 'node-live' : 'node-expired' },
        el('td', {}, x.node, x.self ? el('span', { class: 'muted' }, ' (this one)') : null),
        el('td', { class: 'node-state' }, x.live ? 'live' : 'expired'),
        el('td', { class: 'node-leases' }, x.leases),
        el('td', {}, `${fmtDuration(Math.max(0, n.now - x.beat_at))} ago (${fmtTime(x.beat_at)})`),
        el('td', {}, fmtTime(x.started_at)))))));
}

function viewStatus(main) {
  const box = el('div', { id: 'status' });
  main.append(el('h1', {}, 'Status'), box);
  const load = async () => {
    try {
      const [s, n] = await Promise.all([api('/api/status'), api('/api/nodes').catch((e) => ({ error: e.message }))]);
      clear(box).append(
        el('p', {}, `agentd ${s.version}, up ${fmtLeft(s.uptime_ms)}`),
        nodesView(s, n),
        el('h2', {}, 'Store'),
        el('table', { class: 'args', id: 'store' }, Object.entries(s.store).map(([k, v]) => el('tr', { 'data-key': k }, el('th', {}, k),
          /_bytes$|^map_size$/.test(k) && typeof v === 'number' ? el('td', { title: `${v} bytes` }, fmtBytes(v)) : el('td', {}, String(v))))),
        el('h2', {}, `Workers (${s.workers.length})`),
        el('table', {}, el('thead', {}, el('tr', {}, ['conversation', 'pid', 'state', 'for'].map((h) => el('th', {}, h)))),
          el('tbody', {}, s.workers.map((w) => el('tr', {},
            el('td', {}, el('a', { href: '#/c/' + encodeURIComponent(w.conversation) }, w.conversation)),
            el('td', {}, w.pid), el('td', {}, w.state), el('td', {}, fmtLeft(w.since_ms)))))));
    } catch (e) { clear(box).append(`Cannot read agentd's status: ${e.message}`); }
  };
  load();
  const timer = setInterval(load, 2000);
  return { close: () => clearInterval(timer) };
}

// Search (docs/web.md): conversations whose id, metadata or last 20 events hold the text, `#/search?q=TEXT`.
function viewSearch(main, params) {
  const box = el('input', { type: 'search', id: 'search-q', value: params.get('q') || '', maxlength: 256, placeholder: 'an id, a metadata value, text' });
  const body = el('tbody', { id: 'search-results' });
  const note = el('p', { id: 'search-note', class: 'muted' });
  const more = el('button', { type: 'button', id: 'search-more', hidden: true }, 'More');
  let cursor = null, found = 0, scanned = 0;
  const q = params.get('q') || '';
  const form = el('form', { class: 'filters', onsubmit: (e) => {
    e.preventDefault();
    location.hash = '#/search?' + new URLSearchParams({ q: box.value });
  } }, box, el('button', { type: 'submit' }, 'Search'));
  const where = (m) => (m.match === 'id' ? 'its id' : m.match === 'metadata'
    ? Object.entries(m.pair).map(([k, v]) => `${k}=${v}`).join('') : `#${m.seq} ${m.type}: ${m.text}`);
  const load = async () => {
    more.disabled = true;
    try {
      const p = new URLSearchParams({ q });
      if (cursor) p.set('after', cursor);
      const r = await api('/api/search?' + p);
      for (const m of r.matches) {
        const c = m.conversation;
        body.append(el('tr', { 'data-conversation': c.id },
          el('td', {}, el('a', { href: '#/c/' + encodeURIComponent(c.id) }, c.id)), el('td', {}, c.status),
          el('td', {}, m.match), el('td', {}, el('pre', {}, where(m)))));
      }
      found += r.matches.length;
      scanned += r.scanned;
      cursor = r.next || null;
      more.hidden = !cursor;
      note.textContent = `${found} found among ${scanned} conversations looked at${cursor ? ': more remain' : ''}.`;
    } catch (e) { note.textContent = `Cannot search: ${e.message}`; } finally { more.disabled = false; }
  };
  more.addEventListener('click', load);
  main.append(el('h1', {}, 'Search'), form, note,
    el('table', {}, el('thead', {}, el('tr', {}, ['conversation', 'status', 'found by', 'where'].map((h) => el('th', {}, h)))), body), more);
  if (q) load();
  return {};
}

function route() {
  const main = clear(document.getElementById('view'));
  if (S.view && S.view.close) S.view.close();
  const hash = location.hash || '#/pending';
  const q = hash.indexOf('?');
  const path = q < 0 ? hash.slice(1) : hash.slice(1, q);
  const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', hash.startsWith(a.getAttribute('href')));
  if (path.startsWith('/c/')) S.view = viewConversation(main, decodeURIComponent(path.slice(3)));
  else if (path === '/conversations') S.view = viewConversations(main, params);
  else if (path === '/status') S.view = viewStatus(main);
  else if (path === '/search') S.view = viewSearch(main, params);
  else S.view = viewPending(main);
}

async function loadSession() {
  const s = await api('/api/session');
  S.csrf = s.csrf;
  S.name = s.name;
  S.by = s.by;
  S.pollMs = s.poll_ms;
  S.fromProxy = s.name_from_proxy;
  S.accounts = s.accounts;
  S.role = s.role;
  document.getElementById('who').textContent = s.accounts ? `${s.by} (${s.role})` : s.by;
}

async function start() {
  try { await loadSession(); } catch (e) { return; }
  document.getElementById('logout').addEventListener('click', async () => {
    try { await post('/logout', {}); } finally { location.href = '/login'; }
  });
  window.addEventListener('hashchange', route);
  route();
  pollPending();
  setInterval(() => { for (const c of S.pending.values()) { tick(c); } updateCount(); }, 1000);
}

start();
