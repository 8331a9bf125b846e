// browser.mjs: agentd-web in a real browser (the system Chromium, headless, driven by puppeteer-core).
// Run by tests/proc/test_web_browser.py, which starts agentd and agentd-web and passes:
//   WEB_BASE, WEB_LINK (a one-time login link), AGENTCTL, AGENTD_SOCKET, GATE (the streaming model's gate
//   file), RUN_GATE (the gate of the model `blocker`, which waits for it before answering), NODE_ID (agentd's
//   node id), SECOND_NODE and SECOND_NODE_PID (under AGENTD_TEST_STORE=pg: another node on the same store,
//   which this script kills), CHROMIUM (default /usr/bin/chromium), AGENTD_TEST_SLOW (multiplies every
//   timeout).
// Prints one line per step; exits 1 with the reason on the first failure.
import fs from 'node:fs';
import { env, base, T, assert, ctl, ctlJson, until, textOf, waitText, step, openBrowser } from './lib.mjs';

const uid = process.getuid();

function pendingCall(conv) {
  return until(() => ctlJson('tool-calls', conv, '--status', 'pending').tool_calls[0], 10, `a pending call in ${conv}`);
}

function resolutions(conv, tcid) {
  return ctlJson('events', conv).events.filter((e) => e.type === 'resolution' && e.content.tool_call_id === tcid);
}

const started = Date.now();
const { newPage, pageErrors, close } = await openBrowser();

let status = 0;
try {
  const page = await newPage();
  const NAME = 'Alice <b>ops</b>';
  const PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">';

  await step('a wrong token is refused', async () => {
    const r = await page.goto(base + '/');
    assert(r.status() === 401, `GET / without a session: ${r.status()}`);
    await page.type('input[name=token]', 'not-the-token-0123456789');
    const [nav] = await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    assert(nav.status() === 403, `wrong token: ${nav.status()}`);
    const msg = await textOf(page, '#message');
    assert(msg === 'Wrong token.', 'the message says so: ' + msg + ' / ' + (await page.content()).slice(0, 300));
    const api = await page.evaluate(async () => (await fetch('/api/pending')).status);
    assert(api === 401, `the API without a session: ${api}`);
  });

  await step('the one-time login link signs in, once', async () => {
    await page.goto(env.WEB_LINK);
    await until(() => page.url() === base + '/', 10, 'the page to move on to /');
    await waitText(page, '#who', 'agentd-web');
    const second = await newPage();
    const again = await second.goto(env.WEB_LINK);
    assert(again.status() === 403, `the link a second time: ${again.status()}`);
    await second.close();
    await page.bringToFront(); // clicks wait for animation frames, which a background tab does not get
    await page.waitForSelector('#name');
    await page.$eval('#name', (e) => { e.value = ''; });
    await page.type('#name', NAME);
    await page.click('#name + button');
    await waitText(page, '#who', NAME);
  });

  const c1 = ctl('create', '--id', 'c1', '--model', 'echo', '--tool', 'approve').trim();
  let tc;
  await step('a new approval appears live, its payload as text', async () => {
    await page.evaluate(() => { window.__marker = 'same page'; });
    ctl('send', c1, `/tool approve ${JSON.stringify({ amount: 120, note: PAYLOAD })}`);
    tc = (await pendingCall(c1)).id;
    const sel = `#pending-list [data-tool-call="${tc}"]`;
    await page.waitForSelector(sel, { timeout: T(10) });
    assert(await page.evaluate(() => window.__marker) === 'same page', 'no reload');
    const card = await page.$eval(sel, (e) => ({ text: e.textContent, tags: e.querySelectorAll('script, img, b').length }));
    assert(card.text.includes(PAYLOAD), 'the payload shown as text: ' + card.text);
    assert(card.text.includes('Pay it?') && card.text.includes('amount') && card.text.includes('120'), 'prompt and args: ' + card.text);
    assert(card.text.includes(c1) && /expires in (59m|1h)/.test(card.text), 'conversation and time left: ' + card.text);
    assert(card.tags === 0, 'no element made from the payload');
    assert(await page.evaluate(() => window.__pwned) === undefined, 'the payload never ran');
    assert((await textOf(page, '#pending-count')) === '1', 'the count');
  });

  await step('the card shows what led to the call: the user message, the model text, the log, the deadline', async () => {
    const sel = `#pending-list [data-tool-call="${tc}"]`;
    const evs = ctlJson('events', c1).events;
    const call = evs.find((e) => e.type === 'tool_call' && e.content.tool_call_id === tc);
    const before = (type) => evs.filter((e) => e.type === type && e.seq < call.seq).pop();
    await waitText(page, `${sel} .ctx-log`, `call at #${call.seq}`);
    const ctx = await page.$eval(sel, (e) => ({
      user: e.querySelector('.ctx-user').textContent, model: e.querySelector('.ctx-model').textContent,
      href: e.querySelector('.ctx-log').getAttribute('href'), deadline: e.querySelector('.deadline').textContent,
      tags: e.querySelectorAll('.context script, .context img').length }));
    assert(ctx.user === 'User: ' + before('user_msg').content.text, 'the user message: ' + ctx.user);
    const text = before('assistant_msg') && before('assistant_msg').content.text;
    assert(ctx.model === 'Model: ' + (text || '(no text before the call)'), 'the model text: ' + ctx.model);
    assert(ctx.user.includes('<script>window.__pwned=1</script>') && ctx.tags === 0, 'the payload in the context as text');
    assert(ctx.href === '#/c/' + c1, 'the link to the log: ' + ctx.href);
    const dl = ctlJson('tool-call', tc).tool_call.deadline;
    assert(ctx.deadline === ` · deadline ${await page.evaluate((d) => new Date(d).toLocaleString(), dl)}`, 'the deadline: ' + ctx.deadline);
  });

  await step('an escalated call shows its chain, its new prompt and deadline', async () => {
    const cEsc = ctl('create', '--id', 'c-esc', '--model', 'echo', '--tool', 'esc', '--tool', 'approve').trim();
    ctl('send', cEsc, 'please pay the invoice');
    ctl('send', cEsc, '/tool esc {"amount": 7}');
    const id = (await pendingCall(cEsc)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await waitText(page, `${sel} .ctx-user`, 'User: /tool esc');
    await waitText(page, `${sel} .ctx-chain`, 'Escalated: esc → approve', 20);
    await waitText(page, `${sel} .prompt`, 'Pay it?');
    assert(/expires in (59m|1h)/.test(await textOf(page, `${sel} .time`)), 'the new time left');
    assert(!(await page.$eval(`${sel} button.approve`, (b) => b.disabled)), 'it can be answered');
    ctl('resolve', id, '--by', 'cleanup');
    await page.waitForSelector(sel, { hidden: true, timeout: T(10) });
  });

  await step('approve (double click) resumes the conversation; the answer appears in the live tail', async () => {
    await page.click(`#pending-list [data-tool-call="${tc}"] a`);
    await waitText(page, '#live', 'live');
    const logText = await textOf(page, '#log');
    assert(logText.includes(PAYLOAD) && await page.$$eval('#log script, #log img', (x) => x.length) === 0, 'the log shows the payload as text');
    const btn = `#conv-approvals [data-tool-call="${tc}"] button.approve`;
    await page.waitForSelector(btn);
    await page.click(btn, { count: 2 });
    await waitText(page, `#conv-approvals [data-tool-call="${tc}"] .card-status`, `Approved by ${NAME}`);
    await page.waitForFunction((id) => [...document.querySelectorAll('#log .event.assistant_msg')]
      .some((e) => e.textContent.includes(`${id} resolved: {"approved":true}`)), { timeout: T(10), polling: 50 }, tc);
    const res = resolutions(c1, tc);
    assert(res.length === 1, `one resolution: ${JSON.stringify(res)}`);
    assert(JSON.stringify(res[0].content.by) === JSON.stringify({ uid, name: NAME }), 'who decided: ' + JSON.stringify(res[0].content));
    const row = await textOf(page, `tbody [data-tool-call="${tc}"] .tc-status`);
    await waitText(page, `tbody [data-tool-call="${tc}"] .tc-status`, 'resolved');
    assert(row !== null, 'the tool calls table lists it');
  });

  await step('deny with a comment', async () => {
    await page.goto(base + '/#/pending');
    ctl('send', c1, '/tool approve {"amount": 9000}');
    const id = (await pendingCall(c1)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await page.waitForSelector(sel);
    await page.type(`${sel} input.comment`, 'too much');
    await page.click(`${sel} button.deny`);
    await waitText(page, `${sel} .card-status`, 'Denied by');
    const res = resolutions(c1, id);
    assert(res.length === 1 && res[0].content.status === 'resolved', JSON.stringify(res));
    assert(JSON.stringify(res[0].content.result) === '{"approved":false,"comment":"too much"}', JSON.stringify(res[0].content));
  });

  await step('one answered elsewhere disappears', async () => {
    ctl('send', c1, '/tool approve {"amount": 1}');
    const id = (await pendingCall(c1)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await page.waitForSelector(sel);
    ctl('resolve', id, '--by', 'someone at a shell');
    await page.waitForSelector(sel, { hidden: true, timeout: T(10) });
  });

  await step('an expired one says so, after its warning', async () => {
    const c2 = ctl('create', '--id', 'c2', '--model', 'echo', '--tool', 'quick').trim();
    ctl('send', c2, '/tool quick');
    const id = (await pendingCall(c2)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await page.waitForSelector(`${sel}.warn`); // a few seconds left: the warning state
    assert(/expires in \ds/.test(await textOf(page, `${sel} .time`)), 'seconds left shown');
    await waitText(page, `${sel} .card-status`, 'Expired: nobody answered in time.', 15);
    await until(() => ctlJson('tool-call', id).tool_call.status === 'expired', 10, 'agentd expires it');
    assert(await page.$eval(`${sel} button.approve`, (b) => b.disabled), 'no approving an expired call');
  });

  await step('approving one answered meanwhile is stale, said politely', async () => {
    const other = await newPage();
    await other.goto(base + '/#/pending');
    ctl('send', c1, '/tool approve {"amount": 2}');
    const id = (await pendingCall(c1)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await page.waitForSelector(sel);
    await other.waitForSelector(sel);
    // the second tab stops hearing about changes, so it still offers the call
    await other.setRequestInterception(true);
    other.on('request', (r) => (r.url().includes('/api/pending') ? r.abort() : r.continue()));
    await page.bringToFront();
    await page.click(`${sel} button.approve`);
    await waitText(page, `${sel} .card-status`, 'Approved by');
    await other.bringToFront();
    await other.click(`${sel} button.approve`);
    await waitText(other, `${sel} .card-status`, 'Already answered elsewhere');
    assert(resolutions(c1, id).length === 1, 'one decision');
    await other.close();
    await page.bringToFront();
  });

  await step('approvers = 2: the card shows who has approved, and the second name settles it', async () => {
    const cp = ctl('create', '--id', 'c-pair', '--model', 'echo', '--tool', 'pair').trim();
    await page.goto(base + '/#/pending');
    ctl('send', cp, '/tool pair {"amount": 4}');
    const id = (await pendingCall(cp)).id;
    const sel = `#pending-list [data-tool-call="${id}"]`;
    await waitText(page, `${sel} .approvals`, 'Approvals: 0 of 2');
    ctl('approve', id, '--by', 'bob');
    await waitText(page, `${sel} .approvals`, 'Approvals: 1 of 2 (bob)');
    assert(resolutions(cp, id).length === 0, 'one approval of two settles nothing');
    await page.click(`${sel} button.approve`);
    await waitText(page, `${sel} .card-status`, `Approved by ${NAME}`);
    const res = resolutions(cp, id);
    assert(res.length === 1 && res[0].content.by.name === NAME, JSON.stringify(res));
  });

  await step('streamed deltas show while the model writes', async () => {
    const c3 = ctl('create', '--id', 'c3', '--model', 'streamer').trim();
    await page.goto(base + `/#/c/${c3}`);
    await waitText(page, '#live', 'live');
    ctl('send', c3, 'go');
    await waitText(page, '#delta', 'partial one, partial two');
    fs.writeFileSync(env.GATE, '');
    await page.waitForFunction(() => [...document.querySelectorAll('#log .event.assistant_msg')]
      .some((e) => e.textContent.includes('streamed answer')), { timeout: T(10), polling: 50 });
    assert((await textOf(page, '#delta')) === '', 'the preview is gone once the message is in');
  });

  await step('runs show live: a kill -9 mid-turn interrupts run 1, attempt 2 completes', async () => {
    const c5 = ctl('create', '--id', 'c5', '--model', 'blocker').trim();
    await page.goto(base + `/#/c/${c5}`);
    await waitText(page, '#live', 'live');
    await waitText(page, '#runs-note', 'No model turn has run yet.');
    await page.evaluate(() => { window.__marker = 'no reload'; });
    const row = (id) => `#runs-body tr[data-run="${id}"]`;
    const cells = (id) => page.$eval(row(id), (tr) => Object.fromEntries([...tr.children].map((td) => [td.className, td.textContent])));
    ctl('send', c5, 'go');
    await page.waitForSelector(`${row(1)}[data-status="running"]`, { timeout: T(10) });
    let r1 = await cells(1);
    assert(r1['run-attempt'] === '1' && r1['run-status'] === 'running' && r1['run-model'] === 'blocker'
      && r1['run-turn'] === '#1' && r1['run-ended'] === '' && r1['run-duration'].endsWith('so far'), 'run 1 running: ' + JSON.stringify(r1));
    assert((await textOf(page, '#runs-note')) === '', 'the "no run" note is gone');
    // the model is running (the run is recorded just before the call): kill -9 its worker from outside agentd
    const pid = await until(() => { const c = ctlJson('get', c5).conversation; return c.run && c.worker && c.worker.pid; }, 10, 'the worker');
    process.kill(pid, 'SIGKILL');
    await page.waitForSelector(`${row(1)}[data-status="interrupted"]`, { timeout: T(20) });
    await page.waitForSelector(`${row(2)}[data-status="running"]`, { timeout: T(20) });
    r1 = await cells(1);
    const r2 = await cells(2);
    assert(r1['run-attempt'] === '1' && r1['run-status'] === 'interrupted' && r1['run-ended'] !== '', 'run 1: ' + JSON.stringify(r1));
    assert(r2['run-attempt'] === '2' && r2['run-turn'] === '#1', 'run 2 runs the same turn again: ' + JSON.stringify(r2));
    fs.writeFileSync(env.RUN_GATE, '');
    await page.waitForSelector(`${row(2)}[data-status="completed"]`, { timeout: T(20) });
    const done = await cells(2);
    assert(done['run-status'] === 'completed' && done['run-ended'] !== '' && !done['run-duration'].endsWith('so far')
      && done['run-usage'] !== '', 'run 2 completed: ' + JSON.stringify(done));
    const order = await page.$$eval('#runs-body tr[data-run]', (trs) => trs.map((t) => t.dataset.run).join(','));
    assert(order === '2,1', 'newest first: ' + order);
    await page.waitForFunction(() => [...document.querySelectorAll('#log .event.assistant_msg')]
      .some((e) => e.textContent.includes('unblocked answer')), { timeout: T(10), polling: 50 });
    assert(await page.evaluate(() => window.__marker) === 'no reload', 'all of it without a reload');
    const runs = ctlJson('runs', c5).runs.map((x) => `${x.id}:${x.status}:${x.attempt}`).join(',');
    assert(runs === '2:completed:2,1:interrupted:1', 'as agentd says: ' + runs);
    // the audit table is still there
    assert(await page.$$eval('h2', (hs) => hs.some((h) => h.textContent === 'Model calls (audit)')), 'the audit table');
  });

  await step('runs are paged: "More" reads on from the cursor', async () => {
    await page.goto(base + '/#/c/many'); // 52 runs, made by the Python test
    await waitText(page, '#live', 'live');
    const ids = () => page.$$eval('#runs-body tr[data-run]', (trs) => trs.map((t) => Number(t.dataset.run)));
    await until(async () => (await ids()).length === 50, 10, 'the first page of runs');
    let got = await ids();
    assert(got[0] === 52 && got[49] === 3, 'newest first: ' + got.join(','));
    assert(await page.$eval('#runs-more', (b) => !b.hidden), 'More offered');
    await page.click('#runs-more');
    await until(async () => (await ids()).length === 52, 10, 'the second page');
    got = await ids();
    assert(got.every((id, i) => id === 52 - i), 'in order, each once: ' + got.join(','));
    await page.waitForSelector('#runs-more', { hidden: true });
  });

  await step('CSRF: a POST without the token, or from another origin, is refused', async () => {
    ctl('send', c1, '/tool approve {"amount": 3}');
    const id = (await pendingCall(c1)).id;
    const st = await page.evaluate(async (tcid) => (await fetch('/api/resolve', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ tool_call_id: tcid, decision: 'approve' }),
    })).status, id);
    assert(st === 403, `without the CSRF token: ${st}`);
    const foreign = await newPage();
    await foreign.goto('about:blank');
    await foreign.evaluate(async (url, tcid) => {
      try {
        await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include',
          body: JSON.stringify({ tool_call_id: tcid, decision: 'approve' }) });
      } catch (e) { /* refused either way */ }
    }, base + '/api/resolve', id);
    await foreign.close();
    await page.bringToFront();
    assert(ctlJson('tool-call', id).tool_call.status === 'pending', 'nothing decided');
    ctl('resolve', id);
  });

  await step('conversations with a status filter; the status panel', async () => {
    ctl('update', 'c2', '--end');
    await page.goto(base + '/#/conversations');
    await page.waitForSelector('tr[data-conversation="c3"]');
    await page.select('#status-filter', 'ended');
    await page.waitForFunction(() => location.hash === '#/conversations?status=ended'
      && document.querySelectorAll('tr[data-conversation]').length === 1
      && document.querySelector('tr[data-conversation="c2"]'), { timeout: T(10), polling: 50 });
    await page.goto(base + '/#/status');
    await waitText(page, '#status', 'Workers (');
    await waitText(page, '#status', 'map_size');
    const mapSize = ctlJson('status').store.map_size;
    const shown = await page.$eval('#store [data-key="map_size"] td', (e) => ({ text: e.textContent, title: e.title }));
    assert(/^\d+(\.\d)? (KiB|MiB|GiB|TiB)$/.test(shown.text) && shown.title === `${mapSize} bytes`, 'the map size readable: ' + JSON.stringify(shown));
    if (!env.SECOND_NODE) {
      // one node on its store: its id, no table
      await waitText(page, '#node', `node ${env.NODE_ID}`);
      assert(await page.$('#nodes') === null, 'no nodes table for one node');
      return;
    }
    const state = (n) => textOf(page, `#nodes tr[data-node="${n}"] .node-state`);
    await page.waitForSelector(`#nodes tr[data-node="${env.SECOND_NODE}"]`);
    assert(await state(env.NODE_ID) === 'live' && await state(env.SECOND_NODE) === 'live', 'both live');
    assert((await textOf(page, `#nodes tr[data-node="${env.NODE_ID}"]`)).includes('(this one)'), 'this node marked');
    assert(await page.$('#node') === null, 'the table instead of the line');
    await waitText(page, '#status', 'Nodes (2, 2 live)');
    process.kill(Number(env.SECOND_NODE_PID), 'SIGKILL');
    await page.waitForFunction((n) => {
      const e = document.querySelector(`#nodes tr[data-node="${n}"] .node-state`);
      return e && e.textContent === 'expired';
    }, { timeout: T(15), polling: 100 }, env.SECOND_NODE);
    await waitText(page, '#status', 'Nodes (2, 1 live)');
  });

  await step('acting on a conversation: send, then end after its confirm', async () => {
    const cAct = ctl('create', '--id', 'c-act', '--model', 'echo').trim();
    await page.goto(base + '/#/c/' + cAct);
    await waitText(page, '#live', 'live');
    await page.type('#send-text', 'hello from the page');
    await page.click('#act-send');
    await waitText(page, '#act-status', `Sent by ${NAME}`);
    await page.waitForFunction(() => [...document.querySelectorAll('#log .event.assistant_msg')]
      .some((e) => e.textContent.includes('hello from the page')), { timeout: T(10), polling: 50 });
    await page.click('#act-end');
    await waitText(page, '#act-confirm', 'Really end this conversation?');
    await page.click('#act-no');
    await page.waitForSelector('#act-confirm', { hidden: true });
    assert(ctlJson('get', cAct).conversation.status !== 'ended', 'not ended without the confirm');
    await page.click('#act-end');
    await page.click('#act-yes');
    await waitText(page, '#act-status', `Ended by ${NAME}.`);
    const conv = ctlJson('get', cAct).conversation;
    assert(conv.status === 'ended' && conv.metadata.ended_by === NAME && conv.metadata.sent_by === NAME,
      'ended, by whom: ' + JSON.stringify(conv));
    await waitText(page, '#conv-head', 'status ended');
  });

  await step('search finds a conversation by the text of its last events, and by its id', async () => {
    await page.goto(base + '/#/search');
    await page.type('#search-q', 'HELLO from the');
    await page.click('#search-q + button');
    const row = '#search-results [data-conversation="c-act"]';
    await page.waitForSelector(row);
    const text = await textOf(page, row);
    assert(text.includes('event') && text.includes('hello from the page'), 'found by its text: ' + text);
    assert(page.url().endsWith('#/search?q=HELLO+from+the'), 'the URL keeps the search: ' + page.url());
    await page.goto(base + '/#/search?q=c-ac');
    await waitText(page, '#search-note', '1 found among');
    assert((await textOf(page, row)).includes('id'), 'found by its id');
  });

  await step('signing out ends the session', async () => {
    await page.goto(base + '/#/pending');
    await page.waitForSelector('#logout');
    await Promise.all([page.waitForNavigation(), page.click('#logout')]);
    const r = await page.goto(base + '/');
    assert(r.status() === 401, `after signing out: ${r.status()}`);
  });

  assert(pageErrors.length === 0, 'errors in the page: ' + pageErrors.join('; '));
  console.log(`browser test: ${((Date.now() - started) / 1000).toFixed(1)}s`);
} catch (e) {
  status = 1;
} finally {
  await close();
}
process.exit(status);
