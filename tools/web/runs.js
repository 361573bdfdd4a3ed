/*
 * The runs: counts per status, filters, a dense table paginated by key
 * (the server's cursor), batch actions on the filtered selection, and live
 * updates.
 */
'use strict';

(function () {
  const { h } = PL;
  const FILTERS = ['status', 'policy', 'prefix', 'since', 'until', 'q'];
  const STATUSES = ['running', 'crashed', 'suspended', 'waiting', 'submitted', 'completed', 'failed', 'cancelled', 'superseded'];
  const RANGES = [['', 'any time'], ['15m', 'last 15 min'], ['1h', 'last hour'], ['24h', 'last day'], ['7d', 'last week']];
  /* created before an age ago: until=AGE */
  const OLDER = [['1h', 'older than 1h'], ['24h', 'older than 1d'], ['7d', 'older than 7d'], ['30d', 'older than 30d']];

  /* batchDone: the last batch action's answer or error, shown until
   * dismissed (the list's reloads and filters keep it). */
  const st = {
    main: null, params: null, data: null, cursors: [], filterKey: '',
    tbody: null, counts: null, pager: null, batch: null, outcome: null,
    batchDone: null,
  };

  function drawBatchDone() {
    const box = st.outcome;
    if (!box) return;
    if (!st.batchDone) {
      PL.clear(box);
      box.hidden = true;
      return;
    }
    const { data, err } = st.batchDone;
    PL.outcome(box, data, err);
    const dismiss = h('button', { type: 'button', class: 'ghost small', id: 'batch-dismiss', text: 'Dismiss' });
    dismiss.addEventListener('click', () => { st.batchDone = null; drawBatchDone(); });
    box.classList.add('batch-summary');
    box.appendChild(dismiss);
  }

  /* A batch action: its summary stays until dismissed. */
  async function batchAct(btn, path) {
    btn.disabled = true;
    btn.classList.add('busy');
    try {
      st.batchDone = { data: await PL.api(path, { method: 'POST', body: {} }), err: null };
    } catch (e) {
      st.batchDone = { data: null, err: e };
    } finally {
      btn.disabled = false;
      btn.classList.remove('busy');
    }
    drawBatchDone();
    load(true);
  }

  function filters() {
    const f = {};
    for (const k of FILTERS) {
      const v = st.params.get(k);
      if (v) f[k] = v;
    }
    return f;
  }

  function setParams(f, cursor) {
    const q = new URLSearchParams();
    for (const k of FILTERS) if (f[k]) q.set(k, f[k]);
    if (cursor) q.set('cursor', cursor);
    const s = q.toString();
    location.hash = '#/runs' + (s ? '?' + s : '');
  }

  /* The server takes ages (1h) and UTC times alike. */
  const apiFilters = filters;

  const loader = PL.loader(
    () => PL.api('/api/runs' + PL.query(Object.assign(apiFilters(), { limit: 50, cursor: st.params.get('cursor') || '' }))),
    (d, e, quiet) => {
      if (!st.main) return;
      if (e) {
        if (!quiet) {
          PL.clear(st.tbody).appendChild(h('tr', null,
            h('td', { colspan: 7, class: 'error-cell', text: 'Could not list the runs: ' + e.message })));
        }
        return;
      }
      const old = st.data;
      st.data = d || { runs: [] };
      drawCounts();
      drawRows(old);
      drawPager();
      drawBatch();
    });
  const load = loader.load;

  function countsOf(d) {
    const c = d && d.counts;
    const out = {};
    if (Array.isArray(c)) {
      for (const x of c) if (x && typeof x.status === 'string') out[x.status] = Number(x.count) || 0;
    } else if (c && typeof c === 'object') {
      for (const [k, v] of Object.entries(c)) if (typeof v === 'number') out[k] = v;
    }
    return out;
  }

  function drawCounts() {
    const c = countsOf(st.data);
    const cur = st.params.get('status') || '';
    PL.clear(st.counts);
    let total = typeof st.data.counts_total === 'number' ? st.data.counts_total : typeof c.total === 'number' ? c.total : null;
    if (total === null) {
      total = 0;
      for (const [k, v] of Object.entries(c)) if (k !== 'in_doubt') total += v;
    }
    const chip = (key, label, n) => {
      const a = h('a', {
        class: 'chip' + (cur === key ? ' active' : '') + (key ? ' chip-' + (/^[a-z_]+$/.test(key) ? key : 'other') : ''),
        href: '#/runs' + PL.query(Object.assign(filters(), { status: key })),
        title: key ? 'show only ' + label + ' runs' : 'show every run',
      }, h('span', { class: 'chip-label', text: label }), h('span', { class: 'chip-n', text: PL.compact(n) }));
      a.dataset.status = key || 'all';
      a.dataset.n = String(n);
      if (!n && key) a.classList.add('zero');
      if (key && n > 0 && (key === 'crashed' || key === 'in_doubt' || key === 'failed' || key === 'damaged')) a.classList.add('hot');
      return a;
    };
    st.counts.appendChild(chip('', 'all', total));
    const keys = STATUSES.filter((k) => k in c).concat(Object.keys(c).filter((k) => !STATUSES.includes(k) && k !== 'total'));
    /* damaged: run records that cannot be read, shown when there are */
    for (const k of keys) if (k !== 'damaged' || c[k] > 0) st.counts.appendChild(chip(k, k.replace(/_/g, ' '), c[k]));
  }

  /* A run whose record cannot be read: its id and why, nothing else known. */
  function damagedRow(r) {
    const id = String(r.id);
    const tr = h('tr', { class: 'run-row is-damaged' },
      h('td', null, PL.badge('damaged')),
      h('td', { class: 'mono id' }, h('a', { href: PL.runHref(id), title: id, text: PL.preview(id, 80) })),
      h('td', { colspan: 5, class: 'damaged-why', text: PL.preview(String(r.damaged), 300) }));
    tr.dataset.id = id;
    tr.dataset.status = 'damaged';
    return tr;
  }

  function row(r, changed) {
    if (r.state === 'damaged') return damagedRow(r);
    const status = PL.statusOf(r);
    const tok = PL.tokens(r.tokens);
    const id = String(r.id);
    const tr = h('tr', { class: 'run-row' + (status === 'crashed' ? ' is-crashed' : '') + (r.in_doubt ? ' is-doubt' : '') + (changed ? ' flash' : '') },
      h('td', null, PL.badge(status), r.in_doubt ? h('span', { class: 'badge st-in_doubt', text: 'in doubt', title: 'a call has no recorded result' }) : null),
      h('td', { class: 'mono id' }, h('a', { href: PL.runHref(id), title: id, text: PL.preview(id, 80) })),
      h('td', { class: 'mono', text: PL.preview(r.root_policy !== undefined ? r.root_policy : r.policy, 60) }),
      h('td', { class: 'num', text: PL.num(r.steps) }),
      h('td', { class: 'num', title: tok.title, text: tok.total ? PL.compact(tok.total) : '' }),
      h('td', null, PL.timeCell(r.created, r.created_us)),
      h('td', null, PL.timeCell(r.updated, r.updated_us, true)));
    tr.dataset.id = id;
    tr.dataset.status = status;
    return tr;
  }

  function drawRows(old) {
    const runs = (st.data && Array.isArray(st.data.runs)) ? st.data.runs : [];
    const before = new Map();
    if (old && Array.isArray(old.runs)) for (const r of old.runs) before.set(r.id, PL.statusOf(r) + '/' + r.steps);
    PL.clear(st.tbody);
    if (!runs.length) {
      st.tbody.appendChild(h('tr', null, h('td', { colspan: 7, class: 'empty', text: 'No run matches.' })));
      return;
    }
    for (const r of runs) {
      if (!r || typeof r !== 'object') continue;
      const changed = old && before.get(r.id) !== PL.statusOf(r) + '/' + r.steps;
      st.tbody.appendChild(row(r, changed));
    }
  }

  function drawPager() {
    PL.clear(st.pager);
    const cursor = st.params.get('cursor') || '';
    const next = st.data && st.data.next_cursor;
    const n = st.data && Array.isArray(st.data.runs) ? st.data.runs.length : 0;
    const prev = h('button', { type: 'button', id: 'prev', text: '‹ Prev', disabled: !cursor });
    prev.addEventListener('click', () => {
      st.cursors.pop();
      setParams(filters(), st.cursors.length ? st.cursors[st.cursors.length - 1] : '');
    });
    const nx = h('button', { type: 'button', id: 'next', text: 'Next ›', disabled: !next });
    nx.addEventListener('click', () => {
      st.cursors.push(String(next));
      setParams(filters(), String(next));
    });
    const page = st.cursors.length + 1;
    st.pager.append(prev, h('span', { class: 'muted', id: 'page', text: 'page ' + page + ' · ' + n + ' run' + (n === 1 ? '' : 's') }), nx);
    /* a page cut by what one request reads (records, or a search's steps) */
    if (st.data && st.data.truncated && next) {
      const s = st.data.search;
      const what = s && typeof s === 'object' ? PL.num(s.runs) + ' runs\u2019 steps searched' : PL.num(st.data.scanned) + ' runs read';
      st.pager.appendChild(h('span', { class: 'muted', id: 'truncated', text: what + ' \u00b7 Next reads on' }));
    }
  }

  function drawBatch() {
    PL.clear(st.batch);
    if (PL.session.read_only) return;
    const c = countsOf(st.data);
    const crashed = c.crashed || 0;
    const f = apiFilters();
    const filtered = Object.keys(f).length > 0;
    const cont = PL.confirmButton('Continue crashed (' + PL.compact(crashed) + ')',
      () => 'Continue every crashed run that matches the filter?', 'primary', (btn) => {
        batchAct(btn, '/api/batch/continue' + PL.query(Object.assign({}, f, { status: 'crashed' })));
      });
    cont.querySelector('button').disabled = crashed === 0;
    cont.querySelector('button').id = 'batch-continue';
    st.batch.appendChild(cont);
    if (PL.can('cancel')) {
      const cancel = PL.confirmButton('Cancel…', () => 'Cancel every unfinished run that matches the filter?', 'danger-outline', (btn) => {
        batchAct(btn, '/api/batch/cancel' + PL.query(f));
      });
      const b = cancel.querySelector('button');
      b.id = 'batch-cancel';
      b.disabled = !filtered;
      b.title = filtered ? 'cancel the unfinished runs the filter holds' : 'choose a filter first: a cancel never takes every run';
      st.batch.appendChild(cancel);
    }
    if (PL.can('batch_delete')) {
      /* the runs it would delete are asked first (a dry run), and named */
      const q = Object.assign({}, f, { limit: 100 });
      const del = PL.confirmButton('Delete…', () =>
        PL.api('/api/batch/delete' + PL.query(Object.assign({ dry_run: 1 }, q)), { method: 'POST', body: {} }).then(deleteQuestion),
      'danger-outline', (btn) => batchAct(btn, '/api/batch/delete' + PL.query(q)));
      const b = del.querySelector('button');
      b.id = 'batch-delete';
      b.disabled = !filtered;
      b.title = filtered ? 'delete the ended runs the filter holds, 100 at a time (names them first)'
        : 'choose a filter first (a status, an age, ...): a delete never takes every run';
      st.batch.appendChild(del);
    }
  }

  /* What a batch delete's dry run found, as the question asked. */
  function deleteQuestion(d) {
    const runs = d && Array.isArray(d.runs) ? d.runs.filter((r) => r && typeof r === 'object') : [];
    if (!runs.length) return null;
    const named = runs.slice(0, 3).map((r) => PL.preview(String(r.run_id), 40) + ' (' + String(r.state) + ')');
    return 'Delete ' + (d.truncated ? 'the first ' : '') + runs.length + ' ended run' + (runs.length === 1 ? '' : 's') +
      ' for good: ' + named.join(', ') + (runs.length > 3 ? ' and ' + (runs.length - 3) + ' more' : '') +
      (d.truncated ? ' (more may match: delete again)' : '') + '? Their records and steps go; a tombstone keeps each id.';
  }

  function filterForm() {
    const f = filters();
    const status = h('select', { name: 'status', 'aria-label': 'status' }, h('option', { value: '', text: 'any status' }),
      STATUSES.map((s) => h('option', { value: s, text: s, selected: f.status === s })));
    if (f.status && !STATUSES.includes(f.status)) status.appendChild(h('option', { value: f.status, text: f.status, selected: true }));
    const policy = h('input', { name: 'policy', placeholder: 'root policy', value: f.policy || '', size: 12, 'aria-label': 'root policy', list: 'policies' });
    const names = Array.isArray(PL.session.policies) ? PL.session.policies.filter((p) => typeof p === 'string') : [];
    const datalist = h('datalist', { id: 'policies' }, names.slice(0, 500).map((p) => h('option', { value: p })));
    const prefix = h('input', { name: 'prefix', placeholder: 'run id prefix', value: f.prefix || '', size: 14, class: 'mono', 'aria-label': 'run id prefix' });
    const q = h('input', { name: 'q', type: 'search', placeholder: 'search payloads', value: f.q || '', size: 15, 'aria-label': 'search text' });
    const older = !f.since && OLDER.some(([v]) => v === f.until);
    const range = h('select', { name: 'range', 'aria-label': 'time range' },
      RANGES.map(([v, t]) => h('option', { value: v, text: t, selected: !f.until && (f.since || '') === v })),
      OLDER.map(([v, t]) => h('option', { value: '<' + v, text: t, selected: older && f.until === v })),
      h('option', { value: 'custom', text: 'between…', selected: !older && (!!(f.since && !RANGES.some(([v]) => v === f.since)) || !!f.until) }));
    const toLocal = (v) => {
      const d = v && !/^\d+[mhd]$/.test(v) ? PL.toDate(v) : null;
      return d ? new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16) : '';
    };
    const since = h('input', { name: 'since', type: 'datetime-local', value: toLocal(f.since), 'aria-label': 'since' });
    const until = h('input', { name: 'until', type: 'datetime-local', value: toLocal(f.until), 'aria-label': 'until' });
    const custom = h('span', { class: 'custom-range' }, since, '–', until);
    custom.hidden = range.value !== 'custom';
    const clear = h('button', { type: 'button', class: 'ghost', text: 'Clear' });
    const form = h('form', { class: 'filters', id: 'filters', autocomplete: 'off' },
      status, policy, datalist, prefix, q, range, custom, h('button', { type: 'submit', text: 'Apply' }), clear);
    const apply = () => {
      const nf = {
        status: status.value, policy: policy.value.trim(), prefix: prefix.value.trim(), q: q.value.trim(),
      };
      if (range.value === 'custom') {
        if (since.value) nf.since = new Date(since.value).toISOString().replace(/\.\d+Z$/, 'Z');
        if (until.value) nf.until = new Date(until.value).toISOString().replace(/\.\d+Z$/, 'Z');
      } else if (range.value.startsWith('<')) nf.until = range.value.slice(1);
      else if (range.value) nf.since = range.value;
      st.cursors = [];
      setParams(nf, '');
    };
    form.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
    status.addEventListener('change', apply);
    range.addEventListener('change', () => {
      custom.hidden = range.value !== 'custom';
      if (range.value !== 'custom') apply();
    });
    clear.addEventListener('click', () => { st.cursors = []; setParams({}, ''); });
    return form;
  }

  PL.can = function (action) {
    const s = PL.session;
    if (s.read_only) return false;
    const a = s.actions;
    if (Array.isArray(a)) return a.includes(action);
    if (a && typeof a === 'object') return !!a[action];
    return ['continue', 'fork', 'check', 'verify', 'answer'].includes(action);
  };

  const refresh = PL.throttle(() => load(true), 1000);

  PL.views.runs = {
    enter(main, r) {
      st.main = main;
      st.params = r.params;
      const key = FILTERS.map((k) => r.params.get(k) || '').join('\u0000');
      if (key !== st.filterKey) { st.filterKey = key; st.cursors = []; }
      const cur = r.params.get('cursor') || '';
      if (!cur) st.cursors = [];
      else if (st.cursors[st.cursors.length - 1] !== cur) st.cursors = st.cursors.filter((c) => c !== cur).concat([cur]);
      st.data = null;
      loader.reset();
      st.counts = h('div', { class: 'counts', id: 'counts' });
      st.tbody = h('tbody', { id: 'runs-body' }, h('tr', null, h('td', { colspan: 7, class: 'empty', text: 'Loading…' })));
      st.pager = h('div', { class: 'pager', id: 'pager' });
      st.batch = h('div', { class: 'batch', id: 'batch' });
      st.outcome = h('div', { class: 'outcome', id: 'batch-outcome', hidden: true });
      main.append(
        h('div', { class: 'page-head' }, h('h1', { text: 'Runs' }), st.counts),
        h('div', { class: 'toolbar' }, filterForm(), st.batch),
        st.outcome,
        h('div', { class: 'table-wrap' }, h('table', { class: 'runs', id: 'runs' },
          h('thead', null, h('tr', null, ['Status', 'Run', 'Root policy', 'Steps', 'Tokens', 'Created', 'Updated'].map((t, i) =>
            h('th', { class: i === 3 || i === 4 ? 'num' : null, text: t })))),
          st.tbody)),
        st.pager);
      drawBatchDone();
      load(false);
    },
    onEvent() {
      /* New runs appear on the first page; a visible run's row changes. */
      refresh();
    },
    leave() { st.main = null; },
  };
})();
