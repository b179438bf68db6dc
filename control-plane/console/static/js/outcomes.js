// The outcomes panel of an experiment page: for an experiment that
// observes, each variation's requests, share of traffic beside its weight,
// error rate and latency quantiles since its assignment revision, as
// allotd sums them (GET /v1/experiments/{key}/outcomes), and charts of
// requests, error rate and p95 latency by variation minute by minute over
// the last WINDOW_MINUTES minutes (the API's series, so a reload shows the
// same history), and each guardrail's sequential test per treatment;
// read every OUTCOMES_POLL_MS while the tab is visible, with the
// experiment itself (its ramp and rollback move as allotd's guardian
// writes them).
import {api} from './api.js';
import {errorBox, fill, fmtTime, h, ms, pct, summary, table} from './dom.js';
import {guardrailTable, variationName} from './guards.js';
import {poll} from './rollout.js';

// OUTCOMES_POLL_MS is how often the outcomes are read while the page shows
// them; the proxies' sinks flush every 5 s by default (stats_flush_interval).
export const OUTCOMES_POLL_MS = 2000;

// WINDOW_MINUTES is the window the charts show: the API's largest, every
// minute allotd keeps.
export const WINDOW_MINUTES = 60;

const MINUTE_MS = 60000;

const svgNS = 'http://www.w3.org/2000/svg';

// s builds an SVG element with attributes and children, as h does for HTML.
function s(tag, attrs, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v != null) el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c != null) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// n is a proto3 JSON int64 (a string, absent when 0) as a number.
const n = (x) => Number(x || 0);

// outcomesTable lists each variation's figures; each row carries
// data-variation, and its cells data-label (the column) for the narrow
// layout and for tests.
function outcomesTable(e, vs) {
  const cols = ['variation', 'requests', 'share', 'weight', 'error rate', 'aborted', 'p50', 'p95', 'p99'];
  return table(cols, vs.map((v) => {
    const i = v.variation || 0;
    return {
      attrs: {'data-variation': i, class: `variation-${i % 8}`},
      cells: [h('span', null, h('span', {class: `swatch series-${i % 8}`, 'aria-hidden': 'true'}, '■ '), variationName(e, i)),
        String(n(v.requests)), pct(v.share), pct(v.weight), pct(v.errorRate), String(n(v.aborted)),
        ms(v.latencyMs?.p50), ms(v.latencyMs?.p95), ms(v.latencyMs?.p99)],
    };
  }), 'outcomes');
}

// Chart geometry, in the SVG's user units (it scales to its box).
const W = 400, H = 150, PAD = {l: 52, r: 8, t: 10, b: 22};

// hhmm is a time's hours and minutes in the browser's time zone.
const hhmm = (t) => fmtTime(new Date(t).toISOString()).slice(11, 16);

// runs cuts points [[t, y or null]] into the runs without a null: a
// minute without a value breaks the line rather than bridging it.
function runs(points) {
  const out = [[]];
  for (const p of points) {
    if (p[1] == null) {
      if (out[out.length - 1].length) out.push([]);
    } else {
      out[out.length - 1].push(p);
    }
  }
  return out.filter((r) => r.length);
}

// chart draws each variation's values minute by minute over [t0, t1] (the
// first minute on the axis and the current one): series are [{variation, name,
// points: [[minute start ms, y or null]]}]; fmt renders a y value. Each
// value is a point (a circle carrying data-minute and data-value, with its
// text as <title>) on the variation's line (polylines, broken where a
// minute has no value); since marks the revision's first minute when the
// axis reaches before it.
function chart(metric, title, series, fmt, t0, t1, since) {
  const ys = series.flatMap((x) => x.points.map((p) => p[1]).filter((v) => v != null));
  const yMax = Math.max(...ys, 0) || 1;
  const span = Math.max(t1 - t0, 1);
  const x = (t) => PAD.l + ((t - t0) / span) * (W - PAD.l - PAD.r);
  const y = (v) => H - PAD.b - (v / yMax) * (H - PAD.t - PAD.b);
  const xy = ([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`;
  const id = `chart-${metric}`;
  return h('figure', {class: 'chart-box'},
    h('figcaption', {id: `${id}-title`}, title),
    s('svg', {class: 'chart', 'data-metric': metric, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': `${id}-title`},
      s('line', {class: 'axis', x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b}),
      s('line', {class: 'axis', x1: PAD.l, y1: PAD.t, x2: PAD.l, y2: H - PAD.b}),
      s('line', {class: 'grid', x1: PAD.l, y1: PAD.t, x2: W - PAD.r, y2: PAD.t}),
      s('text', {class: 'tick', x: PAD.l - 4, y: PAD.t + 4, 'text-anchor': 'end'}, fmt(yMax)),
      s('text', {class: 'tick', x: PAD.l - 4, y: H - PAD.b, 'text-anchor': 'end'}, fmt(0)),
      s('text', {class: 'tick', x: PAD.l, y: H - 4}, hhmm(t0)),
      s('text', {class: 'tick', x: W - PAD.r, y: H - 4, 'text-anchor': 'end'}, hhmm(t1)),
      since > t0 ? s('line', {class: 'since', x1: x(since), y1: PAD.t, x2: x(since), y2: H - PAD.b},
        s('title', null, `revision since ${hhmm(since)}: nothing counted before`)) : null,
      series.map((sr) => s('g', {class: `series series-${sr.variation % 8}`, 'data-variation': sr.variation},
        runs(sr.points).map((r) => s('polyline', {class: 'line', points: r.map(xy).join(' ')})),
        sr.points.filter((p) => p[1] != null).map(([t, v]) => s('circle', {
          class: 'point', cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5,
          'data-minute': new Date(t).toISOString(), 'data-value': v,
        }, s('title', null, `${hhmm(t)} ${sr.name}: ${fmt(v)}`)))))));
}

// charts draws outcomes o's series: per variation and minute, the
// requests (every minute of the series, 0 when none), the error rate and
// the p95 latency (minutes with requests, and with a timed response).
function charts(e, o) {
  const vars = o.total.map((v) => v.variation || 0);
  const requests = [], errorRate = [], p95 = [];
  for (const i of vars) {
    const name = variationName(e, i);
    const r = {variation: i, name, points: []}, er = {variation: i, name, points: []}, l = {variation: i, name, points: []};
    for (const m of o.series) {
      const t = Date.parse(m.start);
      const v = (m.variations || []).find((x) => (x.variation || 0) === i);
      r.points.push([t, n(v?.requests)]);
      er.points.push([t, n(v?.requests) ? v.errorRate || 0 : null]);
      l.points.push([t, v?.latencyMs?.p95 ?? null]);
    }
    requests.push(r);
    errorRate.push(er);
    p95.push(l);
  }
  // The x axis spans the series (from the revision's first minute, or the
  // window's), at least a minute wide.
  const t1 = Date.parse(o.series[o.series.length - 1].start);
  const t0 = Math.min(Date.parse(o.series[0].start), t1 - MINUTE_MS);
  const since = Math.floor(Date.parse(o.since) / MINUTE_MS) * MINUTE_MS;
  const count = (v) => String(Math.round(v));
  return [
    chart('requests', 'Requests per minute', requests, count, t0, t1, since),
    chart('errors', 'Error rate per minute (5xx over the requests answered)', errorRate, pct, t0, t1, since),
    chart('p95', 'Latency p95 per minute', p95, (v) => `${v.toFixed(v < 10 ? 1 : 0)} ms`, t0, t1, since),
  ];
}

// legend names each variation's colour.
function legend(e, vs) {
  return h('p', {class: 'legend'}, vs.map((v) => h('span', {class: `swatch series-${(v.variation || 0) % 8}`}, '■ ', variationName(e, v.variation || 0))));
}

// guardrailTests are the guardrails' tests the panel shows: while a
// rolled-back experiment is not running again, those of the revision whose
// outcomes broke the guardrail (the evidence, while allotd keeps it among
// o.earlier); else those of the current revision.
export function guardrailTests(e, o) {
  const rb = e.rollback;
  const status = e.status || 'running';
  if (rb && status !== 'running') {
    const rolled = (o.earlier || []).find((r) => r.revision === String(rb.assignmentRevision || 0));
    if (rolled?.guardrails?.length) return {statuses: rolled.guardrails, revision: rolled.revision};
  }
  return {statuses: o.guardrails, revision: null};
}

// guardrailsPart shows the guardrails' tests of outcomes o for e, or
// nothing when e has no guardrails.
function guardrailsPart(e, o) {
  const {statuses, revision} = guardrailTests(e, o);
  if (!statuses.length) return null;
  return [h('h3', null, 'Guardrails'),
    summary(revision
      ? `The tests that rolled the experiment back, on the totals of revision ${revision}.`
      : 'Each guardrail\'s sequential test of each treatment against its control, on the totals above.', 'Guardrails and ramps'),
    guardrailTable(e, statuses)];
}

// outcomesPanel shows experiment e's outcomes, live; for an experiment that
// does not observe, how to turn it on. It returns {el, stop}. Each read
// also reads the experiment, passed to onExperiment (when given) and used
// for the guardrails' states.
export function outcomesPanel(e, onExperiment) {
  const el = h('section', {class: 'panel outcomes-panel', id: 'outcomes'}, h('h2', null, 'Outcomes'));
  const off = () => h('p', {id: 'outcomes-off'}, 'This experiment does not observe its outcomes: set ', h('code', null, '"observe": true'),
      ' in its definition (Edit, other fields) to count each variation\'s responses and latency. ',
      h('span', {class: 'help-ref muted'}, 'Help: docs/owners.md, ', h('cite', null, '“Watching a variation\'s outcomes”'), '.'));
  if (!e.observe) {
    el.append(off());
    return {el, stop: () => {}};
  }
  el.append(summary('Per variation since the assignment revision: requests, share, error rate, aborted requests, latency.',
    'Watching a variation\'s outcomes'));
  const status = h('p', {class: 'muted live', 'aria-live': 'polite'}, 'Reading the outcomes…');
  const body = h('div');
  const guards = h('div', {id: 'guardrail-tests'});
  const plots = h('div', {class: 'charts'});
  el.append(status, body, guards,
    h('h3', null, `Minute by minute, since the revision (the last ${WINDOW_MINUTES} minutes at most)`),
    summary('One point per minute since the revision; the last is the current minute, still counting.', 'Reading the Outcomes charts'),
    plots);
  const key = encodeURIComponent(e.key);
  let reads = 0;
  const stop = poll(async () => {
    let o;
    try {
      [o, e] = await Promise.all([api('GET', `/v1/experiments/${key}/outcomes?minutes=${WINDOW_MINUTES}`), api('GET', `/v1/experiments/${key}`)]);
    } catch (err) {
      if (err.status === 404) { // observe was turned off meanwhile
        fill(status);
        fill(body, off());
        fill(guards);
        fill(plots);
        return;
      }
      fill(status, errorBox(err, 'outcomes'));
      throw err;
    }
    o.total ||= [];
    o.series ||= [];
    o.guardrails ||= [];
    onExperiment?.(e);
    el.dataset.reads = String(++reads);
    fill(status, `Live: read every ${OUTCOMES_POLL_MS / 1000} s from GET /v1/experiments/${e.key}/outcomes; last read ${fmtTime(new Date().toISOString())}. `,
      `Since revision ${o.revision.slice(0, 12)} (${fmtTime(o.since)}).`);
    const total = o.total.reduce((a, v) => a + n(v.requests), 0);
    fill(body, total ? null : h('p', {class: 'muted'}, 'No request counted yet.'), legend(e, o.total), outcomesTable(e, o.total));
    fill(guards, guardrailsPart(e, o));
    fill(plots, o.total.length && o.series.length ? charts(e, o) : null);
  }, OUTCOMES_POLL_MS);
  return {el, stop};
}
