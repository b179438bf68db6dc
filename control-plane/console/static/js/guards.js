// An experiment's guardrails, ramp and rollback, read-only: what each
// treatment must keep against its control, the coverage steps with the one
// allotd has reached, and a rollback with its figures and acknowledgement.
// They are edited as JSON under the form's "Other fields".
import {fill, fmtTime, h, table} from './dom.js';

// defaultMinRequests is a guardrail's minRequests when unset
// (experiment.DefaultGuardrailRequests in Go).
const defaultMinRequests = 1000;

const pct = (c) => `${+(c * 100).toPrecision(6)}%`;

// limitText states a guardrail's threshold for people.
function limitText(g) {
  if (g.maxIncrease !== undefined) return `at most +${+(g.maxIncrease * 100).toPrecision(6)} percentage points`;
  if (g.maxRatio !== undefined) return `at most ×${g.maxRatio}`;
  return '—';
}

// guardsPanel returns the panel for e, or null when e has no guardrails,
// no ramp and no rollback. ack, when given, is called by the rollback's
// "Acknowledge and start" button (shown only while it is pending).
export function guardsPanel(e, ack) {
  const gs = e.guardrails || [];
  const steps = e.ramp?.steps || [];
  const rb = e.rollback;
  if (!gs.length && !steps.length && !rb) return null;
  const el = h('section', {class: 'panel', id: 'guards'}, h('h2', null, 'Guardrails and ramp'));
  if (gs.length) {
    el.append(table(['Metric', 'Limit', 'Against variation', 'Minimum requests'], gs.map((g, i) => ({
      attrs: {id: `guardrail-${i}`},
      cells: [g.metric, limitText(g), String(g.control || 0), Number(g.minRequests || defaultMinRequests).toLocaleString('en')],
    })), 'guardrails'));
  }
  if (steps.length) {
    const at = e.rampState?.step || 0;
    el.append(h('p', {id: 'ramp'}, 'Ramp: ', steps.map((s, i) => [i ? ' → ' : '',
      h(i === at ? 'strong' : 'span', {class: i === at ? 'ramp-current' : null},
        `${pct(s.coverage)}`, s.minHold && s.minHold !== '0s' ? ` (hold ${s.minHold})` : '')]),
    `; at step ${at + 1} of ${steps.length}`, e.rampState?.stepStartTime ? ` since ${fmtTime(e.rampState.stepStartTime)}` : '', '.'));
  }
  if (rb) {
    const pending = !rb.acknowledgedBy;
    const box = h('div', {id: 'rollback', class: pending ? 'error' : 'muted', role: pending ? 'alert' : null});
    fill(box,
      h('p', null, `Rolled back at ${fmtTime(rb.time)} by guardrails[${rb.guardrail || 0}] (${rb.metric}): variation ${rb.variation || 0} `
        + `${rb.treatmentValue ?? '—'} against control ${rb.control || 0} ${rb.controlValue ?? '—'} `
        + `(${rb.treatmentRequests || 0} and ${rb.controlRequests || 0} requests; statistic ${rb.statistic ?? '—'}, p ${rb.pValue ?? '—'}).`),
      h('p', null, `Rollback write at revision ${rb.revision || '—'}, applied by ${rb.applied || 0} of ${rb.proxies || 0} proxies`,
        rb.appliedTime ? ` at ${fmtTime(rb.appliedTime)}` : '', '.'),
      pending
        ? h('p', null, 'Not acknowledged: the experiment starts again only with an acknowledgement. ',
          ack ? h('button', {type: 'button', id: 'action-acknowledge', onclick: ack}, 'Acknowledge and start') : null)
        : h('p', null, `Acknowledged by ${rb.acknowledgedBy} at ${fmtTime(rb.acknowledgeTime)}.`));
    el.append(box);
  }
  return el;
}
