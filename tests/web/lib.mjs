// lib.mjs: what the browser tests share (browser.mjs, conversations.mjs): the environment the Python test
// passes (WEB_BASE, WEB_LINK, AGENTCTL, AGENTD_SOCKET, CHROMIUM, AGENTD_TEST_SLOW), timeouts scaled by
// AGENTD_TEST_SLOW, agentctl, polling with deadlines, named steps, and a headless Chromium.
import puppeteer from 'puppeteer-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const env = process.env;
export const base = env.WEB_BASE;
const SCALE = Number(env.AGENTD_TEST_SLOW || 1);
export const T = (secs) => Math.round(secs * 1000 * SCALE);

export function assert(cond, what) {
  if (!cond) throw new Error('assertion failed: ' + what);
}

export const ctl = (...args) => execFileSync(env.AGENTCTL, ['-s', env.AGENTD_SOCKET, ...args], { encoding: 'utf8' });
export const ctlJson = (...args) => JSON.parse(ctl('--json', ...args));
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(fn, secs, what) {
  const deadline = Date.now() + T(secs);
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${T(secs)} ms waiting for ${what}`);
    await sleep(50);
  }
}

export const textOf = (page, sel) => page.$eval(sel, (e) => e.textContent).catch(() => null);
export const waitText = (page, sel, text, secs = 10) => page.waitForFunction(
  (s, t) => { const e = document.querySelector(s); return e && e.textContent.includes(t); },
  { timeout: T(secs), polling: 50 }, sel, text);

export async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    console.error(`FAIL ${name}: ${e.stack || e}`);
    throw e;
  }
  console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(2)}s)`);
}

// A headless Chromium in a throwaway profile. newPage() records the page's errors and any dialog (neither
// may happen) in pageErrors; close() ends the browser and removes the profile.
export async function openBrowser() {
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentd-web-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir: userDir,
    // root needs --no-sandbox; the rest keeps a test browser from reaching the network on its own
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-dev-shm-usage', '--disable-renderer-backgrounding',
      '--disable-background-timer-throttling', '--disable-backgrounding-occluded-windows'],
    protocolTimeout: T(60),
  });
  const pageErrors = [];
  async function newPage() {
    const p = await browser.newPage();
    p.on('pageerror', (e) => pageErrors.push(String(e)));
    p.on('dialog', (d) => { pageErrors.push('a dialog opened: ' + d.message()); d.dismiss(); });
    p.setDefaultTimeout(T(10));
    return p;
  }
  async function close() {
    await browser.close();
    fs.rmSync(userDir, { recursive: true, force: true });
  }
  return { browser, newPage, pageErrors, close };
}
