// DOM helpers. Every text goes in through textContent or attributes, never
// as HTML, so nothing an experiment or the API holds can inject markup.

// h builds an element: h('a', {href: '#/x', class: 'btn', onclick: f}, 'text', child, [more]).
// Attributes that are null, undefined or false are left out; true sets an
// empty attribute.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false || c === '') continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// fill replaces el's children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// fmtTime renders an RFC 3339 time in the browser's time zone, to the second.
export function fmtTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return s;
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// pct renders a ratio as a percentage with one decimal: 0.5 → "50.0%".
export const pct = (x) => `${(100 * (x || 0)).toFixed(1)}%`;

// ms renders a latency in milliseconds: "12.3 ms"; "—" when absent.
export const ms = (x) => (x == null ? '—' : `${(+x).toFixed(1)} ms`);

// seconds is a proto3 JSON Duration ("3600s", "1.5s"; absent when 0) in
// seconds.
export const seconds = (d) => parseFloat(d || '0') || 0;

// fmtDuration renders seconds for people in at most two units: 45 → "45s",
// 720 → "12m", 3600 → "1h", 5400 → "1h 30m", 90000 → "1d 1h".
export function fmtDuration(sec) {
  let left = Math.max(0, Math.floor(sec));
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    if (left >= size || (size === 1 && !parts.length)) {
      parts.push(`${Math.floor(left / size)}${unit}`);
      left %= size;
    }
    if (parts.length === 2 || (parts.length && !left)) break;
  }
  return parts.join(' ');
}

// badge is a coloured label for a status (draft, running, ...) or a
// proxy state (applied, pending, ...).
export function badge(word) {
  return h('span', {class: `badge badge-${word}`}, word);
}

// shortVersion is a configuration version cut to 12 characters.
export function shortVersion(v) {
  return v ? v.slice(0, 12) : '—';
}

// value renders a JSON value compactly: strings quoted, lists spaced.
export function value(v) {
  if (v === undefined) return '';
  if (Array.isArray(v)) return `[${v.map(value).join(', ')}]`;
  if (v && typeof v === 'object') return JSON.stringify(v);
  return JSON.stringify(v);
}

// table builds a table whose cells carry their column's label, so that a
// narrow screen can show each row as a card. rows are [{attrs, cells}]:
// attrs go on the <tr>, cells are in column order.
export function table(columns, rows, cls = '') {
  return h('table', {class: `cards ${cls}`},
    h('thead', null, h('tr', null, columns.map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', null, rows.map((r) => h('tr', r.attrs,
      r.cells.map((c, i) => h('td', {'data-label': columns[i], class: r.classes?.[i]}, c))))));
}

// summary is a panel's one line: what the panel shows, then where the
// owners' guide explains it. allotd serves the console, not the docs, and
// the console refers to no other host, so the guide is named — docs/owners.md
// in the Allot repository, and the section — rather than linked.
export function summary(text, section) {
  return h('p', {class: 'summary muted'}, text, ' ',
    h('span', {class: 'help-ref'}, 'Help: docs/owners.md, ', h('cite', null, `“${section}”`), '.'));
}

// errorBox shows an API error: its message and every detail, as the API
// wrote them.
export function errorBox(err, what) {
  const details = err.details || [];
  return h('div', {class: 'error', role: 'alert'},
    h('p', null, what ? `${what}: ` : '', err.message || String(err),
      err.status ? h('span', {class: 'muted'}, ` (${err.status} ${err.code})`) : null),
    details.length ? h('ul', null, details.map((d) => h('li', null, d))) : null);
}
