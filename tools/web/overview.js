/*
 * The overview: runs per minute by final status, p50/p95 call latency per
 * policy, model tokens per model over time, and the runs waiting longest.
 * The charts are hand-written SVG.
 */
'use strict';

(function () {
  const { h, svg } = PL;
  const st = { main: null, body: null, window: 'hour', data: null };
  const FINAL = ['completed', 'failed', 'cancelled', 'diverged'];
  const SERIES = 8;

  const num = (v) => (typeof v === 'number' && isFinite(v) ? v : null);
  const arr = (v) => (Array.isArray(v) ? v.filter((x) => x && typeof x === 'object') : []);

  function tOf(p) {
    for (const k of ['t_us', 'minute_us', 'start_us', 'bucket_us']) if (num(p[k]) !== null) return new Date(p[k] / 1000);
    for (const k of ['t', 'minute', 'time', 'start', 'bucket', 'at']) if (p[k] !== undefined) {
      const d = PL.toDate(p[k]);
      if (d) return d;
    }
    return null;
  }

  /* [{t, counts: {status: n}}] from the shapes the server may give. */
  function throughput(d) {
    const src = arr(d.buckets || d.runs_per_minute || d.throughput);
    const by = new Map();
    for (const p of src) {
      const t = tOf(p);
      if (!t) continue;
      const key = t.getTime();
      if (!by.has(key)) by.set(key, { t, counts: {} });
      const c = by.get(key).counts;
      if (p.counts && typeof p.counts === 'object') {
        for (const [k, v] of Object.entries(p.counts)) if (num(v) !== null) c[k] = (c[k] || 0) + v;
      } else if (typeof p.status === 'string' && num(p.count) !== null) {
        c[p.status] = (c[p.status] || 0) + p.count;
      } else {
        for (const [k, v] of Object.entries(p)) if (num(v) !== null && !/(^t$|_us$|minute|time|start|bucket)/.test(k)) c[k] = (c[k] || 0) + v;
      }
    }
    return [...by.values()].sort((a, b) => a.t - b.t);
  }

  function latency(d) {
    const src = arr(d.latency || d.latency_per_policy || d.policies);
    const ms = (p, k) => (num(p[k + '_us']) !== null ? p[k + '_us'] : num(p[k + '_ms']) !== null ? p[k + '_ms'] * 1000 : num(p[k]) !== null ? p[k] : null);
    return src.map((p) => ({ policy: String(p.policy || p.name || '?'), p50: ms(p, 'p50'), p95: ms(p, 'p95'), calls: num(p.calls !== undefined ? p.calls : p.count) }))
      .filter((p) => p.p50 !== null || p.p95 !== null);
  }

  /* {model: [{t, tokens}]} */
  function tokenSeries(d) {
    const src = d.tokens_per_model || d.tokens || d.models;
    const out = new Map();
    const add = (model, p) => {
      const t = tOf(p);
      if (!t) return;
      const v = num(p.tokens) !== null ? p.tokens : (num(p.input) || 0) + (num(p.output) || 0);
      if (!out.has(model)) out.set(model, []);
      out.get(model).push({ t, v });
    };
    if (Array.isArray(src)) {
      for (const x of arr(src)) {
        const model = String(x.model || x.name || '?');
        if (Array.isArray(x.input) && num(d.from_us) !== null && num(d.bucket_us) !== null) {
          /* per bucket of the window: input[k] and output[k] */
          x.input.forEach((v, k) => {
            const o = Array.isArray(x.output) ? num(x.output[k]) || 0 : 0;
            add(model, { t_us: d.from_us + k * d.bucket_us, tokens: (num(v) || 0) + o });
          });
        } else if (Array.isArray(x.points || x.series)) for (const p of arr(x.points || x.series)) add(model, p);
        else add(model, x);
      }
    } else if (src && typeof src === 'object') {
      for (const [m, pts] of Object.entries(src)) for (const p of arr(pts)) add(m, p);
    }
    for (const l of out.values()) l.sort((a, b) => a.t - b.t);
    return out;
  }

  function waiting(d) {
    return arr(d.waiting || d.oldest_waiting).slice(0, 20);
  }

  const width = () => {
    const m = document.getElementById('main');
    return Math.max(320, Math.min(760, ((m ? m.clientWidth : 1000) - 64) / 2));
  };

  function axisLabel(d) {
    return PL.fmtTime(d).replace(/:\d\d$/, '');
  }

  function empty(text) { return h('p', { class: 'empty', text }); }

  function barChart(series) {
    if (!series.length) return empty('No run finished in this window.');
    const W = width(), H = 190, L = 34, B = 20, T = 8;
    const statuses = [];
    for (const p of series) for (const k of Object.keys(p.counts)) if (!statuses.includes(k)) statuses.push(k);
    statuses.sort((a, b) => (FINAL.indexOf(a) + 99 * (FINAL.indexOf(a) < 0)) - (FINAL.indexOf(b) + 99 * (FINAL.indexOf(b) < 0)));
    const t0 = series[0].t.getTime(), t1 = series[series.length - 1].t.getTime();
    const step = series.length > 1 ? Math.min(...series.slice(1).map((p, i) => p.t - series[i].t).filter((x) => x > 0)) || 60000 : 60000;
    const slots = Math.max(1, Math.round((t1 - t0) / step) + 1);
    const bw = Math.max(1, (W - L - 4) / slots);
    const max = Math.max(1, ...series.map((p) => Object.values(p.counts).reduce((a, b) => a + b, 0)));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const g = svg('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'runs per minute by final status' });
    for (const v of [0, max / 2, max]) {
      g.append(svg('line', { class: 'grid', x1: L, x2: W, y1: y(v), y2: y(v) }),
        svg('text', { class: 'axis', x: L - 4, y: y(v) + 3, 'text-anchor': 'end', text: PL.compact(Math.round(v)) }));
    }
    for (const p of series) {
      const x = L + ((p.t - t0) / step) * bw;
      let acc = 0;
      for (const s of statuses) {
        const v = p.counts[s] || 0;
        if (!v) continue;
        g.appendChild(svg('rect', { class: 'seg st-fill-' + (/^[a-z_]+$/.test(s) ? s : 'other'), x: x + 0.5, y: y(acc + v), width: Math.max(1, bw - 1), height: Math.max(0.5, y(acc) - y(acc + v)) },
          svg('title', { text: axisLabel(p.t) + ' · ' + s + ': ' + v })));
        acc += v;
      }
    }
    g.append(svg('text', { class: 'axis', x: L, y: H - 4, text: axisLabel(series[0].t) }),
      svg('text', { class: 'axis', x: W - 2, y: H - 4, 'text-anchor': 'end', text: axisLabel(series[series.length - 1].t) }));
    const legend = h('div', { class: 'legend' }, statuses.map((s) => h('span', { class: 'key' }, h('i', { class: 'sw st-bg-' + (/^[a-z_]+$/.test(s) ? s : 'other') }), s)));
    return [g, legend];
  }

  function latencyChart(rows) {
    if (!rows.length) return empty('No call in this window.');
    rows = rows.slice().sort((a, b) => (b.p95 || b.p50) - (a.p95 || a.p50)).slice(0, 14);
    const W = width(), R = 22, L = 130, H = rows.length * R + 24;
    const max = Math.max(1, ...rows.map((r) => Math.max(r.p50 || 0, r.p95 || 0)));
    const x = (v) => L + (W - L - 150) * (v / max);
    const g = svg('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'call latency per policy' });
    rows.forEach((r, i) => {
      const y = 4 + i * R;
      const name = r.policy.length > 20 ? r.policy.slice(0, 19) + '…' : r.policy;
      g.appendChild(svg('text', { class: 'lbl', x: L - 6, y: y + 13, 'text-anchor': 'end', text: name }, svg('title', { text: r.policy })));
      if (r.p95 !== null) g.appendChild(svg('rect', { class: 'p95', x: L, y: y + 2, width: Math.max(1, x(r.p95) - L), height: R - 8, rx: 2 }, svg('title', { text: r.policy + ' p95 ' + PL.dur(r.p95) })));
      if (r.p50 !== null) g.appendChild(svg('rect', { class: 'p50', x: L, y: y + 5, width: Math.max(1, x(r.p50) - L), height: R - 14, rx: 1 }, svg('title', { text: r.policy + ' p50 ' + PL.dur(r.p50) })));
      g.appendChild(svg('text', { class: 'note', x: x(Math.max(r.p50 || 0, r.p95 || 0)) + 4, y: y + 13, text: PL.dur(r.p50) + ' / ' + PL.dur(r.p95) + (r.calls !== null ? ' · ' + PL.compact(r.calls) : '') }));
    });
    return [g, h('div', { class: 'legend' }, h('span', { class: 'key' }, h('i', { class: 'sw p50' }), 'p50'), h('span', { class: 'key' }, h('i', { class: 'sw p95' }), 'p95'), h('span', { class: 'muted', text: 'duration · calls' }))];
  }

  function tokenChart(series) {
    if (!series.size) return empty('No model call in this window.');
    const W = width(), H = 190, L = 44, B = 20, T = 8;
    const models = [...series.keys()].slice(0, SERIES);
    let t0 = Infinity, t1 = -Infinity, max = 1;
    for (const m of models) for (const p of series.get(m)) { t0 = Math.min(t0, p.t); t1 = Math.max(t1, p.t); max = Math.max(max, p.v); }
    const span = Math.max(1, t1 - t0);
    const x = (t) => L + (W - L - 8) * ((t - t0) / span);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const g = svg('svg', { class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'model tokens per model over time' });
    for (const v of [0, max / 2, max]) {
      g.append(svg('line', { class: 'grid', x1: L, x2: W, y1: y(v), y2: y(v) }),
        svg('text', { class: 'axis', x: L - 4, y: y(v) + 3, 'text-anchor': 'end', text: PL.compact(Math.round(v)) }));
    }
    models.forEach((m, i) => {
      const pts = series.get(m);
      const d = pts.map((p, j) => (j ? 'L' : 'M') + x(p.t).toFixed(1) + ' ' + y(p.v).toFixed(1)).join(' ');
      g.appendChild(svg('path', { class: 'line c' + i, d }));
      for (const p of pts.filter((q) => q.v > 0)) g.appendChild(svg('circle', { class: 'dot c' + i, cx: x(p.t), cy: y(p.v), r: 2.5 }, svg('title', { text: m + ' · ' + axisLabel(p.t) + ' · ' + PL.num(p.v) + ' tokens' })));
    });
    g.append(svg('text', { class: 'axis', x: L, y: H - 4, text: axisLabel(new Date(t0)) }),
      svg('text', { class: 'axis', x: W - 2, y: H - 4, 'text-anchor': 'end', text: axisLabel(new Date(t1)) }));
    const totals = models.map((m) => series.get(m).reduce((a, p) => a + p.v, 0));
    return [g, h('div', { class: 'legend' }, models.map((m, i) => h('span', { class: 'key' }, h('i', { class: 'sw c' + i }), PL.preview(m, 40) + ' · ' + PL.compact(totals[i]))))];
  }

  function waitingTable(rows) {
    if (!rows.length) return empty('No run is waiting or suspended.');
    return h('table', { class: 'runs compact' },
      h('thead', null, h('tr', null, ['Status', 'Run', 'Policy', 'Waiting'].map((t) => h('th', { text: t })))),
      h('tbody', null, rows.map((r) => {
        const since = PL.toDate(r.since || r.updated || r.waiting_since, r.since_us || r.updated_us);
        return h('tr', null, h('td', null, PL.badge(r.state || r.status ? PL.statusOf(r) : 'suspended')),
          h('td', { class: 'mono id' }, h('a', { href: PL.runHref(String(r.id)), text: PL.preview(String(r.id), 60) })),
          h('td', { class: 'mono', text: PL.preview(r.root_policy || r.policy || '', 40) }),
          h('td', { title: since ? since.toISOString() : '', text: since ? PL.ago(since).replace(/ ago$/, '') : '–' }));
      })));
  }

  /* The run records that cannot be read, when there are. */
  function damagedAlert(d) {
    const rows = arr(d.damaged).filter((r) => r && typeof r === 'object');
    if (!rows.length) return null;
    const n = typeof d.damaged_total === 'number' ? d.damaged_total : rows.length;
    return h('div', { class: 'outcome bad overview-damaged', id: 'overview-damaged' },
      h('strong', { text: n + ' run record' + (n === 1 ? '' : 's') + ' cannot be read (damaged): ' }),
      rows.map((r) => h('div', null, h('a', { class: 'mono', href: PL.runHref(String(r.id)), text: PL.preview(String(r.id), 80) }),
        ' ', PL.preview(String(r.damaged), 300))));
  }

  function panel(title, sub, body) {
    return h('section', { class: 'panel chart-panel' }, h('div', { class: 'panel-head' }, h('h2', { text: title }), sub ? h('span', { class: 'muted small', text: sub }) : null), body);
  }

  function draw() {
    if (!st.body) return;
    const d = st.data || {};
    const damaged = damagedAlert(d);
    PL.clear(st.body);
    if (damaged) st.body.appendChild(damaged);
    st.body.append(
      panel('Runs per minute', 'by final status', barChart(throughput(d))),
      panel('Call latency', 'p50 / p95 per policy', latencyChart(latency(d))),
      panel('Model tokens', 'per model over time', tokenChart(tokenSeries(d))),
      panel('Waiting longest', 'suspended or waiting runs, oldest first', waitingTable(waiting(d))));
  }

  const loader = PL.loader(() => PL.api('/api/overview' + PL.query({ window: st.window })), (d, e) => {
    if (!st.body) return;
    if (e) {
      PL.clear(st.body).appendChild(h('div', { class: 'outcome bad', text: 'Could not read the overview: ' + e.message }));
      return;
    }
    st.data = d;
    draw();
  });
  const load = loader.load;

  const refresh = PL.throttle(load, 5000);

  PL.views.overview = {
    enter(main, r) {
      st.main = main;
      loader.reset();
      st.window = r.params.get('window') === 'day' ? 'day' : 'hour';
      const seg = h('div', { class: 'seg-ctl', role: 'group', 'aria-label': 'window' },
        [['hour', 'Last hour'], ['day', 'Last day']].map(([v, t]) => h('a', { class: 'seg-btn' + (st.window === v ? ' active' : ''), href: '#/overview?window=' + v, text: t })));
      st.body = h('div', { class: 'grid2', id: 'overview' }, h('p', { class: 'muted', text: 'Loading…' }));
      main.append(h('div', { class: 'page-head' }, h('h1', { text: 'Overview' }), seg), st.body);
      load();
    },
    onEvent() { refresh(); },
    onTheme() { draw(); },
    leave() { st.main = null; st.body = null; },
  };
})();
