/*
 * A run: its header, actions (continue, fork, check, verify, answer,
 * export), its timeline and the tree of its invocations with every step.
 * It grows live while the run runs.
 */
'use strict';

(function () {
  const { h } = PL;
  /* pages: the pages of steps read so far, each {cursor, steps, next};
   * whole: payloads fetched whole, by step id. */
  const st = {
    id: null, main: null, data: null, timeline: null, open: new Set(), shut: new Set(), outcome: null,
    pages: [], whole: new Map(), moreBusy: false, observer: null,
  };

  const MARKS = {
    in_doubt: 'in doubt: no result recorded',
    waiting: 'waiting for an answer',
    error: 'error result',
    suspended: 'suspended here',
    diverged: 'diverged',
    divergence: 'diverged',
  };

  /* the statuses of runs that have ended for good: those a delete takes */
  const ENDED = ['completed', 'failed', 'cancelled', 'superseded', 'continued'];

  function runOf(d) { return (d && (d.run || d)) || {}; }

  /* Steps, flat with their invocation path (as ledger-dump --format json
   * gives them), from the answer's steps or its tree of invocations. */
  function stepsOf(d) {
    if (!d) return [];
    if (st.pages.length) return [].concat(...st.pages.map((p) => p.steps));
    if (Array.isArray(d.steps)) return d.steps;
    const out = [];
    const walk = (inv) => {
      if (!inv || typeof inv !== 'object') return;
      for (const s of Array.isArray(inv.steps) ? inv.steps : []) {
        out.push(Object.assign({ path: inv.path }, s));
        if (s.invocation) walk(s.invocation);
      }
      for (const c of Array.isArray(inv.children) ? inv.children : []) walk(c);
      if (Array.isArray(inv.invocations)) for (const c of inv.invocations) walk(c);
    };
    walk(d.tree || d.invocation || (d.run && d.run.tree));
    return out;
  }

  function stepId(s) { return s.id !== undefined ? String(s.id) : String(s.path) + ':' + s.seq; }

  function typeBadge(t) {
    const s = String(t || '?');
    return h('span', { class: 'type t-' + (/^[a-z_]+$/.test(s) ? s : 'other'), text: s.replace(/^action_/, '') });
  }

  function stepRow(s, run, depth) {
    const forkable = depth === 0;
    const id = stepId(s);
    const mark = typeof s.mark === 'string' ? s.mark : st.diverged === id ? 'diverged' : null;
    const isErr = mark === 'error' || (s.type === 'action_result' && s.payload && typeof s.payload === 'object' && 'error' in s.payload && Object.keys(s.payload).length <= 3);
    const open = st.open.has(id);
    const cut = s.payload_truncated === true;
    const payload = h('div', { class: 'payload' });
    const prev = h('button', { type: 'button', class: 'pv mono', title: 'show the payload', text: cut ? PL.preview(String(s.payload_preview || ''), 160) : PL.preview(s.payload, 160) });
    if (mark) payload.appendChild(h('span', { class: 'mark mk-' + (/^[a-z_]+$/.test(mark) ? mark : 'other'), text: MARKS[mark] || mark }));
    if (isErr && mark !== 'error') payload.appendChild(h('span', { class: 'mark mk-error', text: 'error result' }));
    if (cut) payload.appendChild(h('span', { class: 'mark mk-cut', text: PL.bytes(Number(s.payload_bytes) || 0) }));
    payload.appendChild(prev);
    const body = h('div', { class: 'payload-full' });
    body.hidden = !open;
    const fill = () => PL.clear(body).appendChild(cut ? cutPayload(run, s, id) : PL.jsonBlock(s.payload));
    if (open) fill();
    prev.addEventListener('click', () => {
      if (st.open.has(id)) { st.open.delete(id); body.hidden = true; PL.clear(body); } else {
        st.open.add(id);
        fill();
        body.hidden = false;
      }
      prev.classList.toggle('open', st.open.has(id));
    });
    prev.classList.toggle('open', open);
    const d = PL.toDate(s.time, s.time_us);
    const hash = typeof s.hash === 'string' ? s.hash : '';
    const row = h('div', { class: 'step' + (mark ? ' m-' + (/^[a-z_]+$/.test(mark) ? mark : 'other') : '') + (isErr ? ' m-error' : '') },
      h('span', { class: 'sid mono', text: id }),
      typeBadge(s.type),
      h('span', { class: 'actor mono', title: String(s.actor || ''), text: PL.preview(s.actor || '', 40) }),
      payload,
      h('time', { class: 'when mono', title: d ? d.toISOString() : '', text: d ? PL.fmtTime(d, true) : '' }),
      h('span', { class: 'code mono', title: s.code ? 'code: ' + s.code : 'no code identity', text: s.code ? PL.preview(s.code, 28) : '' }),
      h('span', { class: 'hash mono', title: hash ? 'hash ' + hash + (s.prev_hash ? '\nprev ' + s.prev_hash : '') : 'folded into the caller\'s result', text: hash ? hash.slice(0, 10) : '—' }),
      forkable && !PL.session.read_only && PL.can('fork')
        ? forkButton(run, s) : h('span', { class: 'forkcell' }));
    row.dataset.step = id;
    row.firstChild.style.paddingLeft = Math.min(depth, 10) * 14 + 'px';
    body.style.paddingLeft = 100 + Math.min(depth, 10) * 14 + 'px';
    return [row, body];
  }

  /* A payload the page holds only the start of: that start, and a button
   * that fetches the step whole (kept for redraws). */
  function cutPayload(run, s, id) {
    const box = h('div', { class: 'cut' });
    const showWhole = (payload) => {
      let text;
      try { text = JSON.stringify(payload, null, 2); } catch (e) { text = String(payload); }
      PL.clear(box).appendChild(h('pre', { class: 'json whole', text: String(text) }));
    };
    if (st.whole.has(id)) {
      showWhole(st.whole.get(id));
      return box;
    }
    const size = PL.bytes(Number(s.payload_bytes) || 0);
    const btn = h('button', { type: 'button', class: 'link small show-whole', text: 'show whole (' + size + ')' });
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      btn.textContent = 'loading ' + size + '…';
      try {
        const d = await PL.api('/api/runs/' + encodeURIComponent(String(run.id)) + '/step' + PL.query({ id }));
        const payload = d && d.step ? d.step.payload : null;
        st.whole.set(id, payload);
        showWhole(payload);
      } catch (e) {
        btn.disabled = false;
        btn.textContent = 'show whole (' + size + ')';
        box.appendChild(h('p', { class: 'bad small', text: 'Could not read the step: ' + e.message }));
      }
    });
    box.append(h('pre', { class: 'json cut-preview', text: String(s.payload_preview || '') + ' …' }),
      h('p', { class: 'muted small' }, 'The first ' + PL.bytes(String(s.payload_preview || '').length) + ' of ' + size + '. ', btn));
    return box;
  }

  function forkButton(run, s) {
    const b = h('button', { type: 'button', class: 'tiny ghost fork', title: 'fork a new run from the ledger before this step', text: 'fork' });
    b.addEventListener('click', () => {
      PL.act(b, st.outcome, '/api/runs/' + encodeURIComponent(run.id) + '/fork', { at: stepId(s) }, (d) => {
        const nid = d && d.new_run;
        if (typeof nid === 'string') st.outcome.appendChild(h('p', null, 'New run: ', h('a', { href: PL.runHref(nid), text: nid })));
      });
    });
    return h('span', { class: 'forkcell' }, b);
  }

  /* The invocation at path, its steps, each call followed by the
   * invocation it made. */
  function invocation(paths, path, run, depth) {
    const steps = paths.get(path) || [];
    const box = h('div', { class: 'inv' + (depth ? ' nested' : '') });
    for (const s of steps) {
      box.append(...stepRow(s, run, depth));
      const child = path + '.' + s.seq;
      if ((s.type === 'action_call' || paths.has(child)) && paths.has(child) && child !== path) {
        const kids = paths.get(child);
        const shut = st.shut.has(child);
        const t = h('button', { type: 'button', class: 'fold', text: (shut ? '▸ ' : '▾ ') + 'invocation ' + child + ' · ' + kids.length + ' step' + (kids.length === 1 ? '' : 's') });
        const inner = invocation(paths, child, run, depth + 1);
        inner.hidden = shut;
        t.addEventListener('click', () => {
          if (st.shut.has(child)) st.shut.delete(child); else st.shut.add(child);
          inner.hidden = st.shut.has(child);
          t.textContent = (inner.hidden ? '▸ ' : '▾ ') + 'invocation ' + child + ' · ' + kids.length + ' step' + (kids.length === 1 ? '' : 's');
        });
        const head = h('div', { class: 'inv-head' }, t);
        head.style.paddingLeft = Math.min(depth + 1, 10) * 14 + 'px';
        box.append(head, inner);
      }
    }
    return box;
  }

  function kv(k, v) { return h('div', { class: 'fact' }, h('dt', { text: k }), h('dd', null, v)); }

  function header(run, steps) {
    const status = PL.statusOf(run);
    const tok = PL.tokens(run.tokens);
    const inDoubt = run.in_doubt || steps.some((s) => s.mark === 'in_doubt');
    const dl = h('dl', { class: 'facts' },
      kv('root policy', h('span', { class: 'mono', text: String(run.root_policy || run.policy || '') })),
      kv('steps', PL.num(run.steps !== undefined ? run.steps : steps.length)),
      kv('tokens', run.tokens && run.tokens.model_calls ? h('span', { title: tok.title, text: tok.title }) : '–'),
      kv('created', PL.timeCell(run.created, run.created_us)),
      kv('updated', PL.timeCell(run.updated, run.updated_us)),
      run.attempts !== undefined ? kv('attempts', PL.num(run.attempts)) : null,
      typeof run.successor === 'string' ? kv('successor', h('a', { class: 'mono', id: 'successor', href: PL.runHref(run.successor), text: run.successor })) : null,
      typeof run.predecessor === 'string' ? kv('predecessor', h('a', { class: 'mono', href: PL.runHref(run.predecessor), text: run.predecessor })) : null,
      run.owner_host ? kv('owner', h('span', { class: 'mono', text: String(run.owner_host) + (run.owner_pid ? ' pid ' + run.owner_pid : '') + (run.owner_alive ? ' (alive)' : ' (gone)') })) : null);
    const alerts = [];
    if (status === 'crashed') alerts.push(h('div', { class: 'alert crashed', text: 'Crashed: the process that ran this run is gone. Continue it to finish it from its ledger.' }));
    if (inDoubt) alerts.push(h('div', { class: 'alert doubt', text: 'In doubt: a call has no recorded result; continuing runs it again (idempotent calls with their key).' }));
    if (run.reason || run.error) alerts.push(h('div', { class: 'alert failed' }, h('strong', { text: String(run.error || 'failed') + ': ' }), String(run.reason || '')));
    return h('section', { class: 'run-head' },
      h('div', { class: 'title-row' }, h('h1', { class: 'mono run-id', title: String(run.id), text: PL.preview(String(run.id), 100) }), PL.badge(status),
        inDoubt ? h('span', { class: 'badge st-in_doubt', text: 'in doubt' }) : null),
      dl, alerts, actions(run, status));
  }

  function actions(run, status) {
    const id = encodeURIComponent(String(run.id));
    const bar = h('div', { class: 'actions', id: 'actions' });
    const ro = PL.session.read_only;
    const btn = (label, action, path, body, cls, enabled, then) => {
      const b = h('button', { type: 'button', class: cls || '', id: 'act-' + action, text: label });
      b.disabled = ro || !enabled || !PL.can(action);
      if (ro) b.title = 'read-only: actions are off';
      b.addEventListener('click', () => PL.act(b, st.outcome, path, body, (d) => { if (then) then(d); load(true); }));
      bar.appendChild(b);
      return b;
    };
    const unfinished = status === 'crashed' || status === 'running';
    /* a run that has ended has nothing to continue */
    if (!ENDED.includes(status)) btn('Continue', 'continue', '/api/runs/' + id + '/continue', {}, status === 'crashed' ? 'primary' : '', unfinished);
    btn('Check', 'check', '/api/runs/' + id + '/check', {}, '', true, (d) => checked(run, d));
    const v = h('button', { type: 'button', id: 'act-verify', text: 'Verify' });
    v.addEventListener('click', () => verify(v, id));
    bar.appendChild(v);
    if (PL.can('cancel') && (unfinished || status === 'suspended' || status === 'waiting')) {
      const cancel = PL.confirmButton('Cancel', 'Cancel this run?', 'danger-outline', (b) =>
        PL.act(b, st.outcome, '/api/runs/' + id + '/cancel', {}, () => load(true)));
      cancel.querySelector('button').id = 'act-cancel';
      bar.appendChild(cancel);
    }
    if (PL.can('signal') && (unfinished || status === 'suspended' || status === 'waiting')) {
      const form = signalForm(run, id);
      const sig = h('button', { type: 'button', id: 'act-signal', text: 'Signal…' });
      sig.addEventListener('click', () => { form.hidden = !form.hidden; });
      bar.append(sig, form);
    }
    if (PL.can('delete') && ENDED.includes(status)) {
      const steps = typeof run.steps === 'number' ? run.steps : null;
      const del = PL.confirmButton('Delete…', () => 'Delete run ' + PL.preview(String(run.id), 80) + ' (' + status + ', ' +
        (steps === null ? 'its' : PL.num(steps)) + ' step' + (steps === 1 ? '' : 's') + ', root policy ' +
        PL.preview(String(run.root_policy || run.policy || ''), 60) + ') for good? Its record and every step go; ' +
        'a tombstone keeps its id, final status and head.', 'danger-outline', (b) =>
        PL.act(b, st.outcome, '/api/runs/' + id + '/delete', {}, () => load(true)));
      del.querySelector('button').id = 'act-delete';
      bar.appendChild(del);
    }
    bar.appendChild(h('a', { class: 'button', id: 'export', href: '/api/runs/' + id + '/export', download: String(run.id).replace(/[^A-Za-z0-9._-]/g, '_') + '.jsonl', text: 'Export JSONL' }));
    return bar;
  }

  /* Send an event to the run (ledger-replay --signal): its name (the one
   * a waiting run waits for, to start with) and a JSON object. */
  function signalForm(run, id) {
    const name = h('input', { name: 'event', class: 'mono', placeholder: 'event name', size: 16, 'aria-label': 'event name',
      value: typeof run.wait_event === 'string' ? run.wait_event : '' });
    const payload = h('textarea', { name: 'payload', class: 'json-editor mono', rows: 2, cols: 36, spellcheck: 'false', 'aria-label': 'payload (JSON)', text: '{}' });
    const send = h('button', { type: 'submit', id: 'signal-send', text: 'Send' });
    const msg = h('span', { class: 'json-msg bad small' });
    const form = h('form', { class: 'signal-form', id: 'signal-form' }, name, payload, send, msg);
    form.hidden = true;
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      let value;
      try { value = JSON.parse(payload.value || '{}'); } catch (err) { value = undefined; }
      const ok = value !== null && typeof value === 'object' && !Array.isArray(value) && name.value.trim();
      msg.textContent = ok ? '' : name.value.trim() ? 'the payload must be a JSON object' : 'name the event';
      payload.classList.toggle('invalid', value === undefined || value === null || typeof value !== 'object' || Array.isArray(value));
      if (ok) PL.act(send, st.outcome, '/api/runs/' + id + '/signal', { name: name.value.trim(), payload: value }, () => load(true));
    });
    return form;
  }

  /* A check's divergence: its step marked, and a run that diverges at a
   * root step can be upgraded there (forked, ended superseded, the new run
   * continued under the loaded code). */
  function checked(run, d) {
    const step = d && d.divergence && typeof d.divergence.step === 'string' ? d.divergence.step : null;
    st.diverged = step;
    if (!step || !/^0:\d+$/.test(step) || !PL.can('upgrade')) return;
    const up = PL.confirmButton('Upgrade at ' + step, 'Fork the run at ' + step + ', end it superseded and continue the new run?', 'primary', (b) =>
      PL.act(b, st.outcome, '/api/runs/' + encodeURIComponent(String(run.id)) + '/upgrade', { at: step }, (r) => {
        const nid = r && r.new_run;
        if (typeof nid === 'string') st.outcome.appendChild(h('p', null, 'New run: ', h('a', { href: PL.runHref(nid), text: nid })));
        load(true);
      }));
    up.querySelector('button').id = 'act-upgrade';
    st.outcome.appendChild(h('p', null, up));
  }

  /* Verify: the run's values decode and its hash chains link; else the
   * first fault. */
  async function verify(b, id) {
    b.disabled = true;
    try {
      const d = await PL.api('/api/runs/' + id + '/verify', { method: 'POST', body: {} });
      const ok = d && d.verify === 'ok';
      PL.clear(st.outcome);
      st.outcome.hidden = false;
      st.outcome.className = 'outcome ' + (ok ? 'good' : 'bad');
      st.outcome.appendChild(h('strong', { id: 'verify-result', text: ok ? 'Verified: every value decodes, every hash chain links.' : 'Verify found a fault:' }));
      if (!ok) st.outcome.appendChild(h('pre', { class: 'summary', text: String((d && (d.message || d.error)) || 'unknown fault') }));
    } catch (e) {
      PL.outcome(st.outcome, null, e);
    } finally {
      b.disabled = false;
    }
  }

  function draw() {
    const main = st.main;
    if (!main) return;
    const d = st.data;
    const run = runOf(d);
    const steps = stepsOf(d);
    const paths = PL.byPath(steps);
    const y = window.scrollY;
    PL.clear(main);
    const status = PL.statusOf(run);
    main.append(h('nav', { class: 'crumbs' }, h('a', { href: '#/runs', text: '‹ Runs' })), header(run, steps), st.outcome);
    if (status === 'suspended' || status === 'waiting') {
      const card = PL.answerCard(run, (d) => { PL.outcome(st.outcome, d, null); load(true); });
      if (card) main.appendChild(h('section', { class: 'panel' }, h('h2', { text: 'Waiting for an answer' }), card));
    }
    const last = st.pages.length ? st.pages[st.pages.length - 1] : null;
    const next = last ? last.next : null;
    main.appendChild(h('section', { class: 'panel' }, h('h2', { text: 'Timeline' }),
      PL.timeline(st.timeline, next ? [] : steps, run)));
    const root = paths.has('0') ? '0' : [...paths.keys()].sort((a, b) => a.length - b.length)[0];
    main.appendChild(h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', { text: 'Steps' }),
        h('span', { class: 'legend muted' }, 'click a payload to unfold it; ', h('span', { class: 'mark mk-in_doubt', text: 'in doubt' }), ' ',
          h('span', { class: 'mark mk-error', text: 'error' }), ' ', h('span', { class: 'mark mk-suspended', text: 'suspended' }), ' ',
          h('span', { class: 'mark mk-diverged', text: 'diverged' }))),
      h('div', { class: 'tree', id: 'tree' },
        h('div', { class: 'step head' }, ['step', 'type', 'actor', 'payload', 'time', 'code', 'hash', ''].map((t) => h('span', { text: t }))),
        root !== undefined ? invocation(paths, root, run, 0) : h('p', { class: 'empty', text: 'No step yet.' })),
      moreBar(run, steps.length, next)));
    window.scrollTo(0, y);
  }

  /* How many steps are shown, and a button that reads the next page, which
   * also comes by itself when the button scrolls into view. */
  function moreBar(run, shown, next) {
    if (st.observer) { st.observer.disconnect(); st.observer = null; }
    const total = typeof run.steps === 'number' ? run.steps : shown;
    const bar = h('div', { class: 'more-steps', id: 'steps-more' },
      h('span', { class: 'muted', id: 'steps-shown', text: PL.num(shown) + ' of ' + PL.num(Math.max(total, shown)) + ' steps' }));
    if (!next) return bar;
    const b = h('button', { type: 'button', id: 'more-steps', text: 'Load more steps' });
    b.addEventListener('click', () => loadMore());
    bar.appendChild(b);
    if (window.IntersectionObserver) {
      st.observer = new IntersectionObserver((es) => { if (es.some((e) => e.isIntersecting)) loadMore(); }, { rootMargin: '400px' });
      st.observer.observe(b);
    }
    return bar;
  }

  /* The next page of steps, after the last one read. */
  async function loadMore() {
    const last = st.pages[st.pages.length - 1];
    if (st.moreBusy || !last || !last.next || !st.main) return;
    st.moreBusy = true;
    const id = st.id;
    const b = document.getElementById('more-steps');
    if (b) { b.disabled = true; b.textContent = 'Loading…'; }
    try {
      const d = await PL.api('/api/runs/' + encodeURIComponent(id) + '/steps' + PL.query({ cursor: last.next }));
      if (st.id !== id || !st.main || st.pages[st.pages.length - 1] !== last) return;
      st.pages.push({ cursor: last.next, steps: Array.isArray(d.steps) ? d.steps : [], next: d.next || null });
      draw();
    } catch (e) {
      if (b) { b.disabled = false; b.textContent = 'Load more steps'; }
      PL.outcome(st.outcome, null, e);
    } finally {
      st.moreBusy = false;
    }
  }

  /* A deleted run: what its tombstone keeps. */
  function tombstone(t, message) {
    const main = st.main;
    if (st.observer) { st.observer.disconnect(); st.observer = null; }
    const head = typeof t.head === 'string' ? t.head : '';
    PL.clear(main).append(h('nav', { class: 'crumbs' }, h('a', { href: '#/runs', text: '‹ Runs' })),
      h('section', { class: 'run-head', id: 'tombstone' },
        h('div', { class: 'title-row' }, h('h1', { class: 'mono run-id', title: st.id, text: PL.preview(st.id, 100) }),
          PL.badge('deleted')),
        h('dl', { class: 'facts' },
          kv('final status', PL.badge(String(t.status || '?'))),
          kv('root policy', h('span', { class: 'mono', text: String(t.root_policy || '') })),
          kv('created', PL.timeCell(t.created, t.created_us)),
          kv('deleted', PL.timeCell(t.deleted, t.deleted_us)),
          kv('id kept until', PL.timeCell(t.expires, t.expires_us)),
          kv('head', head ? h('span', { class: 'mono', title: head, text: head.slice(0, 16) }) : '–')),
        h('div', { class: 'alert deleted', text: message || 'Deleted: its record and steps are gone; its tombstone keeps the id.' })),
      st.outcome);
  }

  /* The run and its first page; with more pages read, the last one again
   * (a running run's new steps come at its end). */
  const loader = PL.loader(() => {
    const id = encodeURIComponent(st.id);
    const last = st.pages.length > 1 ? st.pages[st.pages.length - 1] : null;
    return Promise.all([PL.api('/api/runs/' + id), PL.api('/api/runs/' + id + '/timeline').catch(() => null),
      last ? PL.api('/api/runs/' + id + '/steps' + PL.query({ cursor: last.cursor })).catch(() => null) : null, last]);
  }, (d, e, quiet) => {
    if (!st.main) return;
    /* a reload that shows what the page shows already (a live event about
     * a change it has drawn) draws nothing: an open confirmation, an answer
     * being typed and the scroll position stay */
    if (!e && !d[3] && st.pages.length === 1 && st.data &&
        JSON.stringify(d[0]) === JSON.stringify(st.data) &&
        JSON.stringify(d[1]) === JSON.stringify(st.timeline)) return;
    if (!e) {
      st.data = d[0];
      st.timeline = d[1];
      const first = { cursor: null, steps: Array.isArray(d[0] && d[0].steps) ? d[0].steps : [], next: (d[0] && d[0].next) || null };
      if (d[3] && d[2] && st.pages[st.pages.length - 1] === d[3]) {
        st.pages[0] = first;
        st.pages[st.pages.length - 1] = { cursor: d[3].cursor, steps: Array.isArray(d[2].steps) ? d[2].steps : [], next: d[2].next || null };
      } else {
        st.pages = [first];
      }
      draw();
    } else if (e.status === 404 && e.data && e.data.tombstone && typeof e.data.tombstone === 'object') {
      st.data = null;
      tombstone(e.data.tombstone, String(e.data.message || ''));
    } else if (!quiet || !st.data) {
      PL.clear(st.main).append(h('nav', { class: 'crumbs' }, h('a', { href: '#/runs', text: '‹ Runs' })),
        h('div', { class: 'outcome bad' }, h('strong', { text: e.status === 404 ? 'No such run: ' : 'Could not read the run: ' }),
          e.status === 404 ? PL.preview(st.id, 200) : e.message));
    }
  });
  const load = loader.load;

  const refresh = PL.throttle(() => load(true), 500);

  PL.views.run = {
    enter(main, r) {
      if (st.id !== r.arg) { st.open = new Set(); st.shut = new Set(); st.whole = new Map(); st.diverged = null; }
      st.pages = [];
      st.id = r.arg || '';
      st.main = main;
      st.data = null;
      loader.reset();
      st.outcome = h('div', { class: 'outcome', id: 'outcome', hidden: true });
      main.appendChild(h('p', { class: 'muted', text: 'Loading…' }));
      load(false);
    },
    onEvent(ev) {
      const id = PL.eventRunId(ev);
      if (id === null || id === st.id) refresh();
    },
    onTheme() { draw(); },
    leave() {
      st.main = null;
      if (st.observer) { st.observer.disconnect(); st.observer = null; }
    },
  };
})();
