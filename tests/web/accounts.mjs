// accounts.mjs: agentd-web with a users file (--users) in a real browser. Run by tests/proc/test_web_browser.py
// against the agentd browser.mjs used, with its own agentd-web, which passes WEB_BASE, AGENTCTL, AGENTD_SOCKET,
// CHROMIUM and AGENTD_TEST_SLOW. The users file holds vic (viewer, password v-pass) and opal (operator,
// o-pass); agentd has the human tool `approve` and the model `waiter` (waits for good). Steps: a wrong
// password refused; the viewer signs in and reads, and its approve, send and end are refused with nothing
// done; the operator answers an approval, resumes, cancels (after its confirm), forks, sends and ends (after
// its confirm), each recorded with its name.
import { base, T, assert, ctl, ctlJson, until, textOf, waitText, step, openBrowser } from './lib.mjs';

const started = Date.now();
const { newPage, pageErrors, close } = await openBrowser();

async function signIn(page, name, password) {
  await page.goto(base + '/login');
  await page.type('input[name=name]', name);
  await page.type('input[name=password]', password);
  return (await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]))[0];
}

let status = 0;
try {
  const page = await newPage();
  const cv = ctl('create', '--id', 'acc-view', '--model', 'echo', '--tool', 'approve').trim();
  ctl('send', cv, '/tool approve {"amount": 3}');
  const tc = (await until(() => ctlJson('tool-calls', cv, '--status', 'pending').tool_calls[0], 10, 'a pending call')).id;

  await step('a users file: a wrong password is refused, the right one signs in', async () => {
    const r = await page.goto(base + '/');
    assert(r.status() === 401 && await page.$('input[name=token]') === null, `GET /: ${r.status()}, no token field`);
    const nav = await signIn(page, 'vic', 'wrong');
    assert(nav.status() === 403 && (await textOf(page, '#message')) === 'Wrong name or password.', `wrong: ${nav.status()}`);
    await signIn(page, 'vic', 'v-pass');
    await waitText(page, '#who', 'vic (viewer)');
    await waitText(page, '#account', 'Signed in as vic (viewer)');
  });

  await step('a viewer reads; its approve, send and end are refused, nothing done', async () => {
    const card = `#pending-list [data-tool-call="${tc}"]`;
    await page.waitForSelector(`${card} button.approve`);
    await page.click(`${card} button.approve`);
    await waitText(page, `${card} .card-status`, 'vic is a viewer: /api/resolve needs the approver role or operator');
    await page.goto(base + '/#/c/' + cv);
    await waitText(page, '#live', 'live');
    const n = ctlJson('events', cv).events.length;
    await page.type('#send-text', 'not from a viewer');
    await page.click('#act-send');
    await waitText(page, '#act-status', 'Not done: vic is a viewer: /api/send needs the operator role');
    await page.click('#act-end');
    await page.click('#act-yes');
    await waitText(page, '#act-status', 'Not done: vic is a viewer: /api/end needs the operator role');
    const conv = ctlJson('get', cv).conversation;
    assert(ctlJson('events', cv).events.length === n && conv.status !== 'ended' && !conv.metadata.sent_by,
      'nothing done: ' + JSON.stringify(conv));
    assert(ctlJson('tool-calls', cv, '--status', 'pending').tool_calls[0].id === tc, 'still pending');
    await Promise.all([page.waitForNavigation(), page.click('#logout')]);
  });

  await step('an operator answers, resumes, cancels after its confirm, forks, sends, ends after its confirm', async () => {
    await signIn(page, 'opal', 'o-pass');
    await waitText(page, '#who', 'opal (operator)');
    // the approval, answered in place on its conversation
    await page.goto(base + '/#/c/' + cv);
    const btn = `#conv-approvals [data-tool-call="${tc}"] button.approve`;
    await page.waitForSelector(btn);
    await page.click(btn);
    await waitText(page, `#conv-approvals [data-tool-call="${tc}"] .card-status`, 'Approved by opal');
    const res = ctlJson('events', cv).events.filter((e) => e.type === 'resolution')[0];
    assert(res.content.by.name === 'opal', 'who decided: ' + JSON.stringify(res.content));
    await until(() => ctlJson('get', cv).conversation.status === 'idle', 10, 'the conversation idle');
    // a turn owed by a stopped worker: resume, then cancel it
    const co = ctl('create', '--id', 'acc-op', '--model', 'waiter').trim();
    ctl('send', co, 'wait for it');
    await until(() => (ctlJson('get', co).conversation.run || {}).status === 'running', 10, 'the turn running');
    ctl('stop', co);
    await until(() => ctlJson('get', co).conversation.worker === null, 10, 'the worker stopped');
    await page.goto(base + '/#/c/' + co);
    await waitText(page, '#live', 'live');
    await page.click('#act-resume');
    await waitText(page, '#act-status', 'Resumed by opal.');
    await page.click('#act-cancel');
    await waitText(page, '#act-confirm', 'Really cancel the running turn?');
    await page.click('#act-no');
    await page.waitForSelector('#act-confirm', { hidden: true });
    assert(!ctlJson('events', co).events.some((e) => e.type === 'turn_cancelled'), 'not cancelled without the confirm');
    await page.click('#act-cancel');
    await page.click('#act-yes');
    await waitText(page, '#act-status', 'Cancelled by opal.');
    let m = ctlJson('get', co).conversation.metadata;
    assert(m.resumed_by === 'opal' && m.cancelled_by === 'opal', 'recorded: ' + JSON.stringify(m));
    // fork at seq 1
    await page.type('#fork-seq', '1');
    await page.click('#act-fork');
    await waitText(page, '#act-status', 'Forked by opal at #1 as');
    const fork = await textOf(page, '#forked');
    assert(ctlJson('get', fork).conversation.metadata.forked_by === 'opal', 'the fork: ' + fork);
    // send and end, on the echo conversation
    await page.goto(base + '/#/c/' + cv);
    await waitText(page, '#live', 'live');
    await page.type('#send-text', 'hello from opal');
    await page.click('#act-send');
    await waitText(page, '#act-status', 'Sent by opal');
    await page.waitForFunction(() => [...document.querySelectorAll('#log .event.assistant_msg')]
      .some((e) => e.textContent.includes('hello from opal')), { timeout: T(10), polling: 50 });
    await page.click('#act-end');
    await waitText(page, '#act-confirm', 'Really end this conversation?');
    await page.click('#act-yes');
    await waitText(page, '#act-status', 'Ended by opal.');
    m = ctlJson('get', cv).conversation;
    assert(m.status === 'ended' && m.metadata.sent_by === 'opal' && m.metadata.ended_by === 'opal', JSON.stringify(m));
  });

  assert(pageErrors.length === 0, 'errors in the page: ' + pageErrors.join('; '));
  console.log(`accounts test: ${((Date.now() - started) / 1000).toFixed(1)}s`);
} catch (e) {
  status = 1;
} finally {
  await close();
}
process.exit(status);
