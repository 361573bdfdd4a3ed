// cron_diff.js CRON_FIRES NPM_DIR [CASES] [SEED]: the cron parser against
// the npm package cron-parser.  Random expressions (every syntax the parser
// takes: lists, ranges, steps, names, 0 and 7 for Sunday, both day fields
// restricted or not, nicknames), each from a random start in a random zone (UTC and
// zones with changes of offset, a third of the starts just before one),
// the next 50 fire times from cron-parser and from tests/cron_fires.c:
// every one must agree.  Exits 77 (skipped) when cron-parser is not
// installed in NPM_DIR (tests/npm_setup.sh says why); with PL_NPM_REQUIRED=1, where
// nothing may skip, 1.
'use strict';
const { execFileSync } = require('child_process');
const path = require('path');

const [fires, npmDir, casesArg, seedArg] = process.argv.slice(2);
let parser, luxon;
try {
  parser = require(path.resolve(npmDir, 'node_modules', 'cron-parser'));
  luxon = require(path.resolve(npmDir, 'node_modules', 'luxon'));
} catch (e) {
  const ci = process.env.PL_NPM_REQUIRED === '1';
  console.log(`cron_diff: cron-parser is not installed in ${npmDir}: ` +
              (ci ? 'failed (PL_NPM_REQUIRED=1: nothing may skip)' : 'skipped'));
  process.exit(ci ? 1 : 77);
}
const CASES = Number(casesArg || 1000);

// luxon reads offsets through Intl, slowly: a day whose two ends have one
// offset is remembered (no zone changes its offset twice within a day).
const zoneOffset = luxon.IANAZone.prototype.offset;
const days = new Map();
luxon.IANAZone.prototype.offset = function (ts) {
  const h = Math.floor(ts / 86400e3), key = `${this.name} ${h}`;
  let o = days.get(key);
  if (o === undefined) {
    const a = zoneOffset.call(this, h * 86400e3);
    o = a === zoneOffset.call(this, h * 86400e3 + 86399999) ? a : null;
    days.set(key, o);
  }
  return o === null ? zoneOffset.call(this, ts) : o;
};
const FIRES = 50;

// A small seeded generator (mulberry32), so that a failure is repeatable.
let seed = Number(seedArg || 20261128) >>> 0;
function rand() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (a) => a[int(0, a.length - 1)];

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug',
                'sep', 'oct', 'nov', 'dec'];
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
const cased = (s) => (rand() < 0.5 ? s.toUpperCase() : s);

// One value of a field: a number, or a name where the field has them.
function value(f, v) {
  if (f.names && rand() < 0.3)
    return cased(f.names[(v - f.min) % f.names.length]);
  return String(v);
}

function item(f) {
  const r = rand();
  if (r < 0.35) return value(f, int(f.min, f.max));
  if (r < 0.55) {
    const a = int(f.min, f.max), b = int(a, f.max);
    return `${value(f, a)}-${value(f, b)}`;
  }
  if (r < 0.7) {
    const a = int(f.min, f.max), b = int(a, f.max);
    return `${a}-${b}/${int(1, Math.max(1, b - a + 2))}`;
  }
  if (r < 0.85) return `*/${int(1, f.max)}`;
  return `${int(f.min, f.max)}/${int(1, f.max)}`;
}

// The values an item stands for (7 is Sunday, 0).
function values(f, it) {
  const num = (s) => (/^\d+$/.test(s) ? Number(s)
    : f.names.indexOf(s.toLowerCase()) + f.min);
  const [base, step] = it.split('/');
  let [a, b] = base === '*' ? [f.min, f.max] : base.split('-').map(num);
  if (b === undefined) b = step ? f.max : a;
  const out = [];
  for (let v = a; v <= b; v += Number(step || 1)) out.push(f.max === 7 ? v % 7 : v);
  return out;
}

// A list whose items share no value: cron-parser refuses a value twice
// ("1-5,3"), which this parser takes (tests/test_cron.c checks it).
function field(f) {
  if (rand() < f.star) return '*';
  const n = rand() < 0.6 ? 1 : int(2, 4);
  const items = [], seen = new Set();
  for (let tries = 0; items.length < n && tries < 20; tries++) {
    const it = item(f), vs = values(f, it);
    if (vs.some((v) => seen.has(v)) || new Set(vs).size !== vs.length) continue;
    vs.forEach((v) => seen.add(v));
    items.push(it);
  }
  return items.length ? items.join(',') : '*';
}

const FIELDS = [
  { min: 0, max: 59, star: 0.25 },
  { min: 0, max: 23, star: 0.35 },
  { min: 1, max: 31, star: 0.6 },
  { min: 1, max: 12, star: 0.6, names: MONTHS },
  { min: 0, max: 7, star: 0.6, names: DAYS.concat(['sun']) },
];
// Hours around the changes of offset (01:00-03:00 local) come up often.
function hourField() {
  if (rand() < 0.4) {
    const a = int(0, 3);
    return rand() < 0.5 ? String(a) : `${a}-${int(a, 4)}`;
  }
  return field(FIELDS[1]);
}

// A nickname now and then, in lower case: cron-parser refuses another
// case, which this parser takes (tests/test_cron.c checks it).
const NICKNAMES = ['@yearly', '@annually', '@monthly', '@weekly', '@daily',
                   '@hourly'];

function expression() {
  if (rand() < 0.03) return pick(NICKNAMES);
  return [field(FIELDS[0]), hourField(), field(FIELDS[2]), field(FIELDS[3]),
          field(FIELDS[4])].join(' ');
}

const ZONES = ['UTC', 'America/New_York', 'Europe/London',
               'Australia/Lord_Howe', 'America/Santiago', 'Asia/Kolkata',
               'Pacific/Chatham', 'Europe/Berlin', 'America/Havana'];

// The changes of offset of a zone in a year, found with luxon: between
// two month starts of different offsets, by bisection to the minute.
const changes = new Map();
function changesOf(zone, year) {
  const key = `${zone} ${year}`;
  if (changes.has(key)) return changes.get(key);
  const off = (t) => luxon.DateTime.fromMillis(t, { zone }).offset;
  const out = [];
  for (let m = 0; m < 12; m++) {
    let lo = Date.UTC(year, m, 1), hi = Date.UTC(year, m + 1, 1);
    const a = off(lo);
    if (a === off(hi)) continue;
    while (hi - lo > 60e3) {
      const mid = lo + Math.floor((hi - lo) / 120e3) * 60e3;
      if (off(mid) === a) lo = mid;
      else hi = mid;
    }
    out.push(hi);
  }
  changes.set(key, out);
  return out;
}

function start(zone) {
  const r = rand();
  const year = int(1995, 2036);
  if (r < 0.35 && zone !== 'UTC') {
    const cs = changesOf(zone, year);
    if (cs.length) return pick(cs) - int(0, 3 * 3600) * 1000 - int(0, 999);
  }
  if (r < 0.7) {
    const month = pick([2, 3, 8, 9, 10]);
    return Date.UTC(year, month, int(1, 28), int(0, 23), int(0, 59),
                    int(0, 59), int(0, 999)) - int(0, 20) * 86400e3;
  }
  return Date.UTC(year, 0, 1) + Math.floor(rand() * 365 * 86400e3);
}

const cases = [];
while (cases.length < CASES) {
  const expr = expression();
  const zone = pick(ZONES);
  const at = start(zone);
  let expected, fields;
  try {
    const it = parser.CronExpressionParser.parse(expr, { currentDate: at, tz: zone });
    fields = it.fields;
    expected = it.take(FIRES).map((d) => d.getTime());
  } catch (e) {
    expected = 'error';
  }
  cases.push({ expr, zone, at, expected, fields });
}

const input = cases.map((c) => `${c.zone}\t${c.expr}\t${c.at}\t${FIRES}\n`).join('');
const output = execFileSync(fires, { input, maxBuffer: 1 << 28 }).toString().split('\n');

// Where a zone's clock changes by part of an hour, or at midnight
// (Lord_Howe's half hours, Chatham's 45 minutes, Havana's midnight),
// cron-parser's hour arithmetic skips times that exist ('*/37 * * * *'
// misses 02:37 on the day Lord_Howe goes from 02:00 to 02:30) or takes the
// later of a repeated midnight, or even goes back in time.  There a
// difference must be cron-parser's: each of our fire times from the first
// difference on is one by the rule of base/cron.h, checked here on its own,
// and cron-parser's, where earlier, is not one or repeats an earlier one.
const ODD_ZONES = new Set(['Australia/Lord_Howe', 'Pacific/Chatham', 'America/Havana']);
function isFire(fields, zone, t) {
  const Z = luxon.IANAZone.create(zone), off = (u) => Z.offset(u) * 60e3;
  const has = (f, v) => f.values.includes(v);
  const matches = (L) => {
    const d = new Date(L), wd = d.getUTCDay();
    const dom = has(fields.dayOfMonth, d.getUTCDate());
    const dow = has(fields.dayOfWeek, wd) || (wd === 0 && has(fields.dayOfWeek, 7));
    const day = !fields.dayOfMonth.isWildcard && !fields.dayOfWeek.isWildcard ? dom || dow
      : !fields.dayOfMonth.isWildcard ? dom : !fields.dayOfWeek.isWildcard ? dow : true;
    return day && has(fields.minute, d.getUTCMinutes()) &&
      has(fields.hour, d.getUTCHours()) && has(fields.month, d.getUTCMonth() + 1);
  };
  const everyHour = fields.hour.values.length === 24, o = off(t);
  const near = [off(t - 86400e3), off(t + 86400e3), off(t - 3 * 3600e3), off(t + 3 * 3600e3)];
  if (matches(t + o)) {
    if (everyHour) return true;
    // a repeated local time fires at its first occurrence alone
    return !near.some((p) => p !== o && t + o - p < t && off(t + o - p) === p);
  }
  if (everyHour) return false;
  // a skipped local time fires read with the offset before the jump
  return near.some((p) => p < o && off(t + p - o) !== o && matches(t + p) &&
                   off(t - (o - p)) === p);
}

let bad = 0, refused = 0, shown = 0, agreed = 0, theirs = 0;
const iso = (t) => new Date(t).toISOString();
cases.forEach((c, i) => {
  const line = output[i] || '';
  if (c.expected === 'error' || line.startsWith('error:')) {
    if (c.expected === 'error' && line.startsWith('error:')) { refused++; return; }
    bad++;
    if (shown++ < 10)
      console.log(`DIFF ${c.zone} '${c.expr}' from ${iso(c.at)}: cron-parser ` +
                  `${c.expected === 'error' ? 'refuses it' : 'accepts it'}, ours: ` +
                  `${line.slice(0, 80)}`);
    return;
  }
  const ours = line.split(' ').map(Number);
  const n = c.expected.length;
  for (let k = 0; k < n; k++) {
    if (ours[k] !== c.expected[k] && ODD_ZONES.has(c.zone) &&
        ours.slice(k).every((t, j) => isFire(c.fields, c.zone, t) &&
                            (j === 0 || t > ours[k + j - 1])) &&
        (c.expected[k] > ours[k] || !isFire(c.fields, c.zone, c.expected[k]) ||
         (k > 0 && c.expected[k] <= c.expected[k - 1]))) {
      theirs++;
      if (shown++ < 10)
        console.log(`cron-parser's: ${c.zone} '${c.expr}' from ${iso(c.at)}: ` +
                    `fire ${k}: cron-parser ${iso(c.expected[k])}, ours ${iso(ours[k])}`);
      return;
    }
    if (ours[k] !== c.expected[k]) {
      bad++;
      if (shown++ < 10)
        console.log(`DIFF ${c.zone} '${c.expr}' from ${iso(c.at)}: fire ${k}: ` +
                    `cron-parser ${iso(c.expected[k])}, ours ${iso(ours[k])}`);
      return;
    }
  }
  if (n < FIRES && ODD_ZONES.has(c.zone) && ours.length === FIRES &&
      ours.slice(n).every((t) => isFire(c.fields, c.zone, t))) {
    theirs++; // cron-parser gave up (its loop limit) where these fire
    return;
  }
  if (n < FIRES) {
    bad++;
    if (shown++ < 10)
      console.log(`DIFF ${c.zone} '${c.expr}': cron-parser gave ${n} fire times`);
    return;
  }
  agreed++;
});
console.log(`cron_diff: ${cases.length} expressions, ${agreed} agree on all ` +
            `${FIRES} fire times, ${refused} refused by both, ${theirs} ` +
            `differ by cron-parser's hour arithmetic, ${bad} differ`);
process.exit(bad ? 1 : 0);
