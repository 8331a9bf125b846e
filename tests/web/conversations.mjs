// conversations.mjs: agentd-web's conversation list and its filters in a real browser (headless Chromium,
// puppeteer-core). Run by tests/proc/test_web_browser.py (the environment as in lib.mjs; agentd knows the
// model "other"). It creates conversations with metadata through agentctl, then filters them in the page
// (metadata pairs, status, model, updated-time range), bookmarks and pages through them, and checks that
// metadata holding markup shows as text. Prints one line per step; exits 1 on the first failure.
import { env, base, T, assert, ctl, ctlJson, until, textOf, waitText, step, openBrowser } from './lib.mjs';

const XKEY = "<script>alert('key')</script>";
const XVAL = '<img src=x onerror="window.__pwned=2">';

// t00..t11: team red (even) or blue (odd), env prod (below 8) or dev; t10 and t11 run the model "other".
const convs = [];
for (let i = 0; i < 12; i++) {
  const id = `t${String(i).padStart(2, '0')}`;
  convs.push({ id, team: i % 2 ? 'blue' : 'red', env: i < 8 ? 'prod' : 'dev', model: i >= 10 ? 'other' : 'echo' });
  ctl('create', '--id', id, '--model', convs[i].model, '--meta', `team=${convs[i].team}`, '--meta', `env=${convs[i].env}`);
}
ctl('create', '--id', 'x1', '--model', 'echo', '--meta', `${XKEY}=${XVAL}`, '--meta', 'q=a=b&c+d ü?#');
ctl('create', '--id', 'z0', '--model', 'echo');
ctl('update', 't11', '--end');
const ids = (pred) => convs.filter(pred).map((c) => c.id);

const rows = (page) => page.$$eval('tr[data-conversation]', (r) => r.map((e) => e.dataset.conversation));
// The list once loaded: its count line says how many, or that none match.
async function listed(page) {
  await page.waitForFunction(() => document.querySelector('#list-count')?.textContent
    || !document.querySelector('#list-error')?.hidden, { timeout: T(10), polling: 50 });
  return rows(page);
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const noMarkup = async (page, sel) => page.$$eval(`${sel} script, ${sel} img`, (x) => x.length === 0);

const started = Date.now();
const { newPage, pageErrors, close } = await openBrowser();
let status = 0;
try {
  const page = await newPage();
  await page.goto(env.WEB_LINK);
  await until(() => page.url() === base + '/', 10, 'signed in');

  await step('the list shows every conversation with its metadata, markup as text', async () => {
    await page.goto(base + '/#/conversations');
    const all = await listed(page);
    assert(same(all, [...convs.map((c) => c.id), 'x1', 'z0']), 'all, in id order: ' + all);
    const cell = await textOf(page, 'tr[data-conversation="x1"] .meta-cell');
    assert(cell.includes(`${XKEY}=${XVAL}`) && cell.includes('q=a=b&c+d ü?#'), 'metadata shown: ' + cell);
    assert(await textOf(page, 'tr[data-conversation="t03"] .meta-cell') === 'team=blueenv=prod', 'a chip per pair');
    assert(await noMarkup(page, 'table'), 'no element made from metadata');
  });

  await step('metadata pairs typed in the form filter exactly; the URL keeps the filter', async () => {
    await page.type('#meta-filter .meta-row:nth-child(1) .meta-key', 'team');
    await page.type('#meta-filter .meta-row:nth-child(1) .meta-value', 'red');
    await page.click('#meta-add');
    await page.type('#meta-filter .meta-row:nth-child(2) .meta-key', 'env');
    await page.type('#meta-filter .meta-row:nth-child(2) .meta-value', 'prod');
    await page.click('#filter button[type=submit]');
    await until(async () => (await page.evaluate(() => location.hash)) === '#/conversations?meta.team=red&meta.env=prod', 10, 'the filter in the URL');
    const got = await listed(page);
    assert(same(got, ids((c) => c.team === 'red' && c.env === 'prod')), 'red and prod: ' + got);
    // the same URL opened afresh (a bookmark) shows the same, the form filled in
    const other = await newPage();
    await other.goto(base + '/#/conversations?meta.team=red&meta.env=prod');
    assert(same(await listed(other), got), 'the bookmark lists the same');
    const form = await other.$$eval('#meta-filter .meta-row', (r) => r.map((e) => [e.querySelector('.meta-key').value, e.querySelector('.meta-value').value]));
    assert(same(form, [['team', 'red'], ['env', 'prod'], ['', '']]), 'the form shows the filter: ' + JSON.stringify(form));
    await other.close();
    await page.bringToFront();
  });

  await step('paging through the cursor keeps the filter', async () => {
    await page.goto(base + '/#/conversations?meta.team=red&limit=2');
    const want = ids((c) => c.team === 'red');
    assert(want.length === 6, 'six red');
    assert(same(await listed(page), want.slice(0, 2)), 'the first page');
    await waitText(page, '#list-count', '2 shown, more match');
    for (const n of [4, 6]) {
      await page.click('#more');
      await page.waitForFunction((k) => document.querySelectorAll('tr[data-conversation]').length === k, { timeout: T(10), polling: 50 }, n);
    }
    assert(same(await rows(page), want), 'every red one, once, in order: ' + await rows(page));
    await page.waitForSelector('#more', { hidden: true });
    assert(await textOf(page, '#list-count') === '6 shown', await textOf(page, '#list-count'));
  });

  await step('status, model and the updated-time range, from a bookmark and from the form', async () => {
    await page.goto(base + '/#/conversations?status=ended&model=other');
    assert(same(await listed(page), ['t11']), 'ended, model other');
    assert(await page.$eval('#status-filter', (e) => e.value) === 'ended', 'the status shown');
    assert(await page.$eval('#model-filter', (e) => e.value) === 'other', 'the model shown');
    await page.select('#status-filter', 'idle');
    await until(async () => (await page.evaluate(() => location.hash)) === '#/conversations?status=idle&model=other', 10, 'the status changed');
    assert(same(await listed(page), ['t10']), 'idle, model other');
    // two conversations updated after all the others
    const t = Math.max(...ctlJson('list', '--limit', '1000').conversations.map((c) => c.updated_at));
    await until(() => Date.now() > t + 2, 5, 'the clock to pass');
    ctl('update', 't03', '--meta', 'seen=yes');
    ctl('update', 't05', '--meta', 'seen=yes');
    const iso = new Date(t).toISOString();
    const hash = '#/conversations?updated_after=' + encodeURIComponent(iso);
    await page.goto(base + '/' + hash);
    assert(same(await listed(page), ['t03', 't05']), 'updated after ' + iso);
    assert(await page.$eval('#after-filter', (e) => e.value) !== '', 'the time shown');
    // submitted unchanged, the form keeps the URL's exact time (the input shows whole seconds)
    await page.$eval('#list-count', (e) => { e.id = 'old-count'; });
    await page.click('#filter button[type=submit]');
    assert(same(await listed(page), ['t03', 't05']), 'the same after submitting');
    assert(await page.$('#old-count') === null, 'listed again');
    assert(await page.evaluate(() => decodeURIComponent(location.hash)) === decodeURIComponent(hash), 'the same URL');
    // a time at a whole minute: the browser gives the input's value back without ':00', and it is still the URL's
    const minute = new Date(Math.floor(t / 60000) * 60000 + 123).toISOString();
    const hash2 = '#/conversations?updated_after=' + encodeURIComponent(minute);
    await page.goto(base + '/' + hash2);
    await listed(page);
    await page.$eval('#list-count', (e) => { e.id = 'old-count'; });
    await page.click('#filter button[type=submit]');
    await listed(page);
    assert(await page.evaluate(() => decodeURIComponent(location.hash)) === decodeURIComponent(hash2),
      'a whole minute kept exactly: ' + await page.evaluate(() => location.hash));
  });

  await step('a metadata chip filters by its pair; markup in a key or value filters as text', async () => {
    await page.goto(base + '/#/conversations');
    await listed(page);
    await page.click('tr[data-conversation="x1"] a.meta');
    await until(async () => (await page.evaluate(() => location.hash)).includes('meta.'), 10, 'the chip\'s filter');
    await page.waitForFunction(() => document.querySelector('#list-count').textContent === '1 shown', { timeout: T(10), polling: 50 });
    assert(same(await rows(page), ['x1']), 'x1 only');
    const key = await page.$eval('#meta-filter .meta-key', (e) => e.value);
    assert(key === XKEY || key === 'q', 'the pair in the form: ' + key);
    assert(await noMarkup(page, 'main'), 'no element made from metadata');
    await page.goto(base + '/#/conversations?' + new URLSearchParams({ ['meta.' + XKEY]: XVAL, 'meta.q': 'a=b&c+d ü?#' }));
    assert(same(await listed(page), ['x1']), 'both pairs, exactly');
  });

  await step('a bad filter says why, politely', async () => {
    await page.goto(base + '/#/conversations?' + new URLSearchParams({ ['meta.' + XKEY]: 'v'.repeat(300) }));
    await waitText(page, '#list-error', `This filter was not accepted: 'metadata.${XKEY}' is longer than 256 bytes`);
    assert((await rows(page)).length === 0 && await noMarkup(page, 'main'), 'nothing listed, the message as text');
    await page.goto(base + '/#/conversations?updated_before=yesterday');
    await waitText(page, '#list-error', "This filter was not accepted: 'updated_before' is not a time (yesterday).");
    await page.goto(base + '/#/conversations');
    await listed(page);
    await page.type('#meta-filter .meta-row:nth-child(1) .meta-value', 'no key');
    await page.click('#filter button[type=submit]');
    await waitText(page, '#list-error', "This filter was not accepted: 'metadata' keys must be 1-64 bytes");
    await page.goto(base + '/#/conversations?meta.team=red&meta.team=blue');
    await waitText(page, '#list-error', 'a metadata key is given twice');
    assert(await page.$eval('#banner', (b) => b.hidden), 'no alarm banner for a filter');
  });

  await step('the conversation view shows its metadata', async () => {
    await page.goto(base + '/#/c/x1');
    await waitText(page, '#conv-meta', `${XKEY}=${XVAL}`);
    assert((await textOf(page, '#conv-meta')).includes('q=a=b&c+d ü?#') && await noMarkup(page, '#conv-meta'), 'as text');
    await page.goto(base + '/#/c/t04');
    await waitText(page, '#conv-meta', 'team=red');
    await page.click('#conv-meta a.meta');
    await until(async () => (await page.evaluate(() => location.hash)) === '#/conversations?meta.team=red', 10, 'the list by that pair');
    assert(same(await listed(page), ids((c) => c.team === 'red')), 'the red ones');
    await page.goto(base + '/#/c/z0');
    await waitText(page, '#conv-meta', 'metadata none');
  });

  assert(await page.evaluate(() => window.__pwned) === undefined, 'no payload ran');
  assert(pageErrors.length === 0, 'errors in the page: ' + pageErrors.join('; '));
  console.log(`conversation list browser test: ${((Date.now() - started) / 1000).toFixed(1)}s`);
} catch (e) {
  status = 1;
} finally {
  await close();
}
process.exit(status);
