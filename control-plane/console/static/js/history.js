// The audit history: every change (or one experiment's), newest first,
// with who made it, when, and a field-level diff of the definition.
import {api} from './api.js';
import {diff} from './diff.js';
import {errorBox, fill, fmtTime, h, table, value} from './dom.js';

const opWords = {create: 'created', update: 'updated', delete: 'deleted'};

// summary names a change in words: "status running → paused" for a
// transition, else the op.
function changeRows(c) {
  const d = diff(c.before, c.after);
  if (!d.length) return h('p', {class: 'muted'}, 'No field of the definition changed.');
  return table(['field', 'before', 'after'], d.map((x) => ({
    attrs: {'data-path': x.path, class: `diff-${x.kind}`},
    cells: [x.path, x.kind === 'added' ? '' : value(x.before), x.kind === 'removed' ? '' : value(x.after)],
    classes: [null, 'before', 'after'],
  })), 'diff');
}

export async function historyPage(page, key) {
  const input = h('input', {type: 'search', id: 'history-key', value: key || '', placeholder: 'every experiment', autocomplete: 'off'});
  const form = h('form', {class: 'filters', role: 'search'}, h('label', null, 'Experiment', input));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = input.value.trim();
    location.hash = k ? `#/history/${encodeURIComponent(k)}` : '#/history';
  });
  const list = h('div', {id: 'changes'}, h('p', {class: 'muted'}, 'Loading…'));
  fill(page.el, h('h1', null, key ? `History of ${key}` : 'History'), form, list);
  let res;
  try {
    res = await api('GET', key ? `/v1/experiments/${encodeURIComponent(key)}/history` : '/v1/history');
  } catch (err) {
    if (page.live()) fill(list, errorBox(err, 'reading the history'));
    return;
  }
  if (!page.live()) return;
  const changes = (res.changes || []).slice().reverse();
  if (!changes.length) {
    fill(list, h('p', {class: 'muted'}, 'No change yet.'));
    return;
  }
  fill(list, changes.map((c) => {
    const status = c.op === 'update' && (c.before?.status || 'running') !== (c.after?.status || 'running')
      ? ` (${c.before?.status || 'running'} → ${c.after?.status || 'running'})` : '';
    return h('article', {class: 'change panel', 'data-revision': c.revision, 'data-op': c.op, 'data-key': c.key},
      h('h2', null, h('span', {class: 'rev'}, `r${c.revision}`), ' ',
        key ? null : [h('a', {href: `#/history/${encodeURIComponent(c.key)}`}, c.key), ' '],
        `${opWords[c.op] || c.op}${status}`),
      h('p', {class: 'muted'}, `by ${c.actor || '—'} at ${fmtTime(c.time)}`),
      changeRows(c));
  }));
}
