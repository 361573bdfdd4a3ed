/*
 * ledger-web's page: the shared parts (DOM helpers, the API client, the
 * router, live events, the theme).  Every string from the server is
 * untrusted: the DOM is built with createElement and textContent only, and
 * links are made from '#' and encodeURIComponent, never from data.
 */
'use strict';

const PL = (window.PL = {
  session: { read_only: true, csrf: '' },
  views: {},
  view: null,
  liveOk: false,
});

/* ---- DOM ---- */

/* h('div', {class: 'x', text: 'y', on: {click: f}}, child, ...): children
 * are nodes, strings (text nodes), arrays of them, or null (skipped). */
PL.h = function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  PL.attrs(el, attrs);
  PL.append(el, children);
  return el;
};

PL.svg = function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  PL.attrs(el, attrs);
  PL.append(el, children);
  return el;
};

PL.attrs = function (el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') el.textContent = String(v);
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) el.addEventListener(ev, f);
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'href') el.setAttribute('href', PL.safeHref(v));
    else if (/^on/i.test(k)) throw new Error('event attributes are not used: ' + k);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
};

PL.append = function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
};

/* Only our own kinds of link: in-page routes and the API's paths. */
PL.safeHref = function (v) {
  const s = String(v);
  return s.startsWith('#') || s.startsWith('/api/') ? s : '#';
};

PL.clear = function (el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
};

/* ---- formatting ---- */

PL.runHref = (id) => '#/run/' + encodeURIComponent(id);

/* A run's status as an operator reads it: a running run whose owner is
 * gone is crashed. */
PL.statusOf = function (r) {
  if (!r) return 'unknown';
  if (typeof r.state === 'string' && r.state) return r.state;
  if (r.crashed && (r.status === 'running' || !r.status)) return 'crashed';
  return String(r.status || 'unknown');
};

PL.badge = function (status, extra) {
  const s = String(status);
  const cls = /^[a-z_]+$/.test(s) ? 'st-' + s : 'st-other';
  return PL.h('span', { class: 'badge ' + cls + (extra ? ' ' + extra : ''), text: s.replace(/_/g, ' ') });
};

PL.num = (n) => (typeof n === 'number' && isFinite(n) ? n.toLocaleString('en-US') : '–');

PL.compact = function (n) {
  if (typeof n !== 'number' || !isFinite(n)) return '–';
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + 'M';
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(n >= 1e5 ? 0 : 1) + 'k';
  return n.toLocaleString('en-US');
};

/* Microseconds (a number) or an ISO string to a Date, or null. */
PL.toDate = function (v, us) {
  if (typeof us === 'number' && isFinite(us)) return new Date(us / 1000);
  if (typeof v === 'number' && isFinite(v)) return new Date(v > 1e14 ? v / 1000 : v > 1e11 ? v : v * 1000);
  if (typeof v === 'string' && v) {
    const d = new Date(v);
    return isNaN(d) ? null : d;
  }
  return null;
};

const pad = (n, w = 2) => String(n).padStart(w, '0');

PL.fmtTime = function (d, withMs) {
  if (!d) return '–';
  const now = new Date();
  const t = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) +
    (withMs ? '.' + pad(d.getMilliseconds(), 3) : '');
  if (d.toDateString() === now.toDateString()) return t;
  const day = (d.getFullYear() !== now.getFullYear() ? d.getFullYear() + '-' : '') +
    pad(d.getMonth() + 1) + '-' + pad(d.getDate());
  return day + ' ' + t;
};

PL.ago = function (d) {
  if (!d) return '–';
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  if (s < 0) return 'just now';
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm ago';
  return Math.floor(s / 86400) + 'd ago';
};

PL.dur = function (us) {
  if (typeof us !== 'number' || !isFinite(us)) return '–';
  if (us < 1000) return Math.round(us) + ' µs';
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : 1) + ' ms';
  if (us < 6e7) return (us / 1e6).toFixed(2) + ' s';
  return Math.floor(us / 6e7) + 'm ' + Math.round((us % 6e7) / 1e6) + 's';
};

/* The time cell of a table: short text, the full ISO time as its title. */
PL.timeCell = function (iso, us, relative) {
  const d = PL.toDate(iso, us);
  return PL.h('time', {
    text: relative ? PL.ago(d) : PL.fmtTime(d),
    title: d ? d.toISOString() : '',
    datetime: d ? d.toISOString() : null,
  });
};

/* A run's tokens: a number, or {input, output, model_calls}. */
PL.tokens = function (t) {
  if (typeof t === 'number') return { total: t, title: t + ' tokens' };
  if (t && typeof t === 'object') {
    const i = Number(t.input) || 0, o = Number(t.output) || 0;
    return {
      total: i + o,
      title: i + ' in, ' + o + ' out' + (t.model_calls !== undefined ? ', over ' + t.model_calls + ' model call(s)' : ''),
    };
  }
  return { total: null, title: '' };
};

/* A run's steps by invocation path, each list in step order. */
PL.byPath = function (steps) {
  const m = new Map();
  for (const s of steps) {
    if (!s || typeof s !== 'object') continue;
    const p = String(s.path !== undefined ? s.path : '0');
    if (!m.has(p)) m.set(p, []);
    m.get(p).push(s);
  }
  for (const list of m.values()) list.sort((a, b) => (a.seq || 0) - (b.seq || 0));
  return m;
};

/* A value shown in one line, cut at max characters. */
PL.preview = function (v, max = 140) {
  let s;
  if (typeof v === 'string') s = v;
  else {
    try { s = JSON.stringify(v); } catch (e) { s = String(v); }
  }
  if (s === undefined) s = '';
  return s.length > max ? s.slice(0, max) + '…' : s;
};

PL.bytes = function (n) {
  if (n < 1024) return n + ' B';
  if (n < 1048576) return (n / 1024).toFixed(1) + ' kB';
  return (n / 1048576).toFixed(1) + ' MB';
};

/* A JSON value pretty-printed into a <pre>, cut at 64 kB with a button to
 * show the rest. */
PL.jsonBlock = function (v, cls) {
  let s;
  try { s = typeof v === 'string' ? v : JSON.stringify(v, null, 2); } catch (e) { s = String(v); }
  if (s === undefined) s = String(v);
  const pre = PL.h('pre', { class: 'json ' + (cls || '') });
  const LIMIT = 65536;
  if (s.length <= LIMIT) {
    pre.textContent = s;
    return pre;
  }
  pre.textContent = s.slice(0, LIMIT);
  const more = PL.h('button', {
    class: 'link small', type: 'button',
    text: 'show all (' + PL.bytes(s.length) + ')',
    on: { click: () => { pre.textContent = s; more.remove(); } },
  });
  return PL.h('div', null, pre, more);
};

/* ---- the API ---- */

PL.api = async function (path, opts) {
  const o = opts || {};
  const init = { method: o.method || 'GET', headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (init.method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.headers['X-CSRF-Token'] = PL.session.csrf || '';
    init.body = JSON.stringify(o.body || {});
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new Error('the server cannot be reached (' + e.message + ')');
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = { error: text.slice(0, 400) }; }
  }
  if (!res.ok) {
    const msg = data && (typeof data.message === 'string' ? data.message : data.error);
    const err = new Error(typeof msg === 'string' ? msg : 'HTTP ' + res.status);
    err.status = res.status;
    err.data = data;
    throw err;
  }
  return data;
};

PL.query = function (params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
};

/* The panel an action's outcome is shown in: the server's summary (the
 * words ledger-replay prints), or its error. */
PL.outcome = function (box, data, err) {
  PL.clear(box);
  box.hidden = false;
  box.className = 'outcome ' + (err ? 'bad' : 'good');
  if (err) {
    box.appendChild(PL.h('strong', { text: 'Refused: ' }));
    box.appendChild(document.createTextNode(err.message));
    return;
  }
  const text = PL.summary(data);
  if (text) box.appendChild(PL.h('pre', { class: 'summary', text }));
  else box.appendChild(PL.jsonBlock(data));
  if (data && (data.status === 'not_run' || data.check === 'diverged' || data.check === 'error' ||
      data.verify === 'fault' || data.status === 'failed' || data.refused > 0)) box.className = 'outcome bad';
};

/* An action's answer in the words ledger-replay prints. */
PL.summary = function (d) {
  if (!d || typeof d !== 'object') return '';
  const ms = (v) => (typeof v === 'number' ? v.toFixed(2) + ' ms' : '');
  const one = (o) => {
    if (!o || typeof o !== 'object') return '';
    const id = String(o.run_id || '');
    if (o.verify) {
      return o.verify === 'ok' ? `verify ${id}: ok, every value decodes and every hash chain links (${ms(o.elapsed_ms)})`
        : `verify ${id}: FAULT ${o.message || o.error || ''}`;
    }
    if (o.check) {
      let t = `check ${id} (${o.status}): ${o.check}` + (o.note ? ' ' + o.note : '');
      if (typeof o.calls_served === 'number') t += `\n  calls served from the ledger ${o.calls_served}, steps replayed ${o.steps_replayed}; ${ms(o.elapsed_ms)}`;
      if (Array.isArray(o.code_changed) && o.code_changed.length) t += '\n  recorded by other code: ' + PL.preview(o.code_changed, 300);
      if (o.divergence) t += '\n  first divergence: ' + PL.preview(o.divergence, 600);
      if (o.message) t += '\n  ' + o.message;
      return t;
    }
    if (o.deleted === true) return `run ${id}: deleted (its tombstone keeps the id)`;
    if (o.error && !o.status) return `run ${id}: refused: ${o.message || o.error}`;
    if (o.status === 'not_run') return `run ${id}: not run: ${o.message || o.error || ''}`;
    if (o.status === 'delivered') return `run ${id}: delivered` + (o.now ? ` (now ${o.now})` : '');
    let t = `run ${id}: ${o.status}` + (o.note ? ' ' + o.note : '');
    if (typeof o.calls_served === 'number') t += `\n  calls served from the ledger ${o.calls_served}, executed ${o.calls_executed}; ${ms(o.elapsed_ms)}`;
    if (o.status === 'completed' && o.result !== undefined) t += '\n  result ' + PL.preview(o.result, 400);
    if (o.status === 'suspended') t += `\n  waiting at ${o.suspended_path} for an answer to ` + PL.preview(o.prompt, 400);
    if (o.status === 'failed') t += `\n  ${o.error || ''}: ${o.reason || ''}`;
    return t;
  };
  if (typeof d.continued === 'number') {
    const runs = Array.isArray(d.runs) ? d.runs : [];
    return runs.map(one).join('\n') + (runs.length ? '\n' : '') +
      `${d.continued} crashed run(s) continued, ${d.refused || 0} refused` + (d.truncated ? ' (more may match: run it again)' : '');
  }
  if (typeof d.cancelled === 'number') {
    /* each run: cancelled (what it is now), or refused and why */
    const runs = Array.isArray(d.runs) ? d.runs : [];
    const lines = runs.filter((o) => o && typeof o === 'object').map((o) => {
      const id = String(o.run_id || '?');
      if (o.status === 'delivered') {
        if (o.ended) return `run ${id}: ` + (o.now === 'cancelled' ? 'cancelled' : `cancel delivered, ended ${o.now}`);
        return `run ${id}: cancel delivered (now ${o.now}: it ends when its policies next run)`;
      }
      return `run ${id}: refused: ${o.message || o.error || 'unknown'}`;
    });
    return lines.join('\n') + (lines.length ? '\n' : '') +
      `${d.cancelled} run(s) cancelled, ${d.refused || 0} refused` + (d.truncated ? ' (more may match: run it again)' : '');
  }
  if (typeof d.deleted === 'number') {
    const runs = Array.isArray(d.runs) ? d.runs : [];
    const lines = runs.map(one).filter(Boolean);
    return lines.join('\n') + (lines.length ? '\n' : '') +
      `${d.deleted} run(s) deleted, ${d.refused || 0} refused` + (d.truncated ? ' (more may match: run it again)' : '');
  }
  let t = one(d);
  if (d.new_run) t = `forked ${d.forked_from} at ${d.forked_at} into ${d.new_run}\n` + t;
  return t;
};

/* Runs an action from a button: disables it while the request is out. */
PL.act = async function (button, box, path, body, then) {
  if (PL.session.read_only) return;
  button.disabled = true;
  button.classList.add('busy');
  try {
    const data = await PL.api(path, { method: 'POST', body });
    PL.outcome(box, data, null);
    if (then) then(data);
  } catch (e) {
    PL.outcome(box, null, e);
  } finally {
    button.disabled = false;
    button.classList.remove('busy');
  }
};

/* A button that asks once more on the page (no browser dialog) before it
 * does what it says.  question: a string, or a function giving one or a
 * promise of one (shown once it comes; null: there is nothing to do, and
 * only "No" is offered). */
PL.confirmButton = function (label, question, cls, onYes) {
  const wrap = PL.h('span', { class: 'confirm' });
  const btn = PL.h('button', { type: 'button', class: cls || '', text: label });
  /* a question still open when a live update draws the button again is
   * asked again (the same button, but for the count in its label) */
  const key = label.replace(/\s*\([^)]*\)$/, '');
  const ask = () => {
    PL.confirming = key;
    const yes = PL.h('button', { type: 'button', class: 'danger', text: 'Yes' });
    const no = PL.h('button', { type: 'button', class: 'ghost', text: 'No' });
    const q = PL.h('span', { class: 'question' });
    const put = (t) => {
      if (t === null) {
        q.textContent = 'Nothing matches: there is nothing to do.';
        yes.hidden = true;
      } else {
        q.textContent = String(t);
        yes.disabled = false;
      }
    };
    const v = typeof question === 'function' ? question() : question;
    if (v && typeof v.then === 'function') {
      q.textContent = 'Looking…';
      yes.disabled = true;
      v.then((t) => { if (q.isConnected) put(t); },
        (e) => { if (q.isConnected) q.textContent = 'Cannot tell what it would do: ' + e.message; });
    } else put(v);
    btn.hidden = true;
    wrap.append(q, yes, no);
    const done = () => { PL.confirming = null; q.remove(); yes.remove(); no.remove(); btn.hidden = false; };
    no.addEventListener('click', done);
    yes.addEventListener('click', () => { done(); onYes(btn); });
  };
  btn.addEventListener('click', ask);
  wrap.appendChild(btn);
  if (PL.confirming === key) ask();
  return wrap;
};

/* ---- the router ---- */

PL.route = function () {
  const raw = location.hash.replace(/^#\/?/, '');
  const qi = raw.indexOf('?');
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const params = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
  const parts = path.split('/');
  let name = parts[0] || 'runs', arg = null;
  if (name === 'run') {
    try { arg = decodeURIComponent(parts.slice(1).join('/')); } catch (e) { arg = parts.slice(1).join('/'); }
  }
  return { name, arg, params };
};

PL.go = function (hash) {
  if (location.hash === hash) PL.render();
  else location.hash = hash;
};

PL.render = function () {
  const r = PL.route();
  const view = PL.views[r.name] || PL.views.runs;
  if (PL.view && PL.view.leave) PL.view.leave();
  PL.view = view;
  for (const n of ['runs', 'inbox', 'overview']) {
    const a = document.getElementById('nav-' + n);
    if (a) a.classList.toggle('active', n === r.name || (n === 'runs' && r.name === 'run'));
  }
  const main = PL.clear(document.getElementById('main'));
  PL.confirming = null;
  view.enter(main, r);
};

/* ---- live events ---- */

PL.connectEvents = function () {
  if (!window.EventSource) return;
  const dot = document.getElementById('live');
  let es;
  const open = () => {
    es = new EventSource('/api/events');
    es.onopen = () => {
      PL.liveOk = true;
      dot.classList.add('on');
      dot.title = 'live updates: connected';
    };
    es.onerror = () => {
      PL.liveOk = false;
      dot.classList.remove('on');
      dot.title = 'live updates: reconnecting';
    };
    const onMessage = (m) => {
      let ev = null;
      try { ev = JSON.parse(m.data); } catch (e) { ev = null; }
      if (!ev || typeof ev !== 'object') ev = {};
      if (!ev.type && m.type && m.type !== 'message') ev.type = m.type;
      PL.onEvent(ev);
    };
    es.onmessage = onMessage;
    for (const t of ['run', 'change', 'reset']) es.addEventListener(t, onMessage);
  };
  open();
};

PL.eventRunId = function (ev) {
  const r = ev.run;
  if (typeof r === 'string') return r;
  if (r && typeof r === 'object' && typeof r.id === 'string') return r.id;
  if (typeof ev.id === 'string') return ev.id;
  if (typeof ev.run_id === 'string') return ev.run_id;
  return null;
};

PL.onEvent = function (ev) {
  PL.refreshInboxCount();
  if (PL.view && PL.view.onEvent) PL.view.onEvent(ev);
};

/* A view's loader: one request out at a time; asked again while one is
 * out, it loads once more after it; a view left (reset) drops the answer
 * of the request under way and loads afresh.  apply(data, error, quiet). */
PL.loader = function (fetcher, apply) {
  let busy = false, again = false, quietAgain = true, gen = 0;
  const load = async (quiet) => {
    if (busy) { again = true; quietAgain = quietAgain && !!quiet; return; }
    busy = true;
    again = false;
    quietAgain = true;
    const g = gen;
    let data = null, err = null;
    try { data = await fetcher(); } catch (e) { err = e; }
    busy = false;
    if (g === gen) apply(data, err, !!quiet);
    if (again || g !== gen) load(g !== gen ? false : quietAgain);
  };
  return { load, reset() { gen++; } };
};

/* Calls f at most once per wait ms, the last call always coming through. */
PL.throttle = function (f, wait) {
  let timer = null, again = false;
  const run = () => {
    timer = null;
    if (again) { again = false; fire(); }
  };
  const fire = () => { f(); timer = setTimeout(run, wait); };
  return () => { if (timer) again = true; else fire(); };
};

PL.refreshInboxCount = PL.throttle(async () => {
  const pill = document.getElementById('inbox-count');
  try {
    const d = await PL.api('/api/inbox');
    const n = Array.isArray(d) ? d.length : d && Array.isArray(d.runs) ? d.runs.length : 0;
    pill.textContent = String(n);
    pill.hidden = n === 0;
  } catch (e) {
    pill.hidden = true;
  }
}, 2000);

/* ---- the theme: the system's, or the one chosen ---- */

PL.applyTheme = function () {
  let t = null;
  try { t = localStorage.getItem('pl-theme'); } catch (e) { t = null; }
  const root = document.documentElement;
  if (t === 'light' || t === 'dark') root.setAttribute('data-theme', t);
  else root.removeAttribute('data-theme');
  const b = document.getElementById('theme');
  if (b) b.title = 'theme: ' + (t || 'follows the system') + ' (click to change)';
};

PL.cycleTheme = function () {
  let t = null;
  try { t = localStorage.getItem('pl-theme'); } catch (e) { t = null; }
  const sysDark = window.matchMedia && matchMedia('(prefers-color-scheme: dark)').matches;
  const cur = t || (sysDark ? 'dark' : 'light');
  const next = cur === 'dark' ? 'light' : 'dark';
  try { localStorage.setItem('pl-theme', next); } catch (e) { /* private mode */ }
  PL.applyTheme();
  if (PL.view && PL.view.onTheme) PL.view.onTheme();
};

/* ---- start ---- */

PL.start = async function () {
  PL.applyTheme();
  document.getElementById('theme').addEventListener('click', PL.cycleTheme);
  try {
    PL.session = (await PL.api('/api/session')) || PL.session;
  } catch (e) {
    const main = PL.clear(document.getElementById('main'));
    main.appendChild(PL.h('div', { class: 'outcome bad' },
      PL.h('strong', { text: 'The server refused the session: ' }), e.message,
      e.status === 401 || e.status === 403 ? PL.h('p', { text: 'Open the login URL ledger-web printed (/login?token=...).' }) : null));
    return;
  }
  const s = PL.session;
  document.body.classList.toggle('read-only', !!s.read_only);
  document.getElementById('readonly').hidden = !s.read_only;
  const store = typeof s.store === 'string' ? s.store : s.store && s.store.path ? String(s.store.path) : '';
  document.getElementById('store').textContent = store;
  document.getElementById('store').title = store;
  document.getElementById('footer').textContent = 'ledger-web' + (s.version ? ' ' + s.version : '');
  window.addEventListener('hashchange', PL.render);
  PL.render();
  PL.connectEvents();
  PL.refreshInboxCount();
};

document.addEventListener('DOMContentLoaded', PL.start);
