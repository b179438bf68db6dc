// An experiment's guardrails, ramp and rollback: what each treatment must
// keep against its control, the coverage steps with the one allotd has
// reached and how long it is held, a rollback with its figures and
// acknowledgement, and each guardrail's sequential test as allotd's
// guardian runs it (GuardrailStatus, in the outcomes panel). They are
// edited as JSON under the form's "Other fields".
import {fill, fmtDuration, fmtTime, h, ms, pct, seconds, summary, table} from './dom.js';

// defaultMinRequests is a guardrail's minRequests when unset
// (experiment.DefaultGuardrailRequests in Go).
const defaultMinRequests = 1000;

// coverageText renders a coverage exactly: 0.05 → "5%".
const coverageText = (c) => `${+(c * 100).toPrecision(6)}%`;

// thresholdText states a guardrail's threshold: errorRate's largest
// increase in percentage points ("≤ +1.0 pt"), latencyP95's largest ratio
// ("≤ ×1.2").
export function thresholdText(metric, threshold) {
  if (threshold == null) return '—';
  return metric === 'errorRate' ? `≤ +${(threshold * 100).toFixed(1)} pt` : `≤ ×${threshold}`;
}

// metricValue renders a variation's value of metric: an error rate in %,
// a p95 in ms.
export const metricValue = (metric, v) => (metric === 'errorRate' ? pct(v) : ms(v));

// estimateText renders a treatment's estimate against its control: the
// error rates' difference in points ("+3.8 pt"), the p95s' ratio ("×1.35").
function estimateText(metric, v) {
  const x = v || 0;
  return metric === 'errorRate' ? `${x < 0 ? '−' : '+'}${Math.abs(x * 100).toFixed(1)} pt` : `×${x.toFixed(2)}`;
}

// pText renders an always-valid p-value with two significant digits.
const pText = (p) => (p == null ? '—' : +p >= 1 ? '1' : (+p).toPrecision(2));

// variationName is variation i's name in e, or its index.
export const variationName = (e, i) => e.variations?.[i] ?? String(i);

// rampProgress renders e's ramp: the steps with the current one marked,
// the coverage, since when the step is held (from the later of the step's
// start and the schedule's, as allotd's guardian counts) and how much of
// its minHold that is at now, or "final step"; null without a ramp.
export function rampProgress(e, now = new Date()) {
  const steps = e.ramp?.steps || [];
  if (!steps.length) return null;
  const st = e.rampState;
  const at = st?.step || 0;
  let where;
  if (!st) {
    where = 'not started: allotd sets the first step once the experiment runs';
  } else {
    let since = st.stepStartTime ? Date.parse(st.stepStartTime) : NaN;
    const start = e.startTime ? Date.parse(e.startTime) : NaN;
    if (start > since) since = start;
    const held = Number.isNaN(since) ? null : Math.max(0, (now.getTime() - since) / 1000);
    const hold = seconds(steps[at].minHold);
    where = [`step ${at + 1} of ${steps.length}, coverage ${coverageText(e.coverage ?? steps[at].coverage)}`,
      held == null ? '' : `, held since ${fmtTime(new Date(since).toISOString())}`,
      at === steps.length - 1 ? '; final step'
        : held == null ? '' : `; held ${fmtDuration(held)} of ${fmtDuration(hold)}${held >= hold ? ': the next step waits for every guardrail holding and every proxy applied' : ''}`].join('');
  }
  return h('p', {id: 'ramp', 'data-step': st ? at : null},
    'Ramp: ', steps.map((s, i) => [i ? ' → ' : '',
      h(st && i === at ? 'strong' : 'span', {class: st && i === at ? 'ramp-current' : null},
        coverageText(s.coverage), seconds(s.minHold) ? ` (hold ${fmtDuration(seconds(s.minHold))})` : '')]),
    h('span', {id: 'ramp-where'}, `; ${where}.`));
}

// rollbackLine says which guardrail rolled e back and how many proxies
// applied it, or null when e has no rollback.
export function rollbackLine(e) {
  const rb = e.rollback;
  if (!rb) return null;
  const applied = rb.appliedTime
    ? `applied by ${rb.applied || 0}/${rb.proxies || 0} proxies at ${fmtTime(rb.appliedTime)}`
    : 'waiting for the proxies';
  return h('p', {class: 'rollback-line'}, `Rolled back by guardrail ${rb.guardrail || 0} (${rb.metric}): ${applied}.`);
}

// stateOf is a guardrail status's state for people, with the class that
// highlights a breach: "collecting (reason)" until evaluated, "holding",
// or "breached — rolled back" (allotd has recorded the rollback of that
// guardrail and variation; until then "breached — rolling back").
function stateOf(e, g) {
  if (!g.evaluated) return {text: `collecting (${g.reason || 'not enough requests'})`, state: 'collecting'};
  if (!g.breached) return {text: 'holding', state: 'holding'};
  const rb = e.rollback;
  const done = rb && (rb.guardrail || 0) === (g.guardrail || 0) && (rb.variation || 0) === (g.variation || 0);
  return {text: done ? 'breached — rolled back' : 'breached — rolling back', state: 'breached'};
}

// guardrailTable lists statuses (the outcomes' guardrails: one per
// guardrail × treatment) for e; each row carries data-guardrail,
// data-variation and data-state, and its cells data-label.
export function guardrailTable(e, statuses) {
  const cols = ['guardrail', 'treatment', 'control value', 'treatment value', 'estimate', 'p-value', 'state'];
  return table(cols, statuses.map((g) => {
    const {text, state} = stateOf(e, g);
    return {
      attrs: {'data-guardrail': g.guardrail || 0, 'data-variation': g.variation || 0, 'data-state': state, class: `guard-${state}`},
      cells: [`${g.metric} ${thresholdText(g.metric, g.threshold)}`,
        `${variationName(e, g.variation || 0)} against ${variationName(e, g.control || 0)}`,
        metricValue(g.metric, g.controlValue), metricValue(g.metric, g.treatmentValue),
        g.evaluated ? estimateText(g.metric, g.estimate) : '—', g.evaluated ? pText(g.pValue ?? 0) : '—', text],
    };
  }), 'guardrail-status');
}

// guardsPanel returns the panel for e, or null when e has no guardrails,
// no ramp and no rollback. ack, when given, is called by the rollback's
// "Acknowledge and start" button (shown only while it is pending).
export function guardsPanel(e, ack) {
  const gs = e.guardrails || [];
  const rb = e.rollback;
  const ramp = rampProgress(e);
  if (!gs.length && !ramp && !rb) return null;
  const el = h('section', {class: 'panel', id: 'guards'}, h('h2', null, 'Guardrails and ramp'),
    summary('The limits each treatment must keep, the ramp\'s steps and any rollback the guardian made.', 'Guardrails and ramps'));
  if (gs.length) {
    el.append(table(['Metric', 'Limit', 'Against variation', 'Minimum requests'], gs.map((g, i) => ({
      attrs: {id: `guardrail-${i}`},
      cells: [g.metric, thresholdText(g.metric, g.maxIncrease ?? g.maxRatio), variationName(e, g.control || 0),
        Number(g.minRequests || defaultMinRequests).toLocaleString('en')],
    })), 'guardrails'));
  }
  el.append(ramp || '');
  if (rb) {
    const pending = !rb.acknowledgedBy;
    const box = h('div', {id: 'rollback', class: pending ? 'error' : 'muted', role: pending ? 'alert' : null});
    fill(box, rollbackLine(e),
      h('p', null, `At ${fmtTime(rb.time)} ${variationName(e, rb.variation || 0)}'s ${rb.metric} was ${metricValue(rb.metric, rb.treatmentValue)}`
        + ` against control ${variationName(e, rb.control || 0)}'s ${metricValue(rb.metric, rb.controlValue)}`
        + ` (${Number(rb.treatmentRequests || 0).toLocaleString('en')} and ${Number(rb.controlRequests || 0).toLocaleString('en')} requests;`
        + ` log Λ ${(rb.statistic || 0).toFixed(1)}, p ${pText(rb.pValue ?? 0)}); rollback write at revision ${rb.revision || '—'}.`),
      pending
        ? h('p', null, 'Not acknowledged: the experiment starts again only with an acknowledgement. ',
          ack ? h('button', {type: 'button', id: 'action-acknowledge', onclick: ack}, 'Acknowledge and start') : null)
        : h('p', null, `Acknowledged by ${rb.acknowledgedBy} at ${fmtTime(rb.acknowledgeTime)}.`));
    el.append(box);
  }
  return el;
}
