/*
 * The approval inbox: every run waiting for a human, oldest first, its
 * prompt, and an editor for the JSON answer, checked here before it is
 * sent.
 */
'use strict';

(function () {
  const { h } = PL;
  const st = { main: null, list: null, answered: null, drafts: new Map() };

  const TEMPLATES = ['{"approved": true}', '{"approved": false, "comment": ""}'];

  /* Where a JSON.parse error is, as "line L, column C", when it says. */
  function where(text, err) {
    const m = /position (\d+)/.exec(err.message);
    if (!m) return err.message;
    const pos = Number(m[1]);
    const before = text.slice(0, pos).split('\n');
    return err.message.replace(/ in JSON at position \d+.*$/, '') + ' (line ' + before.length + ', column ' + (before[before.length - 1].length + 1) + ')';
  }

  function promptOf(run) {
    if (run.prompt !== undefined) return run.prompt;
    if (run.question !== undefined) return run.question;
    return null;
  }

  /* The card for one waiting run: its prompt and the answer's editor.
   * after() is called once the server took the answer. */
  PL.answerCard = function (run, after) {
    const id = String(run.id);
    const ro = PL.session.read_only || !PL.can('answer');
    const prompt = promptOf(run);
    const text = h('textarea', {
      class: 'json-editor mono', rows: 4, spellcheck: 'false', 'aria-label': 'answer (JSON)',
      placeholder: '{"approved": true}', disabled: ro,
    });
    text.value = st.drafts.get(id) || '';
    const msg = h('span', { class: 'json-msg' });
    const send = h('button', { type: 'submit', class: 'primary', text: 'Submit answer', disabled: true });
    const fmt = h('button', { type: 'button', class: 'ghost', text: 'Format', disabled: ro });
    const outcome = h('div', { class: 'outcome', hidden: true });
    let value;
    const check = () => {
      st.drafts.set(id, text.value);
      const t = text.value.trim();
      value = undefined;
      if (!t) {
        msg.textContent = 'Type the answer as JSON.';
        msg.className = 'json-msg muted';
        text.classList.remove('invalid');
        send.disabled = true;
        return;
      }
      try {
        value = JSON.parse(t);
        if (!value || typeof value !== 'object' || Array.isArray(value)) {
          value = undefined;
          throw new Error('the answer must be a JSON object, {...}');
        }
        msg.textContent = 'valid JSON';
        msg.className = 'json-msg ok';
        text.classList.remove('invalid');
        send.disabled = ro;
      } catch (e) {
        msg.textContent = (/JSON object/.test(e.message) ? '' : 'not JSON: ') + where(t, e);
        msg.className = 'json-msg bad';
        text.classList.add('invalid');
        send.disabled = true;
      }
    };
    text.addEventListener('input', check);
    fmt.addEventListener('click', () => {
      check();
      if (value !== undefined) { text.value = JSON.stringify(value, null, 2); check(); }
    });
    const tpl = TEMPLATES.map((t) => {
      const b = h('button', { type: 'button', class: 'tiny ghost mono', text: t, disabled: ro, title: 'put this in the editor' });
      b.addEventListener('click', () => { text.value = t; check(); text.focus(); });
      return b;
    });
    const form = h('form', { class: 'answer' }, text,
      h('div', { class: 'answer-bar' }, send, fmt, h('span', { class: 'templates' }, tpl), msg), outcome);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      check();
      if (value === undefined || ro) return;
      send.disabled = true;
      try {
        const d = await PL.api('/api/runs/' + encodeURIComponent(id) + '/answer', { method: 'POST', body: value });
        st.drafts.delete(id);
        PL.outcome(outcome, d, null);
        form.classList.add('answered');
        for (const el of form.querySelectorAll('textarea, button')) el.disabled = true;
        if (after) after(d, card);
      } catch (err) {
        PL.outcome(outcome, null, err);
        send.disabled = false;
      }
    });
    check();
    const waited = PL.toDate(run.since || run.updated || run.waiting_since, run.since_us || run.updated_us);
    const card = h('article', { class: 'card inbox-card' },
      h('div', { class: 'card-head' },
        h('a', { class: 'mono run-link', href: PL.runHref(id), title: id, text: PL.preview(id, 80) }),
        PL.badge(PL.statusOf(run)),
        h('span', { class: 'mono muted', text: PL.preview(run.root_policy || run.policy || '', 40) }),
        run.suspended_path ? h('span', { class: 'muted small', text: 'at invocation ' + PL.preview(run.suspended_path, 40) }) : null,
        h('span', { class: 'grow' }),
        h('span', { class: 'waited', title: waited ? waited.toISOString() : '', text: waited ? 'waiting ' + PL.ago(waited).replace(/ ago$/, '') : '' })),
      h('div', { class: 'prompt' }, promptView(prompt)),
      ro ? h('p', { class: 'muted', text: 'Read-only: answers are off.' }) : null,
      form);
    card.dataset.id = id;
    return card;
  };

  /* A prompt: its text fields as paragraphs (question, draft, ask...), the
   * whole as JSON below. */
  function promptView(p) {
    if (p === null || p === undefined) return h('p', { class: 'muted', text: 'No prompt recorded.' });
    if (typeof p === 'string') return h('p', { class: 'prompt-text', text: p.length > 4000 ? p.slice(0, 4000) + '…' : p });
    const out = [];
    if (typeof p === 'object' && !Array.isArray(p)) {
      for (const [k, v] of Object.entries(p)) {
        if (typeof v === 'string' && out.length < 6) {
          out.push(h('div', { class: 'pf' }, h('span', { class: 'pk', text: k }), h('span', { class: 'pv-text', text: v.length > 2000 ? v.slice(0, 2000) + '…' : v })));
        }
      }
    }
    const raw = h('details', { class: 'raw' }, h('summary', { text: 'prompt as JSON' }), PL.jsonBlock(p));
    return [out, raw];
  }

  function listOf(d) {
    const l = Array.isArray(d) ? d : d && Array.isArray(d.runs) ? d.runs : [];
    const t = (r) => (typeof r.updated_us === 'number' ? r.updated_us : 0);
    return l.filter((r) => r && typeof r === 'object' && r.id !== undefined).sort((a, b) => t(a) - t(b));
  }

  const loader = PL.loader(() => PL.api('/api/inbox'), (d, e) => {
    const list = st.list;
    if (!list) return;
    if (e) {
      PL.clear(list).appendChild(h('div', { class: 'outcome bad', text: 'Could not read the inbox: ' + e.message }));
      return;
    }
    const runs = listOf(d);
    /* Keep the card being edited; make the others afresh. */
    const keep = new Map();
    for (const c of list.querySelectorAll('.inbox-card')) keep.set(c.dataset.id, c);
    const active = document.activeElement;
    PL.clear(list);
    if (!runs.length) list.appendChild(h('p', { class: 'empty', id: 'inbox-empty', text: 'Nobody is waited for: no run is waiting for an answer.' }));
    for (const r of runs) {
      if (r.state === 'damaged') { /* its status is not known: named, not answered */
        list.appendChild(h('div', { class: 'outcome bad inbox-damaged' }, h('strong', { text: 'Damaged: ' }),
          h('a', { class: 'mono', href: PL.runHref(String(r.id)), text: PL.preview(String(r.id), 80) }), ' ', PL.preview(String(r.damaged), 300)));
        continue;
      }
      const old = keep.get(String(r.id));
      list.appendChild(old && old.contains(active) ? old : PL.answerCard(r, moveAnswered));
    }
    document.getElementById('inbox-total').textContent = runs.length ? runs.length + ' waiting, oldest first' : '';
  });
  const load = loader.load;

  /* An answered card leaves the list for the answers given, with the
   * server's summary. */
  function moveAnswered(d, card) {
    if (!st.answered) return;
    card.classList.add('done');
    st.answered.hidden = false;
    st.answered.insertBefore(card, st.answered.children[1] || null);
    load();
  }

  const refresh = PL.throttle(load, 1000);

  PL.views.inbox = {
    enter(main) {
      st.main = main;
      loader.reset();
      st.list = h('div', { class: 'inbox', id: 'inbox' }, h('p', { class: 'muted', text: 'Loading…' }));
      st.answered = h('section', { class: 'answered-list', id: 'answered', hidden: true }, h('h2', { text: 'Answered here' }));
      main.append(h('div', { class: 'page-head' }, h('h1', { text: 'Inbox' }), h('span', { class: 'muted', id: 'inbox-total' })), st.list, st.answered);
      load();
    },
    onEvent() { refresh(); },
    leave() { st.main = null; st.list = null; st.answered = null; },
  };
})();
