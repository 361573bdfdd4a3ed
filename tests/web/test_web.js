/*
 * ledger-web in a real browser: headless Chromium (Debian's) driven by
 * playwright-core, against the real ledger-web on stores the real engine,
 * demos and tools make.
 *
 *   node test_web.js CASE --web BIN --modules DIR --shots DIR [--tools ...]
 *                    [--store pg]
 *
 * With --store pg, the story's store is a schema on the PostgreSQL server
 * tests/pg_run.sh started (PL_TEST_PG_URI), and it saves no screenshots;
 * else every store is an LMDB file in a temporary directory.
 *
 * CASE is one of:
 *   story      the order and agent demos' store: every run listed with its
 *              status; the crashed order continued from its page and seen
 *              completing live in another tab; the agent's approval answered
 *              in the inbox; verify, check, export; screenshots of every
 *              page, light and dark
 *   paging     10,000 runs: counts, pages forth and back, filters by status,
 *              id prefix, search text and time, read-only mode
 *   hostile    runs whose ids, names, payloads, errors, prompts and model
 *              answers hold <script>, onerror=, javascript: URLs and 1 MB
 *              strings: every page opened and unfolded, and no script ran
 *   refusals   a non-loopback address without a token refused; a POST
 *              without the CSRF token refused; a token's login
 *   steps      a run of 4,501 steps opens with its first page and loads
 *              more by its button and by scrolling; a 2 MiB payload
 *              shown cut, then whole on demand; a signal sent; a batch
 *              cancel's summary stays until dismissed
 *   delete     a run deleted from its page after a confirmation naming it,
 *              and the failed runs older than a time by the batch delete,
 *              which names them first; another tab's list drops them live;
 *              a deleted run's id opens its tombstone; read-only mode shows
 *              no delete; a delete without the CSRF token is refused
 *
 * Exit 0 passed, 1 failed, 77 skipped (playwright-core not installed: npm
 * was not reachable when tests/npm_setup.sh ran; with PL_NPM_REQUIRED=1, where nothing
 * may skip, 1).
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const http = require('http');
const { spawn, execFileSync } = require('child_process');

const SKIP = 77;
const argv = process.argv.slice(2);
const CASE = argv[0];
const opt = {};
for (let i = 1; i < argv.length; i += 2) opt[argv[i].replace(/^--/, '')] = argv[i + 1];

/* A shared, busy machine can be many times slower than an idle one: every
 * wait is on a condition (never a sleep), bounded by WAIT_MS, and the whole
 * case by GUARD_MS (under ctest's TIMEOUT).  PL_WEB_SLOWDOWN=N throttles
 * the browser's CPU N times (as a loaded machine would) to show it. */
const WAIT_MS = 60000;
const GUARD_MS = 280000;
const SLOWDOWN = Number(process.env.PL_WEB_SLOWDOWN || 1);
const PG = opt.store === 'pg';
if (PG && !process.env.PL_TEST_PG_URI) {
  console.error('--store pg: PL_TEST_PG_URI is not set (run under tests/pg_run.sh)');
  process.exit(2);
}

let failures = 0;
let lastPage = null; /* on a failure, its screenshot is saved */
const children = [];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pl-web-'));

function log(...a) { console.log(...a); }
function fail(msg) { throw new Error(String(msg).slice(0, 4000)); }
function ok(cond, msg) {
  if (!cond) fail(msg);
  log('ok: ' + msg);
}

function cleanup() {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
}

/* Stops ledger-web as an operator would (SIGTERM) and shows what it said
 * on stderr, where a sanitizer reports (which fails the test); it must
 * exit 0. */
async function stopWeb(web) {
  const c = web.child;
  const code = await new Promise((resolve) => {
    if (c.exitCode !== null || c.signalCode !== null) return resolve(c.exitCode);
    const t = setTimeout(() => { c.kill('SIGKILL'); }, WAIT_MS);
    c.on('exit', (st, sig) => { clearTimeout(t); resolve(sig ? sig : st); });
    c.kill('SIGTERM');
  });
  for (const l of web.errors().split('\n').filter(Boolean).slice(0, 200)) log('ledger-web: ' + l.slice(0, 300));
  ok(code === 0, `ledger-web stops on SIGTERM with status 0 (${code})`);
}

function run(bin, args, env, okCodes) {
  try {
    return execFileSync(bin, args, { env: Object.assign({}, process.env, env || {}), encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 28 });
  } catch (e) {
    if ((okCodes || []).includes(e.status)) return e.stdout;
    fail(`${path.basename(bin)} ${args.join(' ')} exited ${e.status}: ${String(e.stderr || e.stdout || e.message).slice(0, 2000)}`);
  }
  return '';
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

/* ledger-web on STORE; resolves once it says it serves, with its URL. */
async function startWeb(store, args, env) {
  const port = await freePort();
  const child = spawn(opt.web, [store, '--listen', `127.0.0.1:${port}`, ...(args || [])], {
    env: Object.assign({}, process.env, env || {}), stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '', err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  const base = `http://127.0.0.1:${port}`;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`ledger-web did not say it serves within ${WAIT_MS / 1000} s: ` + out + err)), WAIT_MS);
    const check = () => {
      if (/serving/.test(out)) { clearTimeout(timer); resolve(); } else if (child.exitCode !== null) {
        clearTimeout(timer);
        reject(new Error(`ledger-web exited ${child.exitCode}: ${err}`));
      } else setTimeout(check, 20);
    };
    check();
  });
  log(`ledger-web serves ${store} on ${base}`);
  return { child, base, output: () => out + err, errors: () => err };
}

/* One HTTP request to ledger-web: {status, headers, body, json}. */
function request(base, method, p, headers, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(p, base);
    const req = http.request(u, { method, headers: Object.assign({}, headers || {}) }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(data); } catch (e) { json = null; }
        resolve({ status: res.statusCode, headers: res.headers, body: data, json });
      });
    });
    req.on('error', reject);
    req.setTimeout(WAIT_MS, () => req.destroy(new Error(`${method} ${p}: no answer in ${WAIT_MS / 1000} s`)));
    if (body !== undefined) req.write(typeof body === 'string' ? body : JSON.stringify(body));
    req.end();
  });
}

/* ---- the browser ---- */

function loadPlaywright() {
  const mod = path.resolve(opt.modules, 'node_modules', 'playwright-core');
  if (!fs.existsSync(mod)) {
    const ci = process.env.PL_NPM_REQUIRED === '1';
    log(`${ci ? 'FAIL (PL_NPM_REQUIRED=1: nothing may skip)' : 'SKIP'}: playwright-core is not installed in ${opt.modules} (tests/npm_setup.sh could not reach npm)`);
    process.exit(ci ? 1 : SKIP);
  }
  return require(mod);
}

function chromiumPath() {
  for (const p of [process.env.PL_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && fs.existsSync(p)) return p;
  }
  fail('no chromium: scripts/deps.sh --test installs Debian\'s chromium');
  return null;
}

async function browser() {
  const { chromium } = loadPlaywright();
  return chromium.launch({ executablePath: chromiumPath(), args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
}

/* A page that fails the test on a script error, a dialog, a CSP report or
 * a console error. */
async function newPage(b, opts) {
  const ctx = await b.newContext(Object.assign({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' }, opts || {}));
  const page = await ctx.newPage();
  lastPage = page;
  page.setDefaultTimeout(WAIT_MS);
  page.setDefaultNavigationTimeout(WAIT_MS);
  if (SLOWDOWN > 1) {
    const cdp = await ctx.newCDPSession(page);
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: SLOWDOWN });
  }
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push('script error: ' + e.message));
  page.on('dialog', (d) => { page.problems.push('a dialog opened: ' + d.message()); d.dismiss().catch(() => {}); });
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      page.problems.push('console error: ' + m.text());
    }
  });
  return page;
}

function clean(page, where) {
  ok(page.problems.length === 0, `no script error, dialog or console error ${where}` +
    (page.problems.length ? ': ' + page.problems.join('; ') : ''));
}

async function shot(page, name) {
  if (!opt.shots || PG) return;
  fs.mkdirSync(opt.shots, { recursive: true });
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    /* the new colours painted: two animation frames */
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await page.screenshot({ path: path.join(opt.shots, `web-${name}-${scheme}.png`) });
  }
  await page.emulateMedia({ colorScheme: 'light' });
}

const rowStatus = (page, id) => page.locator(`#runs-body tr[data-id="${id}"]`).getAttribute('data-status');

async function waitRowStatus(page, id, want) {
  await page.waitForFunction(([i, w]) => {
    const tr = [...document.querySelectorAll('#runs-body tr')].find((t) => t.dataset.id === i);
    return tr && tr.dataset.status === w;
  }, [id, want]);
}

/* ---- the cases ---- */

/* The order and agent demos' runs, and the dump fixture's. */
function storyStore() {
  const store = PG ? process.env.PL_TEST_PG_URI + '&schema=story' : path.join(tmp, 'story.db');
  const effects = path.join(tmp, 'effects');
  for (const o of ['A-1', 'A-2']) run(opt['order-demo'], ['--store', store, '--order', o, '--effects', effects, '--quiet']);
  run(opt['order-demo'], ['--store', store, '--order', 'A-3', '--effects', effects, '--crash-after', '7', '--quiet'], null, [null, 137]);
  fs.copyFileSync(path.join(opt['agent-dir'], 'script.json'), path.join(tmp, 'script.json'));
  const env = { AGENT_MODEL: 'scripted://' + path.join(tmp, 'script.json'), AGENT_DATA: path.join(opt['agent-dir'], 'data') };
  run(opt['agent-demo'], ['--store', store, '--run', 'research-1', '--model', env.AGENT_MODEL, '--data', env.AGENT_DATA,
    '--crash-after-steps', '24'], env, [null, 137]);
  run(opt.replay, [store, '--plugin', opt['agent-plugin'], '--run', 'research-1'], env, [4]);
  run(opt['dump-fixture'], [store, 'build']);
  return { store, env };
}

function dumpRuns(store) {
  return JSON.parse(run(opt.dump, [store, '--format', 'json'])).runs;
}

async function story() {
  const { store, env } = storyStore();
  const want = dumpRuns(store);
  const web = await startWeb(store, ['--plugin', opt['order-plugin'], '--plugin', opt['agent-plugin']], env);
  const b = await browser();
  const page = await newPage(b);
  await page.goto(web.base + '/');
  await page.waitForSelector('#runs-body tr[data-id]');
  for (const r of want) {
    const st = r.crashed ? 'crashed' : r.status;
    ok(await rowStatus(page, r.id) === st, `the list shows ${r.id} ${st}`);
  }
  ok(await page.locator('#runs-body tr[data-id]').count() === want.length, `the list shows the ${want.length} runs`);
  ok(await page.locator('#runs-body tr.is-crashed').count() === want.filter((r) => r.crashed).length, 'crashed runs stand out');
  ok(await page.locator('#counts .chip[data-status="crashed"]').count() === 1, 'the counts show the crashed runs');
  await shot(page, 'runs');

  /* the root policy filter, typed in: the order runs alone */
  const orders = want.filter((r) => r.policy === 'order').map((r) => r.id).sort();
  await page.fill('#filters input[name=policy]', 'order');
  await page.press('#filters input[name=policy]', 'Enter');
  await page.waitForFunction((n) => location.hash.includes('policy=order') &&
    document.querySelectorAll('#runs-body tr[data-id]').length === n, orders.length);
  const shown = (await page.$$eval('#runs-body tr[data-id]', (t) => t.map((x) => x.dataset.id))).sort();
  ok(orders.length > 0 && orders.length < want.length && JSON.stringify(shown) === JSON.stringify(orders),
    'the policy filter shows the order runs alone: ' + shown.join(', '));
  await page.goto(web.base + '/#/runs');
  await page.waitForFunction((n) => document.querySelectorAll('#runs-body tr[data-id]').length === n, want.length);

  /* another tab on the list sees the order complete, with no reload */
  const watcher = await newPage(b);
  await watcher.goto(web.base + '/#/runs');
  await watcher.waitForSelector('#runs-body tr[data-id="order-A-3"][data-status="crashed"]');

  await page.click('#runs-body tr[data-id="order-A-3"] a');
  await page.waitForSelector('#act-continue:not([disabled])');
  ok(await page.locator('.run-head .badge').first().textContent() === 'crashed', 'the crashed run\'s page says crashed');
  ok(await page.locator('.step.m-in_doubt, .alert.crashed').count() > 0, 'the crashed run is marked');
  await page.click('#act-continue');
  await page.waitForSelector('#outcome.good');
  const summary = await page.locator('#outcome').textContent();
  ok(/completed/.test(summary), 'continue shows the server\'s summary: ' + summary.trim().split('\n')[0]);
  await page.waitForFunction(() => document.querySelector('.run-head .badge')?.textContent === 'completed');
  ok(true, 'the run\'s page shows it completed');
  await waitRowStatus(watcher, 'order-A-3', 'completed');
  ok(true, 'the other tab\'s list shows it completed, live');
  clean(watcher, 'in the watching tab');

  /* the agent's approval, in the inbox */
  await page.goto(web.base + '/#/inbox');
  const card = page.locator('.inbox-card[data-id="research-1"]');
  await card.waitFor();
  ok(/Approve this answer/.test(await card.locator('.prompt').textContent()), 'the inbox shows the agent\'s prompt');
  await shot(page, 'inbox');
  const editor = card.locator('textarea');
  await editor.fill('{"approved": tru');
  ok(await card.locator('button[type=submit]').isDisabled(), 'an answer that is not JSON cannot be sent');
  ok(/not JSON/.test(await card.locator('.json-msg').textContent()), 'and the editor says why');
  await editor.fill('{"approved": true}');
  await card.locator('button[type=submit]').click();
  const done = page.locator('#answered .inbox-card[data-id="research-1"] .outcome');
  await done.waitFor();
  ok(/research-1: completed/.test(await done.textContent()), 'the answer\'s summary says completed: ' + (await done.textContent()).split('\n')[0]);
  await page.waitForSelector('#inbox .inbox-card[data-id="research-1"]', { state: 'detached' });
  ok(await page.locator('#inbox .inbox-card').count() === want.filter((r) => r.status === 'suspended').length - 1, 'the run leaves the inbox, the others stay');

  await page.goto(web.base + '/#/run/research-1');
  await page.waitForFunction(() => document.querySelector('.run-head .badge')?.textContent === 'completed');
  ok(true, 'the agent\'s run is completed');
  ok(await page.locator('#timeline .k-model').count() === 4, 'the timeline shows the four model calls');
  ok(/1681 in, 120 out/.test(await page.locator('.facts').textContent()), 'the run shows its token totals');
  const firstPv = page.locator('#tree .pv').first();
  await firstPv.click();
  ok(/"policy": "researcher"/.test(await page.locator('#tree pre.json').first().textContent()), 'a payload unfolds, pretty-printed');
  await page.click('#act-verify');
  await page.waitForSelector('#verify-result');
  ok(/Verified/.test(await page.locator('#verify-result').textContent()), 'verify finds no fault');
  await page.click('#act-check');
  await page.waitForSelector('#outcome.good, #outcome.bad');
  ok(await page.locator('#outcome.good').count() === 1, 'check replays the run cleanly: ' + (await page.locator('#outcome').textContent()).trim().slice(0, 120));
  const href = await page.locator('#export').getAttribute('href');
  const exp = await request(web.base, 'GET', href);
  ok(exp.status === 200 && exp.body.trim().split('\n').every((l) => JSON.parse(l)), 'the export link gives JSONL');
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot(page, 'run');

  /* fork from the step that asked the human: the new run asks again */
  await page.click('#tree .step[data-step="0:2"] .fork');
  await page.waitForSelector('#outcome a[href^="#/run/"]');
  const forked = await page.locator('#outcome').textContent();
  ok(/forked research-1 at 0:2 into/.test(forked) && /: suspended/.test(forked), 'fork from a chosen step makes a new run, which waits again: ' + forked.split('\n')[1]);
  await page.click('#outcome a[href^="#/run/"]');
  await page.waitForFunction(() => document.querySelector('.run-head .badge')?.textContent === 'suspended');
  ok(true, 'the forked run\'s page shows it suspended');
  const forkId = decodeURIComponent(page.url().split('#/run/')[1]);

  /* cancel it from its page, after a confirmation */
  await page.click('#act-cancel');
  await page.click('#actions .confirm button.danger');
  await page.waitForFunction(() => document.querySelector('.run-head .badge')?.textContent === 'cancelled');
  const fr = (await request(web.base, 'GET', '/api/runs/' + encodeURIComponent(forkId))).json;
  ok(fr && fr.run.status === 'cancelled', `cancel on the run's page cancels ${forkId}, recorded in the store`);

  /* the batch: every crashed run the filter holds; the fixture's cannot run here (its plugin is not loaded) */
  await page.goto(web.base + '/#/runs?status=crashed');
  await page.waitForSelector('#runs-body tr[data-id="r-crashed"]');
  await page.click('#batch-continue');
  await page.click('#batch .confirm button.danger');
  await page.waitForSelector('#batch-outcome:not([hidden])');
  const batch = await page.locator('#batch-outcome').textContent();
  ok(/0 crashed run\(s\) continued, 1 refused/.test(batch) && /r-crashed: not run/.test(batch), 'the batch continue says what it did, and what was refused: ' + batch.trim().split('\n').pop());
  /* cancel every run the filter holds: the suspended ones */
  const suspended = dumpRuns(store).filter((r) => r.status === 'suspended').map((r) => r.id);
  ok(suspended.length > 0, `${suspended.length} run(s) suspended before the batch cancel`);
  await page.goto(web.base + '/#/runs?status=suspended');
  await page.waitForSelector(`#runs-body tr[data-id="${suspended[0]}"]`);
  await page.click('#batch-cancel');
  await page.click('#batch .confirm button.danger');
  await page.goto(web.base + '/#/runs?status=cancelled');
  for (const id of suspended) await page.waitForSelector(`#runs-body tr[data-id="${id}"][data-status="cancelled"]`);
  const after = dumpRuns(store);
  ok(suspended.every((id) => after.find((r) => r.id === id).status === 'cancelled'),
    'the batch cancel cancels every suspended run the filter held, listed cancelled: ' + suspended.join(', '));
  ok(after.filter((r) => r.status === 'cancelled').length === suspended.length + 1, 'and no other run');

  /* live: a run started elsewhere appears in the list, and its page's
   * steps and timeline grow as it runs, with no reload */
  await page.goto(web.base + '/#/runs');
  await page.waitForSelector('#runs-body tr[data-id]');
  await page.evaluate(() => { window.__notReloaded = true; });
  const gate = path.join(tmp, 'live-gate');
  const writer = spawn(opt['dump-fixture'], [store, 'slow', 'live-1', '4', '50', gate], { stdio: 'ignore' });
  children.push(writer);
  await page.waitForSelector('#runs-body tr[data-id="live-1"]');
  await page.click('#runs-body tr[data-id="live-1"] a');
  await page.waitForSelector('#tree .step:not(.head)');
  const grown = () => page.evaluate(() => [document.querySelectorAll('#tree .step:not(.head)').length,
    document.querySelectorAll('#timeline .gantt-row').length]);
  const [steps0, rows0] = await grown();
  fs.writeFileSync(gate, '');
  await page.waitForFunction(() => document.querySelector('.run-head .badge')?.textContent === 'completed');
  const [steps1, rows1] = await grown();
  ok(steps1 > steps0 && rows1 > rows0 && await page.evaluate(() => window.__notReloaded === true),
    `a new run appears in the list, and its steps (${steps0} to ${steps1}) and timeline (${rows0} to ${rows1} rows) grow live`);

  await page.goto(web.base + '/#/overview');
  await page.waitForSelector('#overview .chart-panel');
  ok(await page.locator('#overview .chart-panel').count() === 4, 'the overview shows its four panels');
  const waitingNow = await page.locator('#overview').textContent();
  ok(!waitingNow.includes('research-1') && suspended.every((id) => !waitingNow.includes(id)),
    'the overview lists no answered or cancelled run as waiting');
  await shot(page, 'overview');
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const light = await bg();
  await page.click('#theme');
  ok(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark' && await bg() !== light, 'the theme button turns the page dark');
  await page.click('#theme');
  ok(await bg() === light, 'and light again');

  /* a crashed run the new code cannot replay: checked against it, then
   * upgraded where it diverges, from its page (the page is the same on
   * both stores, and web_api upgrades on both) */
  if (!PG) {
    run(opt['order-demo'], ['--store', store, '--order', 'A-9', '--effects', path.join(tmp, 'effects'), '--crash-after', '13', '--quiet'], null, [null, 137]);
    const v2 = await startWeb(store, ['--plugin', opt['order-plugin-v2']]);
    const p2 = await newPage(b);
    await p2.goto(v2.base + '/#/run/order-A-9');
    await p2.click('#act-check');
    await p2.click('#act-upgrade');
    await p2.click('#outcome .confirm button.danger');
    await p2.waitForSelector('#outcome a[href^="#/run/"]');
    const old9 = (await request(v2.base, 'GET', '/api/runs/order-A-9')).json.run;
    const new9 = old9.successor && (await request(v2.base, 'GET', '/api/runs/' + encodeURIComponent(old9.successor))).json.run;
    ok(old9.status === 'superseded' && new9 && new9.status === 'completed', `the upgrade from the page: order-A-9 superseded by ${old9.successor}, completed under the new code`);
    clean(p2, 'on the upgraded run\'s page');
    await p2.close();
    await stopWeb(v2);
  }

  /* a step's bytes changed in the file (LMDB): verify shows the fault */
  if (!PG) {
    const bytes = fs.readFileSync(store), fd = fs.openSync(store, 'r+');
    let n = 0;
    for (let at = bytes.indexOf('TRK-A-1'); at >= 0; at = bytes.indexOf('TRK-A-1', at + 1), n++) fs.writeSync(fd, '9', at + 6);
    fs.closeSync(fd);
    await page.goto(web.base + '/#/run/order-A-1');
    await page.click('#act-verify');
    await page.waitForSelector('#verify-result');
    const fault = await page.locator('#outcome').textContent();
    ok(n > 0 && /Verify found a fault/.test(fault) && /order-A-1.*step 0:\d+.*hash chain/.test(fault), 'verify shows the first fault: ' + fault.trim());
  }
  clean(page, 'on the story\'s pages');
  await b.close();
  await stopWeb(web);
}

async function paging() {
  const store = path.join(tmp, 'many.db');
  const N = 10000;
  run(opt['web-fixture'], [store, 'many', String(N)]);
  const web = await startWeb(store, ['--read-only']);
  const b = await browser();
  const page = await newPage(b);
  await page.goto(web.base + '/');
  await page.waitForSelector('#runs-body tr[data-id]');
  ok(await page.locator('#readonly').isVisible(), 'read-only mode is shown');
  ok(await page.locator('#batch button').count() === 0, 'read-only mode hides the batch actions');
  const chipN = async (s) => (await page.locator(`#counts .chip[data-status="${s}"]`).getAttribute('data-n'));
  ok(await chipN('all') === String(N), `the counts say ${N} runs`);
  ok(await chipN('failed') === '200' && await chipN('suspended') === '100', 'the counts per status are right');
  const ids = async () => page.$$eval('#runs-body tr[data-id]', (t) => t.map((x) => x.dataset.id));
  const first = await ids();
  ok(first.length === 50 && first[0] === 'job-009999' && first[49] === 'job-009950', 'the first page holds the newest 50 ids');
  await page.click('#next');
  await page.waitForSelector('#runs-body tr[data-id="job-009949"]');
  await page.click('#next');
  await page.waitForSelector('#runs-body tr[data-id="job-009899"]');
  ok((await ids())[49] === 'job-009850', 'the third page follows the second');
  await page.click('#prev');
  await page.waitForSelector('#runs-body tr[data-id="job-009949"]');
  await page.click('#prev');
  await page.waitForSelector('#runs-body tr[data-id="job-009999"]');
  ok(await page.locator('#prev').isDisabled(), 'back on the first page, with no page before it');

  await page.selectOption('#filters select[name=status]', 'failed');
  await page.waitForFunction(() => [...document.querySelectorAll('#runs-body tr[data-id]')].every((t) => t.dataset.status === 'failed') &&
    document.querySelectorAll('#runs-body tr[data-id]').length === 50);
  ok(true, 'the status filter shows failed runs only');

  /* every page of a filter, collected */
  async function all(hash) {
    await page.goto(web.base + '/' + hash);
    const seen = [];
    for (let i = 0; i < 300; i++) {
      await page.waitForSelector('#runs-body tr[data-id], #runs-body td.empty:not(:empty)');
      await page.waitForFunction(() => !/Loading/.test(document.querySelector('#runs-body').textContent));
      seen.push(...(await ids()));
      if (await page.locator('#next').isDisabled()) return seen;
      const before = await page.locator('#page').textContent();
      await page.click('#next');
      await page.waitForFunction((b) => document.querySelector('#page')?.textContent !== b, before);
    }
    return seen;
  }
  const failed = await all('#/runs?status=failed');
  ok(failed.length === 200 && failed.every((id) => Number(id.slice(4)) % 50 === 7), 'the pages of failed runs hold the 200 of them');
  const pre = await all('#/runs?prefix=job-0012');
  ok(pre.length === 100 && pre[0] === 'job-001299' && pre[99] === 'job-001200', 'the id prefix filter pages through its 100 runs');
  await page.goto(web.base + '/#/runs');
  await page.fill('#filters input[name=q]', 'needle');
  await page.press('#filters input[name=q]', 'Enter');
  await page.waitForFunction(() => location.hash.includes('q=needle'));
  const needles = await all('#/runs?q=needle');
  ok(needles.length === 10 && needles.every((id) => Number(id.slice(4)) % 1000 === 0), 'the search finds the 10 payloads with the word');
  await page.goto(web.base + '/#/runs');
  await page.selectOption('#filters select[name=range]', '1h');
  await page.waitForFunction(() => location.hash.includes('since=1h'));
  await page.waitForSelector('#runs-body tr[data-id="job-009999"]');
  ok(true, 'the last hour holds the runs just made');
  const past = await all('#/runs?until=2001-01-01');
  ok(past.length === 0 && await page.locator('#runs-body td.empty').textContent() === 'No run matches.', 'a range in the past holds none');

  await page.goto(web.base + '/#/run/job-000003');
  await page.waitForSelector('.run-head');
  ok(await page.locator('#act-continue').isDisabled() && await page.locator('#act-check').isDisabled(), 'read-only mode disables a run\'s actions');
  await page.click('#act-verify');
  await page.waitForSelector('#outcome:not([hidden])');
  const verified = await page.locator('#outcome').textContent();
  ok(/^Verified/.test(verified.trim()), 'but verifies the run, which writes nothing: ' + verified.trim());
  ok(await page.locator('.inbox-card textarea').isDisabled(), 'and its answer');
  clean(page, 'while paging');
  await b.close();
  await stopWeb(web);
}

const HOSTILE = ['<script>', 'onerror=', 'javascript:', '<svg onload', '<img src=x'];

async function noScriptRan(page, where) {
  const flag = await page.evaluate(() => window.__xss);
  ok(flag === undefined, `no hostile string ran as script ${where}` + (flag !== undefined ? ' (window.__xss = ' + flag + ')' : ''));
  const bad = await page.evaluate(() => {
    const out = [];
    const scripts = [...document.scripts].filter((s) => !/^\/[a-z]+\.js$/.test(new URL(s.src || 'x:', location.href).pathname) || s.textContent);
    if (scripts.length) out.push(scripts.length + ' script element(s) not ours');
    if (document.querySelector('img, iframe, object, embed, svg svg, foreignObject')) out.push('markup from the store became elements');
    for (const el of document.body.querySelectorAll('*')) {
      for (const a of el.attributes) if (/^on/i.test(a.name)) out.push('an ' + a.name + ' attribute on ' + el.tagName);
      const href = el.getAttribute('href');
      if (href !== null && !href.startsWith('#') && !href.startsWith('/api/')) out.push('a link to ' + href.slice(0, 60));
    }
    return out;
  });
  ok(bad.length === 0, `the DOM holds only our own script, elements and links ${where}` + (bad.length ? ': ' + bad.join('; ') : ''));
}

async function hostile() {
  const store = path.join(tmp, 'hostile.db');
  run(opt['web-fixture'], [store, 'hostile', path.join(tmp, 'script.json')]);
  const runs = dumpRuns(store);
  const web = await startWeb(store, []);
  const b = await browser();
  const page = await newPage(b);
  await page.goto(web.base + '/');
  await page.waitForSelector('#runs-body tr[data-id]');
  ok(await page.locator('#runs-body tr[data-id]').count() === runs.length, `the list shows the ${runs.length} hostile runs`);
  ok(await page.locator('#runs-body').textContent().then((t) => t.includes('<img src=x onerror=')), 'a policy name with markup shows as text');
  await noScriptRan(page, 'on the list');
  for (const r of runs) {
    await page.goto(web.base + '/#/run/' + encodeURIComponent(r.id));
    await page.waitForSelector('.run-head');
    await page.waitForSelector('#timeline');
    for (const b2 of await page.locator('#tree .pv').all()) await b2.click();
    const text = await page.locator('main').textContent();
    ok(HOSTILE.some((s) => text.includes(s)), `run ${r.id}: its hostile strings show as text`);
    await noScriptRan(page, `on run ${r.id}, every payload unfolded`);
  }
  await page.goto(web.base + '/#/run/hostile-big');
  await page.waitForSelector('#tree .pv');
  await page.locator('#tree .pv').first().click();
  await page.locator('#tree button.link').first().click();
  await page.waitForSelector('#tree pre.json.whole');
  const len = await page.evaluate(() => Math.max(...[...document.querySelectorAll('#tree pre.json')].map((p) => p.textContent.length)));
  ok(len > 1024 * 1024, 'a 1 MB payload unfolds whole on demand');
  await page.goto(web.base + '/#/inbox');
  await page.waitForSelector('.inbox-card[data-id="hostile-suspended"]');
  ok((await page.locator('.inbox-card .prompt').textContent()).includes('<script>'), 'the inbox shows a hostile prompt as text');
  await page.locator('.inbox-card details.raw summary').click();
  await noScriptRan(page, 'in the inbox');
  await page.goto(web.base + '/#/overview');
  await page.waitForSelector('#overview .chart-panel');
  await noScriptRan(page, 'on the overview');
  await page.goto(web.base + '/#/runs?q=' + encodeURIComponent('<script>'));
  await page.waitForSelector('#runs-body tr');
  await noScriptRan(page, 'searching for <script>');
  /* and the page still works */
  await page.click('#nav-runs');
  await page.click('#filters button.ghost');
  await page.waitForFunction((n) => document.querySelectorAll('#runs-body tr[data-id]').length === n, runs.length);
  await page.click('#runs-body tr[data-id="hostile-model"] a');
  await page.waitForSelector('#timeline .k-model');
  ok(/168/.test(await page.locator('#timeline').textContent()), 'the model run\'s timeline shows its tokens');
  clean(page, 'on every hostile page');
  await b.close();
  await stopWeb(web);
}

async function refusals() {
  const { store } = (() => {
    const s = path.join(tmp, 'refuse.db');
    run(opt['order-demo'], ['--store', s, '--order', 'R-1', '--effects', path.join(tmp, 'fx'), '--crash-after', '7', '--quiet'], null, [null, 137]);
    return { store: s };
  })();
  /* another address than loopback, without a token: refused, not served */
  const port = await freePort();
  let res;
  try {
    execFileSync(opt.web, [store, '--listen', `0.0.0.0:${port}`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: WAIT_MS });
    res = { status: 0, stderr: '' };
  } catch (e) {
    res = { status: e.status, stderr: String(e.stderr) };
  }
  ok(res.status !== 0 && res.status !== null, `--listen 0.0.0.0 without a token exits ${res.status}`);
  ok(/token/.test(res.stderr), 'and says a token is needed: ' + res.stderr.trim());
  const probe = await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve('listening'); });
    s.on('error', () => resolve('closed'));
  });
  ok(probe === 'closed', 'nothing listens on that port');

  /* a POST without the CSRF token */
  const web = await startWeb(store, ['--plugin', opt['order-plugin']]);
  const sess = await request(web.base, 'GET', '/api/session');
  ok(sess.status === 200 && typeof sess.json.csrf === 'string' && sess.json.csrf.length >= 16, 'the session gives a CSRF token');
  const url = '/api/runs/order-R-1/continue';
  const json = { 'Content-Type': 'application/json' };
  const none = await request(web.base, 'POST', url, json, {});
  ok(none.status === 403 && none.json && none.json.error, `a POST without the CSRF token is refused: ${none.status} ${none.body.slice(0, 120)}`);
  const wrong = await request(web.base, 'POST', url, Object.assign({ 'X-CSRF-Token': 'x'.repeat(sess.json.csrf.length) }, json), {});
  ok(wrong.status === 403, 'and one with a wrong token');
  const get = await request(web.base, 'GET', url);
  ok(get.status === 405 && get.headers.allow === 'POST' && get.json && get.json.error === 'method',
    `a GET never acts (405, Allow: POST): ${get.status} ${get.headers.allow}`);
  const still = await request(web.base, 'GET', '/api/runs/order-R-1');
  const r = still.json && (still.json.run || still.json);
  ok(r && r.status === 'running' && r.crashed === true, 'the run is still crashed');
  const good = await request(web.base, 'POST', url, Object.assign({ 'X-CSRF-Token': sess.json.csrf }, json), {});
  ok(good.status === 200, `with the token, continue is done: ${good.body.slice(0, 120)}`);
  await stopWeb(web);

  /* with a token: nothing without it; the login URL sets the cookie */
  const tokenFile = path.join(tmp, 'token');
  const token = 'tok-' + Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
  fs.writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  const web2 = await startWeb(store, ['--token-file', tokenFile]);
  ok((await request(web2.base, 'GET', '/api/runs')).status === 401, 'without the token the API refuses (401)');
  ok((await request(web2.base, 'GET', '/api/runs', { Authorization: 'Bearer ' + token })).status === 200, 'the bearer header is taken');
  const login = await request(web2.base, 'GET', '/login?token=' + encodeURIComponent(token));
  const cookie = String(login.headers['set-cookie'] || '');
  ok(/HttpOnly/i.test(cookie) && /SameSite=Strict/i.test(cookie), 'the login URL sets an HttpOnly, SameSite=Strict cookie');
  const b = await browser();
  const page = await newPage(b);
  await page.goto(web2.base + '/');
  await page.waitForSelector('.outcome.bad');
  ok(true, 'the page without the cookie says the server refused it');
  await page.goto(web2.base + '/login?token=' + encodeURIComponent(token));
  await page.goto(web2.base + '/#/runs');
  await page.waitForSelector('#runs-body tr[data-id="order-R-1"]');
  ok(true, 'after the login URL the page lists the runs');
  page.problems = page.problems.filter((p) => !/40[13]/.test(p));
  clean(page, 'logging in');
  await b.close();
  await stopWeb(web2);
}

async function steps() {
  const store = path.join(tmp, 'steps.db');
  run(opt['web-fixture'], [store, 'many', '300']);
  run(opt['web-gen'], [store, '--long', '1500']);
  run(opt['web-gen'], [store, '--big', '2']);
  const web = await startWeb(store, []);
  const b = await browser();
  const page = await newPage(b);
  const shown = () => page.$$eval('#tree .step[data-step]', (r) => r.map((x) => x.dataset.step));

  /* a long run: a page at a time, by the button and by scrolling */
  const api = (await request(web.base, 'GET', '/api/runs/long-run/steps?limit=600')).json;
  await page.goto(web.base + '/#/run/long-run');
  await page.waitForSelector('#tree .step[data-step]');
  let ids = await shown();
  ok(ids.length === 200 && (await page.locator('#steps-shown').textContent()) === '200 of 4,501 steps',
    `the run of 4,501 steps opens with its first 200 (${ids.length})`);
  /* (the click scrolls the button into view, which may load a page too) */
  await page.click('#more-steps');
  await page.waitForFunction(() => document.querySelectorAll('#tree .step[data-step]').length >= 400);
  const after = (await shown()).length;
  ok(after % 200 === 0, `the button loads the next 200 (${after} shown)`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.evaluate(() => document.getElementById('steps-more').scrollIntoView());
  await page.waitForFunction((n) => document.querySelectorAll('#tree .step[data-step]').length >= n + 200, after);
  ids = (await shown()).slice(0, 600);
  ok(JSON.stringify(ids) === JSON.stringify(api.steps.map((x) => x.id)), 'scrolling to the end loads more, each step once and in order');
  ok(/^[\d,]+ of 4,501 steps$/.test(await page.locator('#steps-shown').textContent()), 'the count says how many are shown');
  await shot(page, 'steps');

  /* a 2 MiB payload: cut in the page, whole on demand */
  const big = (await request(web.base, 'GET', '/api/runs/big-run')).json;
  await page.goto(web.base + '/#/run/big-run');
  await page.waitForSelector('#tree .mk-cut');
  ok(await page.locator('#tree .step[data-step]').count() === big.run.steps && big.run.steps > 100 && !(await page.locator('#more-steps').count()),
    `a run of ${big.run.steps} steps with three 2 MiB payloads comes in one page`);
  ok(await page.locator('#tree .mk-cut').count() === 3, 'its three 2 MiB payloads are cut');
  const row = page.locator('#tree .step', { has: page.locator('.mk-cut') }).first();
  ok(/2\.\d MB/.test(await row.locator('.mk-cut').textContent()), 'a cut payload says its size');
  await row.locator('.pv').click();
  await page.waitForSelector('#tree .cut-preview');
  await page.locator('#tree .show-whole').first().click();
  await page.waitForSelector('#tree pre.json.whole');
  const len = await page.locator('#tree pre.json.whole').first().evaluate((p) => p.textContent.length);
  ok(len > 2 * 1024 * 1024, `"show whole" fetches the step: ${len} characters`);

  /* a signal to a suspended run, its payload checked first */
  await page.goto(web.base + '/#/run/job-000003');
  await page.click('#act-signal');
  await page.fill('#signal-form input[name=event]', 'poke');
  await page.fill('#signal-form textarea', '[1]');
  await page.click('#signal-send');
  ok((await page.locator('#signal-form .json-msg').textContent()) === 'the payload must be a JSON object' &&
    !(await page.locator('#outcome').isVisible()), 'a signal whose payload is no object is not sent');
  await page.fill('#signal-form textarea', '{"n": 1}');
  await page.click('#signal-send');
  await page.waitForSelector('#outcome pre.summary');
  ok(/^run job-000003: delivered \(now suspended\)$/.test(await page.locator('#outcome pre.summary').textContent()),
    'the signal is delivered to the suspended run: ' + await page.locator('#outcome pre.summary').textContent());

  /* a batch cancel: its summary stays until dismissed */
  await page.goto(web.base + '/#/runs?status=suspended');
  await page.waitForSelector('#runs-body tr[data-status="suspended"]');
  const n = await page.locator('#runs-body tr[data-id]').count();
  ok(n === 3, `three suspended runs (${n})`);
  await page.click('#batch-cancel');
  await page.click('#batch .confirm button.danger');
  await page.waitForSelector('#batch-outcome pre.summary');
  const summary = await page.locator('#batch-outcome pre.summary').textContent();
  ok(summary.includes('3 run(s) cancelled, 0 refused') && (summary.match(/^run job-\d+: cancelled$/gm) || []).length === 3,
    'the batch cancel says how many were cancelled, each run named: ' + JSON.stringify(summary));
  await page.waitForSelector('#runs-body td.empty');
  await page.selectOption('#filters select[name=status]', 'cancelled');
  await page.waitForFunction(() => document.querySelectorAll('#runs-body tr[data-status="cancelled"]').length === 3);
  ok(await page.locator('#batch-outcome').isVisible() && (await page.locator('#batch-outcome pre.summary').textContent()) === summary,
    'the summary stays through reloads and another filter');
  await page.click('#batch-dismiss');
  await page.waitForSelector('#batch-outcome', { state: 'hidden' });
  await page.goto(web.base + '/#/runs');
  await page.waitForSelector('#runs-body tr[data-id]');
  ok(!(await page.locator('#batch-outcome').isVisible()), 'dismissed, it is gone');
  clean(page, 'paging steps and cancelling');
  await b.close();
  await stopWeb(web);
}

async function deletes() {
  const store = path.join(tmp, 'delete.db');
  /* job-000000..119: failed 7, 57 and 107; suspended 3 and 103 */
  run(opt['web-fixture'], [store, 'many', '120']);
  const tick = () => new Promise((r) => setTimeout(r, 5));
  await tick();
  const cut = new Date().toISOString();
  await tick();
  run(opt['web-gen'], [store, '20']); /* newer runs, two of them failed */
  const web = await startWeb(store, []);
  const b = await browser();
  let page = await newPage(b);
  const watcher = await newPage(b);
  await watcher.goto(web.base + '/#/runs');
  await watcher.waitForSelector('#runs-body tr[data-id="job-000110"]');
  ok(await watcher.locator('#runs-body tr[data-id="job-000107"]').count() === 1, 'the list shows the runs to delete');

  /* from a run's page, after a question that says what goes */
  await page.goto(web.base + '/#/run/job-000110');
  await page.waitForSelector('#act-delete');
  await page.click('#act-delete');
  const question = await page.locator('#actions .confirm .question').textContent();
  ok(/job-000110 \(completed, 1 step, root policy job\)/.test(question) && /tombstone/.test(question),
    'the delete asks first, naming the run, its status, steps and policy: ' + question);
  await page.click('#actions .confirm button.danger');
  await page.waitForSelector('#tombstone');
  ok(/run job-000110: deleted/.test(await page.locator('#outcome').textContent()), 'the delete says what it did');
  ok(await page.locator('#tombstone .badge').first().textContent() === 'deleted' &&
    /completed/.test(await page.locator('#tombstone .facts').textContent()), 'the run\'s page turns into its tombstone, its final status kept');
  await watcher.waitForSelector('#runs-body tr[data-id="job-000110"]', { state: 'detached' });
  ok(true, 'the other tab\'s list drops the deleted run, live');
  const gone = await request(web.base, 'GET', '/api/runs/job-000110');
  ok(gone.status === 404 && gone.json.error === 'deleted' && gone.json.tombstone.status === 'completed', 'the store holds its tombstone only');
  await page.goto(web.base + '/#/runs');
  await page.waitForSelector('#runs-body tr[data-id]');
  await page.goto(web.base + '/#/run/job-000110');
  await page.waitForSelector('#tombstone');
  ok(/was deleted on .*: it was completed; its tombstone keeps the id until/.test(await page.locator('#tombstone .alert').textContent()),
    'opening a deleted run\'s id shows its tombstone');
  await shot(page, 'tombstone');
  await page.goto(web.base + '/#/run/job-000103');
  await page.waitForSelector('#act-cancel');
  ok(await page.locator('#act-delete').count() === 0, 'a suspended run has no delete');

  /* the failed runs older than a time: named, then deleted */
  await page.goto(web.base + '/#/runs');
  await page.waitForSelector('#runs-body tr[data-id]');
  ok(await page.locator('#batch-delete').isDisabled(), 'with no filter, the batch delete is off');
  await page.selectOption('#filters select[name=range]', '<1h');
  await page.waitForFunction(() => location.hash.includes('until=1h'));
  ok(true, 'the time range offers "older than"');
  await page.goto(web.base + '/#/runs?status=failed&until=' + encodeURIComponent(cut));
  await page.waitForFunction(() => document.querySelectorAll('#runs-body tr[data-id]').length === 3);
  const older = await page.$$eval('#runs-body tr[data-id]', (t) => t.map((x) => x.dataset.id));
  ok(JSON.stringify(older) === '["job-000107","job-000057","job-000007"]', 'the filter holds the three failed runs made before the cut: ' + older);
  await page.click('#batch-delete');
  await page.waitForFunction(() => /^Delete 3 ended runs/.test(document.querySelector('#batch .confirm .question')?.textContent || ''));
  const ask = await page.locator('#batch .confirm .question').textContent();
  ok(/job-000107 \(failed\), job-000057 \(failed\), job-000007 \(failed\)/.test(ask), 'the batch delete names what it would delete: ' + ask);
  await shot(page, 'delete');
  await page.click('#batch .confirm button.danger');
  await page.waitForSelector('#batch-outcome pre.summary');
  const summary = await page.locator('#batch-outcome pre.summary').textContent();
  ok(summary.includes('3 run(s) deleted, 0 refused') && (summary.match(/^run job-\d+: deleted/gm) || []).length === 3,
    'the batch delete says what it deleted: ' + JSON.stringify(summary));
  await page.waitForSelector('#runs-body td.empty');
  await watcher.waitForSelector('#runs-body tr[data-id="job-000107"]', { state: 'detached' });
  ok(true, 'the list drops them, in this tab and live in the other');
  const left = (await request(web.base, 'GET', '/api/runs?status=failed')).json.runs;
  ok(left.length === 2 && left.every((r) => !r.id.startsWith('job-')), 'the failed runs made after the cut stay');

  /* a delete without the CSRF token */
  const json = { 'Content-Type': 'application/json' };
  const forged = await request(web.base, 'POST', '/api/runs/job-000001/delete', json, {});
  const forgedBatch = await request(web.base, 'POST', '/api/batch/delete?status=completed', json, {});
  ok(forged.status === 403 && forged.json.error === 'csrf' && forgedBatch.status === 403, 'a delete without the CSRF token is refused (403)');
  ok((await request(web.base, 'GET', '/api/runs/job-000001')).status === 200, 'and the run stays');
  clean(page, 'deleting');
  clean(watcher, 'in the watching tab');
  /* (closed first: a page whose server stops sees its event stream cut) */
  await page.context().close();
  await watcher.context().close();
  await stopWeb(web);

  /* read-only: no delete anywhere, and the tombstones still show */
  const ro = await startWeb(store, ['--read-only']);
  page = await newPage(b);
  await page.goto(ro.base + '/#/run/job-000001');
  await page.waitForSelector('.run-head #actions');
  ok(await page.locator('#act-delete').count() === 0, 'read-only mode shows no delete on a run\'s page');
  await page.goto(ro.base + '/#/runs?status=completed');
  await page.waitForSelector('#runs-body tr[data-id]');
  ok(await page.locator('#batch-delete').count() === 0, 'nor a batch delete');
  const sess = (await request(ro.base, 'GET', '/api/session')).json;
  const refused = await request(ro.base, 'POST', '/api/runs/job-000001/delete', Object.assign({ 'X-CSRF-Token': sess.csrf }, json), {});
  ok(refused.status === 403 && refused.json.error === 'read_only', 'and the server refuses one (403 read_only)');
  await page.goto(ro.base + '/#/run/job-000007');
  await page.waitForSelector('#tombstone');
  ok(/failed/.test(await page.locator('#tombstone .facts').textContent()), 'a tombstone shows in read-only mode too');
  clean(page, 'read-only');
  await b.close();
  await stopWeb(ro);
}

const CASES = { story, paging, hostile, refusals, steps, delete: deletes };

(async () => {
  if (!CASES[CASE]) {
    console.error('usage: node test_web.js story|paging|hostile|refusals|steps|delete --web BIN ...');
    process.exit(2);
  }
  loadPlaywright();
  const t0 = Date.now();
  const guard = setTimeout(() => { console.error(`FAIL: ${CASE} took over ${GUARD_MS / 1000} s`); cleanup(); process.exit(1); }, GUARD_MS);
  try {
    await CASES[CASE]();
  } catch (e) {
    failures++;
    console.error('FAIL: ' + (e && e.stack ? e.stack : e));
    if (lastPage && opt.shots) {
      const where = path.join(opt.shots, `failed-${CASE}.png`);
      await lastPage.screenshot({ path: where, timeout: WAIT_MS }).then(() => console.error('the page then: ' + where), () => {});
    }
  }
  clearTimeout(guard);
  cleanup();
  log(`${CASE}: ${failures ? 'failed' : 'passed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  process.exit(failures ? 1 : 0);
})();
