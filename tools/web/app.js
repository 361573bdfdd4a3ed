'use strict';
// The run list, from the JSON API (docs/tools.md).  Every value from the
// store is set as text, never as markup.
async function main() {
  const out = document.getElementById('main');
  const r = await fetch('/api/runs?limit=50');
  const page = await r.json();
  const table = document.createElement('table');
  const head = table.insertRow();
  for (const h of ['run', 'status', 'policy', 'steps', 'created']) {
    const th = document.createElement('th');
    th.textContent = h;
    head.appendChild(th);
  }
  for (const run of page.runs || []) {
    const row = table.insertRow();
    for (const v of [run.id, run.status, run.root_policy, run.steps, run.created])
      row.insertCell().textContent = String(v);
  }
  out.replaceChildren(table);
}
main().catch((e) => { document.getElementById('main').textContent = String(e); });
