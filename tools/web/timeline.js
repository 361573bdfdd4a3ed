/*
 * A run's timeline: a Gantt chart (SVG) of its calls by start and
 * duration, nested by invocation; model calls show their tokens.  It draws
 * the server's /timeline when there is one, else what the steps tell.
 */
'use strict';

(function () {
  const { svg, h } = PL;
  const ROW = 20, LABEL = 230, MAX_ROWS = 400;

  const num = (v) => (typeof v === 'number' && isFinite(v) ? v : null);

  function usOf(x, keys) {
    for (const k of keys) {
      const v = x[k];
      if (num(v) !== null) return v > 1e14 ? v : v > 1e11 ? v * 1000 : v;
      if (typeof v === 'string' && v) {
        const d = Date.parse(v);
        if (isNaN(d)) continue;
        const m = /\.(\d+)Z$/.exec(v);
        return m ? Math.floor(d / 1000) * 1e6 + Number((m[1] + '000000').slice(0, 6)) : d * 1000;
      }
    }
    return null;
  }

  function tokensOf(t) {
    if (num(t) !== null) return { input: null, output: null, total: t };
    if (t && typeof t === 'object') {
      const i = num(t.input) || 0, o = num(t.output) || 0;
      return { input: i, output: o, total: i + o };
    }
    return null;
  }

  /* The server's timeline as rows {label, depth, start, end, kind, status, tokens}. */
  function fromServer(t) {
    const list = Array.isArray(t) ? t : t && (Array.isArray(t.calls) ? t.calls : Array.isArray(t.spans) ? t.spans : Array.isArray(t.timeline) ? t.timeline : null);
    if (!list || !list.length) return null;
    const rows = [];
    for (const c of list) {
      if (!c || typeof c !== 'object') continue;
      const start = usOf(c, ['start_us', 'start']);
      if (start === null) continue;
      let end = usOf(c, ['end_us', 'end']);
      const d = num(c.duration_us);
      if (end === null && d !== null) end = start + d;
      const state = String(c.state || c.status || c.mark || '');
      if (end === null && state !== 'running' && num(t.end_us) !== null) end = t.end_us;
      const path = typeof c.callee_path === 'string' ? c.callee_path : typeof c.path === 'string' ? c.path : '';
      const kind = c.kind === 'model' || c.model || c.type === 'model' ? 'model' : 'call';
      rows.push({
        label: String(c.policy || c.name || c.actor || c.model || '?'),
        path,
        depth: num(c.depth) !== null ? c.depth : path ? path.split('.').length - 1 : 0,
        start, end, kind,
        model: typeof c.model === 'string' ? c.model : null,
        status: String(c.state || c.status || c.mark || (end === null ? 'open' : 'ok')).replace(/^running$/, 'open'),
        tokens: num(c.tokens_in) !== null ? tokensOf({ input: c.tokens_in, output: c.tokens_out }) : tokensOf(c.tokens !== undefined ? c.tokens : c.usage),
      });
    }
    return rows.length ? rows : null;
  }

  /* Rows from the steps: each call from its action_call to its result in
   * the caller's ledger, in tree order; each model exchange (a
   * side_effect named llm_exchange) from the step before it. */
  function fromSteps(steps, run) {
    const paths = PL.byPath(steps);
    const rows = [];
    const tOf = (s) => usOf(s, ['time_us', 'time']);
    const runEnd = usOf(run, ['updated_us', 'updated']);
    const live = run.status === 'running' && !run.crashed;
    const walk = (path, depth, since) => {
      const list = paths.get(path) || [];
      const used = new Set();
      for (let i = 0; i < list.length; i++) {
        const s = list[i];
        if (s.type === 'action_call') {
          /* its result: the first one after it from the policy it called
           * (calls made together have their results in turn) */
          const callee = s.payload && typeof s.payload === 'object' ? s.payload.policy : null;
          let res = null;
          for (let j = i + 1; j < list.length && !res; j++) {
            const x = list[j];
            if (!used.has(j) && (x.type === 'action_result' || x.type === 'error') && (x.actor === callee || x.actor === s.actor || !callee)) {
              res = x;
              used.add(j);
            }
          }
          const start = tOf(s);
          const end = res ? tOf(res) : null;
          const pol = s.payload && typeof s.payload === 'object' && typeof s.payload.policy === 'string' ? s.payload.policy : String(s.actor || '?');
          let status = 'ok';
          if (s.mark === 'in_doubt') status = 'in_doubt';
          else if (s.mark === 'waiting' || s.mark === 'suspended') status = 'waiting';
          else if (!res) status = 'open';
          else if (res.mark === 'error') status = 'error';
          const child = path + '.' + s.seq;
          const human = (paths.get(child) || []).some((x) => x.type === 'suspend');
          if (start !== null && rows.length < MAX_ROWS * 4) {
            rows.push({ label: pol, path: child, depth, start, end: end !== null ? end : live ? null : runEnd, kind: human ? 'human' : 'call', status, tokens: null });
          }
          if (paths.has(child)) walk(child, depth + 1, start);
        } else if (s.type === 'side_effect' && s.payload && s.payload.name === 'llm_exchange') {
          const v = s.payload.value && typeof s.payload.value === 'object' ? s.payload.value : {};
          const end = tOf(s);
          const before = i > 0 ? tOf(list[i - 1]) : null;
          const u = v.usage && typeof v.usage === 'object' ? v.usage : null;
          rows.push({
            label: 'model' + (typeof v.model === 'string' ? ' ' + v.model : ''), path: path + ':' + s.seq, depth,
            start: before !== null ? before : since !== null ? since : end, end, kind: 'model',
            status: num(v.status) !== null && v.status >= 400 ? 'error' : 'ok',
            tokens: u ? tokensOf(u) : null,
          });
        }
      }
    };
    const root = paths.has('0') ? '0' : [...paths.keys()].sort((a, b) => a.length - b.length)[0];
    if (root !== undefined) walk(root, 0, usOf(run, ['created_us', 'created']));
    return rows;
  }

  function niceStep(span, n) {
    const raw = span / n;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  PL.timeline = function (server, steps, run) {
    /* what the steps tell (with the model exchanges), else the server's calls */
    let rows = fromSteps(steps, run);
    const cut = !rows.length && server && server.truncated === true;
    if (!rows.length) rows = fromServer(server) || [];
    const wrap = h('div', { class: 'timeline', id: 'timeline' });
    if (!rows.length) {
      wrap.appendChild(h('p', { class: 'empty', text: 'No call yet.' }));
      return wrap;
    }
    const more = rows.length - MAX_ROWS;
    rows = rows.slice(0, MAX_ROWS);
    let t0 = Infinity, t1 = -Infinity;
    for (const r of rows) {
      t0 = Math.min(t0, r.start);
      t1 = Math.max(t1, r.end !== null ? r.end : r.start);
    }
    const open = rows.some((r) => r.end === null);
    if (open) t1 = Math.max(t1, Date.now() * 1000);
    const span = Math.max(t1 - t0, 1000);
    const main = document.getElementById('main');
    const width = Math.max(640, Math.min(1600, (main ? main.clientWidth : 1000) - 40));
    const plot = width - LABEL - 90;
    const x = (t) => LABEL + ((t - t0) / span) * plot;
    const height = rows.length * ROW + 26;
    const g = svg('svg', { class: 'gantt', width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img', 'aria-label': 'timeline of the run\'s calls' });
    const step = niceStep(span, 6);
    for (let t = 0; t <= span + 1; t += step) {
      const xx = x(t0 + t);
      g.appendChild(svg('line', { class: 'grid', x1: xx, x2: xx, y1: 18, y2: height }));
      g.appendChild(svg('text', { class: 'axis', x: xx, y: 12, 'text-anchor': 'middle', text: t === 0 ? '0' : '+' + PL.dur(t) }));
    }
    rows.forEach((r, i) => {
      const y = 22 + i * ROW;
      const grp = svg('g', { class: 'gantt-row k-' + r.kind + ' s-' + (/^[a-z_]+$/.test(r.status) ? r.status : 'other') });
      if (i % 2) grp.appendChild(svg('rect', { class: 'zebra', x: 0, y: y - 2, width, height: ROW }));
      const label = (r.kind === 'model' ? '◆ ' : '') + r.label;
      grp.appendChild(svg('text', { class: 'lbl', x: 6 + Math.min(r.depth, 12) * 12, y: y + 11, text: label.length > 30 ? label.slice(0, 29) + '…' : label }));
      const xs = x(r.start);
      const xe = r.end !== null ? x(r.end) : x(t1);
      const bw = Math.max(2, xe - xs);
      const dur = r.end !== null ? r.end - r.start : null;
      const tip = r.label + ' · ' + (r.path ? r.path + ' · ' : '') + (dur !== null ? PL.dur(dur) : 'no result yet') +
        (r.status !== 'ok' ? ' · ' + r.status.replace(/_/g, ' ') : '') +
        (r.tokens ? ' · ' + (r.tokens.input !== null ? r.tokens.input + ' in, ' + r.tokens.output + ' out' : r.tokens.total + ' tokens') : '');
      grp.appendChild(svg('rect', { class: 'bar', x: xs, y: y + 1, width: bw, height: ROW - 6, rx: 2 }, svg('title', { text: tip })));
      let note = r.status === 'in_doubt' ? 'in doubt' : r.status === 'waiting' ? 'waiting' : dur !== null ? PL.dur(dur) : '…';
      if (r.tokens) note += ' · ' + PL.compact(r.tokens.total) + ' tok';
      grp.appendChild(svg('text', { class: 'note', x: Math.min(xs + bw + 4, width - 4), y: y + 11, 'text-anchor': xs + bw + 4 > width - 80 ? 'end' : 'start', text: note }));
      g.appendChild(grp);
    });
    wrap.appendChild(g);
    const models = rows.filter((r) => r.kind === 'model' && r.tokens);
    const sum = models.reduce((a, r) => a + r.tokens.total, 0);
    wrap.appendChild(h('p', { class: 'muted small' },
      rows.length + ' call' + (rows.length === 1 ? '' : 's') + ' over ' + PL.dur(span) +
      (models.length ? ' · ' + models.length + ' model call' + (models.length === 1 ? '' : 's') + ', ' + PL.num(sum) + ' tokens' : '') +
      (more > 0 ? ' · ' + more + ' more not drawn' : '') +
      (cut ? ' · from the run\'s first ' + PL.num(server.steps_read) + ' steps' : '')));
    return wrap;
  };
})();
