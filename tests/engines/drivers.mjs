// The browsers besides Chromium, as Debian installs them (scripts/setup.sh; never a downloaded
// build): Firefox ESR over WebDriver BiDi (puppeteer-core), and WebKitGTK's MiniBrowser through
// WebKitWebDriver (selenium-webdriver) under Xvfb, MiniBrowser's only way to run headless.
// Each driver opens one URL and runs a script there: { version, run(url, script, arg), close() }.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import puppeteer from 'puppeteer-core';
import { Builder } from 'selenium-webdriver';

export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';
export const MINIBROWSER = process.env.MINIBROWSER ?? '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';
/** One page's checks take ~10 s; this only turns a hang into a failure (GGWEB_ENGINE_TIMEOUT_MS). */
export const SCRIPT_TIMEOUT_MS = Number(process.env.GGWEB_ENGINE_TIMEOUT_MS) || 120_000;

/** A failed or hung script, with where it was (`self.__checksAt`, set by the checks). */
async function failure(e, where) {
  let at = null;
  try { at = await where(); } catch { /* the page is gone */ }
  return new Error(`${e.message}${at ? ` (the page's checks were at "${at}")` : ''}`);
}

/**
 * Firefox, headless, with its default preferences (what users get). `prefs` adds some.
 * run(): page errors are collected on top of the script's own error listeners.
 */
export async function launchFirefox({ prefs } = {}) {
  const browser = await puppeteer.launch({
    browser: 'firefox', executablePath: FIREFOX, headless: true, extraPrefsFirefox: prefs,
    protocolTimeout: SCRIPT_TIMEOUT_MS,
  });
  return {
    version: await browser.version(),
    /** The puppeteer Browser, for a spec that drives several pages at once (firefox-shared.spec.mjs). */
    browser,
    async run(url, script, arg) {
      const page = await browser.newPage();
      const problems = [];
      page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
      page.on('console', (m) => { if (m.type() === 'error') problems.push(`console.error: ${m.text()}`); });
      try {
        await page.goto(url);
        let value;
        try {
          value = await page.evaluate(`(${script})(${JSON.stringify(arg)})`);
        } catch (e) {
          throw await failure(e, () => page.evaluate('self.__checksAt'));
        }
        return { value, problems };
      } finally {
        await page.close();
      }
    },
    close: () => browser.close(),
  };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Starts `cmd`; resolves with the child once `ready(child)` resolves, rejects if it exits first. */
function start(cmd, args, opts, ready) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  let log = '';
  child.stderr.on('data', (d) => { log = (log + d).slice(-4000); });
  return new Promise((resolve, reject) => {
    child.once('error', (e) => reject(new Error(`${cmd}: ${e.message}`)));
    child.once('exit', (c) => reject(new Error(`${cmd} exited (${c}) before it was ready: ${log}`)));
    ready(child).then(() => resolve(child), reject);
  });
}

/**
 * WebKitGTK: a private Xvfb display (Xvfb picks a free one and writes its number to
 * -displayfd), WebKitWebDriver on a free port, a MiniBrowser session in automation mode.
 */
export async function launchWebKit() {
  let display = '';
  const xvfb = await start('Xvfb', ['-displayfd', '1', '-screen', '0', '1280x800x24', '-nolisten', 'tcp'], {}, (c) =>
    new Promise((resolve) => c.stdout.on('data', (d) => {
      display += d;
      if (display.includes('\n')) resolve();
    })));
  const port = await freePort();
  let driverProc;
  let driver;
  try {
    driverProc = await start('WebKitWebDriver', [`--port=${port}`], { env: { ...process.env, DISPLAY: `:${display.trim()}` } }, async () => {
      for (let i = 0; i < 100; i++) {
        try {
          if ((await fetch(`http://127.0.0.1:${port}/status`)).ok) return;
        } catch { /* not up yet */ }
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error('WebKitWebDriver did not answer /status within 10 s');
    });
    driver = await new Builder().usingServer(`http://127.0.0.1:${port}`).withCapabilities({
      browserName: 'MiniBrowser',
      'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] },
    }).build();
    await driver.manage().setTimeouts({ script: SCRIPT_TIMEOUT_MS });
  } catch (e) {
    driverProc?.kill();
    xvfb.kill();
    throw e;
  }
  const caps = await driver.getCapabilities();
  return {
    version: `${caps.getBrowserName()} ${caps.getBrowserVersion()}`,
    async run(url, script, arg) {
      await driver.get(url);
      let value;
      try {
        value = await driver.executeAsyncScript(`const done = arguments[arguments.length - 1];
(${script})(arguments[0]).then(done, (e) => done({ fatal: String(e && e.stack || e) }));`, arg);
      } catch (e) {
        throw await failure(e, () => driver.executeScript('return self.__checksAt'));
      }
      return { value, problems: [] };
    },
    async close() {
      try {
        await driver.quit();
      } finally {
        driverProc.kill();
        xvfb.kill();
      }
    },
  };
}
