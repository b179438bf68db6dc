// One experiment: its definition, its lifecycle (start, pause, stop, with
// the API's wait option and its outcome), the live rollout of the proxies
// it concerns, its outcomes per variation when it observes them, its
// guardrails, ramp and rollback (with "Acknowledge and start" while a
// rollback is pending), and links to its preview and history.
import {api, canWrite, denied, withWait} from './api.js';
import {definition} from './diff.js';
import {badge, errorBox, fill, fmtTime, h} from './dom.js';
import {variationsText} from './experiments.js';
import {guardsPanel, rampProgress} from './guards.js';
import {outcomesPanel} from './outcomes.js';
import {outcome, rolloutPanel} from './rollout.js';

// actions are the lifecycle operations: the statuses each may start from
// (experiment.Transitions in Go; console/transitions_test.go checks this
// table against it) and the status it leads to.
const actions = [
  {op: 'start', label: 'Start', from: ['draft', 'paused'], to: 'running'},
  {op: 'pause', label: 'Pause', from: ['running'], to: 'paused'},
  {op: 'stop', label: 'Stop', from: ['draft', 'running', 'paused'], to: 'stopped'},
];

// flash is an outcome to show on the next experiment page (after a form
// submits): {key, text, rollout, seconds}.
let flash = null;
export function setFlash(f) { flash = f; }

// waitControl is the "wait for the proxies" option of a write: a checkbox
// and a number of seconds (the API's cap is 60).
export function waitControl(id) {
  const on = h('input', {type: 'checkbox', id: `${id}-on`, checked: true});
  const secs = h('input', {type: 'number', id: `${id}-seconds`, min: 1, max: 60, value: 30, class: 'seconds'});
  return {
    el: h('span', {class: 'wait'}, h('label', null, on, ' wait up to '), secs, h('label', {for: `${id}-seconds`}, ' s for the proxies')),
    seconds: () => (on.checked ? Math.min(60, Math.max(1, +secs.value || 30)) : 0),
  };
}

// lifecycleReason says why op is not possible from status, or null.
function lifecycleReason(a, status) {
  if (a.from.includes(status)) return null;
  if (status === a.to) return `it is already ${status}`;
  if (status === 'stopped') return 'a stopped experiment is final; create a new one to run it again';
  return `a ${status} experiment cannot be ${a.to}`;
}

export async function experimentPage(page, key) {
  fill(page.el, h('p', {class: 'muted'}, 'Loading…'));
  let e;
  try {
    e = await api('GET', `/v1/experiments/${encodeURIComponent(key)}`);
  } catch (err) {
    if (page.live()) fill(page.el, h('h1', null, key), errorBox(err, 'reading the experiment'));
    return;
  }
  if (!page.live()) return;
  const out = h('div', {id: 'outcome', 'aria-live': 'polite'});
  if (flash?.key === key) {
    fill(out, h('p', null, flash.text), flash.rollout ? outcome(flash.rollout, flash.seconds) : null);
    flash = null;
  }
  const panel = rolloutPanel(e.services, {title: 'Proxies running it'});
  page.onLeave(panel.stop);
  // The outcomes panel re-reads the experiment: a later revision (allotd's
  // guardian moved the ramp or rolled it back, or another owner wrote it)
  // is shown unless a write of this page is under way; the same one
  // refreshes the ramp's hold time. Revisions are int64 strings, below
  // 2^53 in any store allotd runs on.
  let acting = false;
  const outcomes = outcomesPanel(e, (x) => {
    if (acting || !page.live() || Number(x.revision) < Number(e.revision)) return;
    if (x.revision !== e.revision) {
      e = x;
      render();
      return;
    }
    guards.querySelector('#ramp')?.replaceWith(rampProgress(e));
  });
  page.onLeave(outcomes.stop);
  const wait = waitControl('wait');
  const buttons = h('div', {class: 'actions'});
  const reasons = h('ul', {class: 'reasons', id: 'reasons'});
  const head = h('div');
  const meta = h('dl', {class: 'meta'});
  const def = h('pre', {id: 'definition', class: 'json'});
  const guards = h('div');

  const render = () => {
    const status = e.status || 'running';
    fill(head, h('div', {class: 'title-row'}, h('h1', null, e.key, ' ', badge(status)),
      h('span', {class: 'links'},
        h('a', {href: `#/preview?service=${encodeURIComponent(e.services?.[0] || '')}`}, 'Preview'),
        h('a', {href: `#/history/${encodeURIComponent(e.key)}`}, 'History'))),
    e.description ? h('p', {class: 'description'}, e.description) : null);
    fill(meta,
      h('dt', null, 'Owner'), h('dd', null, e.owner || '—'),
      h('dt', null, 'Services'), h('dd', null, e.services?.length ? e.services.join(', ') : 'every proxy'),
      h('dt', null, 'Variations'), h('dd', null, variationsText(e)),
      h('dt', null, 'Schedule'), h('dd', null, e.startTime || e.endTime ? `${fmtTime(e.startTime)} → ${fmtTime(e.endTime)}` : 'always'),
      h('dt', null, 'Revision'), h('dd', {id: 'revision'}, e.revision),
      h('dt', null, 'Created'), h('dd', null, `${fmtTime(e.createTime)} by ${e.createdBy || '—'}`),
      h('dt', null, 'Updated'), h('dd', null, `${fmtTime(e.updateTime)} by ${e.updatedBy || '—'}`));
    def.textContent = JSON.stringify(definition(e), null, 2);
    const writeReason = denied('change', e.owner);
    const why = [];
    if (writeReason) why.push(writeReason);
    const editReason = writeReason || (status === 'stopped' ? 'a stopped experiment is final' : null);
    const controls = [editReason
      ? h('button', {type: 'button', id: 'edit', disabled: true, title: editReason}, 'Edit')
      : h('a', {class: 'button', id: 'edit', href: `#/experiments/${encodeURIComponent(e.key)}/edit`}, 'Edit')];
    if (!writeReason && editReason) why.push(`Edit: ${editReason}`);
    const pending = e.rollback && !e.rollback.acknowledgedBy;
    for (const a of actions) {
      const r = writeReason || lifecycleReason(a, status)
        || (a.op === 'start' && pending ? 'a guardrail rolled it back: acknowledge the rollback and start it below' : null);
      if (!writeReason && r) why.push(`${a.label}: ${r}`);
      controls.push(h('button', {type: 'button', id: `action-${a.op}`, 'data-op': a.op, disabled: !!r, title: r, onclick: () => act(a)}, a.label));
    }
    controls.push(h('button', {type: 'button', id: 'action-delete', class: 'danger', disabled: !!writeReason, title: writeReason, onclick: confirmDelete}, 'Delete'));
    fill(buttons, controls, canWrite(e.owner) ? wait.el : null);
    fill(reasons, why.map((r) => h('li', {class: 'reason'}, r)));
    const canAck = pending && !writeReason && actions[0].from.includes(status);
    fill(guards, guardsPanel(e, canAck ? () => act({...actions[0], label: 'Acknowledge and start'}, {acknowledgeRollback: true}) : null));
  };

  const busy = (on) => buttons.querySelectorAll('button').forEach((b) => { if (on) b.disabled = true; });
  const act = async (a, extra) => {
    const seconds = wait.seconds();
    busy(true);
    acting = true;
    fill(out, h('p', {class: 'muted'}, `${a.label}: `, seconds ? `waiting up to ${seconds} s for the proxies…` : 'sending…'));
    try {
      const res = await api('POST', withWait(`/v1/experiments/${encodeURIComponent(e.key)}:${a.op}`, seconds), {revision: e.revision, ...extra});
      if (!page.live()) return;
      e = seconds ? res.experiment : res;
      fill(out, h('p', null, `${a.label}: now ${e.status || 'running'} at revision ${e.revision}.`), seconds ? outcome(res.rollout, seconds) : null);
    } catch (err) {
      if (!page.live()) return;
      fill(out, errorBox(err, `${a.label} refused`));
    }
    acting = false;
    render();
  };
  const confirmDelete = () => {
    fill(out, h('div', {class: 'confirm'}, h('p', null, `Delete ${e.key}? Its history stays; the proxies stop assigning it.`),
      h('button', {type: 'button', class: 'danger', id: 'confirm-delete', onclick: doDelete}, 'Delete for good'), ' ',
      h('button', {type: 'button', onclick: () => fill(out)}, 'Cancel')));
  };
  const doDelete = async () => {
    const seconds = wait.seconds();
    busy(true);
    try {
      const res = await api('DELETE', withWait(`/v1/experiments/${encodeURIComponent(e.key)}?revision=${e.revision}`, seconds));
      if (!page.live()) return;
      fill(page.el, h('h1', null, e.key), h('p', null, 'Deleted. ', h('a', {href: '#/experiments'}, 'Back to the experiments')),
        res?.rollout ? outcome(res.rollout, seconds) : null);
    } catch (err) {
      if (!page.live()) return;
      fill(out, errorBox(err, 'Delete refused'));
      render();
    }
  };

  render();
  fill(page.el, head, meta, h('section', {class: 'panel'}, h('h2', null, 'Lifecycle'), buttons, reasons, out), guards, outcomes.el, panel.el,
    h('section', {class: 'panel'}, h('h2', null, 'Definition'), def));
}
