// The outcomes panel of an experiment page: for an experiment that
// observes, each variation's requests, share of traffic beside its weight,
// error rate and latency quantiles as allotd sums them
// (GET /v1/experiments/{key}/outcomes), read every OUTCOMES_POLL_MS while the
// tab is visible, and charts of requests, error rate and p95 latency by
// variation over time. The API has no time series: the charts are made of
// the figures this page read since it opened (at most MAX_SAMPLES reads),
// and they say so.
import {api} from './api.js';
import {errorBox, fill, fmtTime, h, table} from './dom.js';
import {poll} from './rollout.js';

// OUTCOMES_POLL_MS is how often the outcomes are read while the page shows
// them; the proxies' sinks flush every 5 s by default (stats_flush_interval).
export const OUTCOMES_POLL_MS = 2000;

// MAX_SAMPLES bounds the reads the charts keep: 10 minutes at OUTCOMES_POLL_MS.
export const MAX_SAMPLES = 300;

// WINDOW_MINUTES is the window of the latency quantiles charted (the API's
// default): p95 over the last 5 minutes at each read.
const WINDOW_MINUTES = 5;

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

// pct renders a ratio as a percentage with one decimal: 0.5 → "50.0%".
export const pct = (x) => `${(100 * (x || 0)).toFixed(1)}%`;

// ms renders a latency in milliseconds: "12.3 ms"; "—" when absent.
export const ms = (x) => (x == null ? '—' : `${(+x).toFixed(1)} ms`);

// n is a proto3 JSON int64 (a string, absent when 0) as a number.
const n = (x) => Number(x || 0);

// variationName is variation i's name in e, or its index.
const variationName = (e, i) => e.variations?.[i] ?? String(i);

// outcomesTable lists each variation's figures; each row carries
// data-variation, and its cells data-label (the column) for the narrow
// layout and for tests.
function outcomesTable(e, vs) {
  const cols = ['variation', 'requests', 'share', 'weight', 'error rate', 'p50', 'p95', 'p99'];
  return table(cols, vs.map((v) => {
    const i = v.variation || 0;
    return {
      attrs: {'data-variation': i, class: `variation-${i % 8}`},
      cells: [h('span', null, h('span', {class: `swatch series-${i % 8}`, 'aria-hidden': 'true'}, '■ '), variationName(e, i)),
        String(n(v.requests)), pct(v.share), pct(v.weight), pct(v.errorRate),
        ms(v.latencyMs?.p50), ms(v.latencyMs?.p95), ms(v.latencyMs?.p99)],
    };
  }), 'outcomes');
}

// Chart geometry, in the SVG's user units (it scales to its box).
const W = 400, H = 150, PAD = {l: 52, r: 8, t: 10, b: 22};

// chart draws one line per series over time: series are [{variation,
// points: [[t ms, y]]}]; fmt renders a y value for the axis.
function chart(metric, title, series, fmt, t0, t1) {
  const ys = series.flatMap((x) => x.points.map((p) => p[1]));
  const yMax = Math.max(...ys, 0) || 1;
  const span = Math.max(t1 - t0, 1);
  const x = (t) => PAD.l + ((t - t0) / span) * (W - PAD.l - PAD.r);
  const y = (v) => H - PAD.b - (v / yMax) * (H - PAD.t - PAD.b);
  const id = `chart-${metric}`;
  return h('figure', {class: 'chart-box'},
    h('figcaption', {id: `${id}-title`}, title),
    s('svg', {class: 'chart', 'data-metric': metric, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': `${id}-title`},
      s('line', {class: 'axis', x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b}),
      s('line', {class: 'axis', x1: PAD.l, y1: PAD.t, x2: PAD.l, y2: H - PAD.b}),
      s('line', {class: 'grid', x1: PAD.l, y1: PAD.t, x2: W - PAD.r, y2: PAD.t}),
      s('text', {class: 'tick', x: PAD.l - 4, y: PAD.t + 4, 'text-anchor': 'end'}, fmt(yMax)),
      s('text', {class: 'tick', x: PAD.l - 4, y: H - PAD.b, 'text-anchor': 'end'}, fmt(0)),
      s('text', {class: 'tick', x: PAD.l, y: H - 4}, fmtTime(new Date(t0).toISOString()).slice(11)),
      s('text', {class: 'tick', x: W - PAD.r, y: H - 4, 'text-anchor': 'end'}, fmtTime(new Date(t1).toISOString()).slice(11)),
      series.map((sr) => s('polyline', {
        class: `series series-${sr.variation % 8}`, 'data-variation': sr.variation,
        points: sr.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' '),
      }))));
}

// charts turns the kept reads into three charts: requests per second and
// error rate between consecutive reads (from the totals since the
// revision), and p95 latency over the window at each read.
function charts(samples) {
  const vars = samples[samples.length - 1].total.map((v) => v.variation || 0);
  const perSecond = [], errorRate = [], p95 = [];
  for (const i of vars) {
    const r = {variation: i, points: []}, er = {variation: i, points: []}, l = {variation: i, points: []};
    for (let k = 0; k < samples.length; k++) {
      const cur = samples[k];
      const v = cur.total.find((x) => (x.variation || 0) === i);
      const w = cur.window.find((x) => (x.variation || 0) === i);
      if (w?.latencyMs?.p95 != null) l.points.push([cur.at, w.latencyMs.p95]);
      if (k === 0) continue;
      const prev = samples[k - 1].total.find((x) => (x.variation || 0) === i);
      const dReq = n(v?.requests) - n(prev?.requests);
      const dErr = errors(v) - errors(prev);
      const dt = (cur.at - samples[k - 1].at) / 1000;
      r.points.push([cur.at, dt > 0 ? Math.max(dReq, 0) / dt : 0]);
      er.points.push([cur.at, dReq > 0 ? Math.max(dErr, 0) / dReq : 0]);
    }
    perSecond.push(r);
    errorRate.push(er);
    p95.push(l);
  }
  const t0 = samples[0].at, t1 = samples[samples.length - 1].at;
  return [
    chart('requests', 'Requests per second', perSecond, (v) => v.toFixed(v < 10 ? 1 : 0), t0, t1),
    chart('errors', 'Error rate (5xx and resets over requests)', errorRate, pct, t0, t1),
    chart('p95', `Latency p95 over the last ${WINDOW_MINUTES} minutes`, p95, (v) => `${v.toFixed(v < 10 ? 1 : 0)} ms`, t0, t1),
  ];
}

// errors is a variation's 5xx and resets.
const errors = (v) => n(v?.responses?.['5xx']) + n(v?.responses?.reset);

// legend names each variation's colour.
function legend(e, vs) {
  return h('p', {class: 'legend'}, vs.map((v) => h('span', {class: `swatch series-${(v.variation || 0) % 8}`}, '■ ', variationName(e, v.variation || 0))));
}

// outcomesPanel shows experiment e's outcomes, live; for an experiment that
// does not observe, how to turn it on. It returns {el, stop}.
export function outcomesPanel(e) {
  const el = h('section', {class: 'panel outcomes-panel', id: 'outcomes'}, h('h2', null, 'Outcomes'));
  const off = () => h('p', {id: 'outcomes-off'}, 'This experiment does not observe its outcomes. Set ', h('code', null, '"observe": true'),
      ' in its definition (Edit, then the JSON of the other fields) and the proxies count each variation\'s responses and latency; they appear here within a few seconds.');
  if (!e.observe) {
    el.append(off());
    return {el, stop: () => {}};
  }
  const status = h('p', {class: 'muted live', 'aria-live': 'polite'}, 'Reading the outcomes…');
  const body = h('div');
  const plots = h('div', {class: 'charts'});
  el.append(status, body,
    h('h3', null, 'Over time, since this page opened'),
    h('p', {class: 'muted'}, `The charts are the figures this page read every ${OUTCOMES_POLL_MS / 1000} s since it opened (the last ${MAX_SAMPLES * OUTCOMES_POLL_MS / 60000} minutes at most); the table above is their text.`),
    plots);
  const key = encodeURIComponent(e.key);
  let samples = [];
  const stop = poll(async () => {
    let o;
    try {
      o = await api('GET', `/v1/experiments/${key}/outcomes?minutes=${WINDOW_MINUTES}`);
    } catch (err) {
      if (err.status === 404) { // observe was turned off meanwhile
        fill(status);
        fill(body, off());
        fill(plots);
        return;
      }
      fill(status, errorBox(err, 'outcomes'));
      throw err;
    }
    o.total ||= [];
    o.window ||= [];
    if (samples.length && samples[0].revision !== o.revision) samples = []; // the figures started over
    samples.push({at: Date.now(), revision: o.revision, total: o.total, window: o.window});
    if (samples.length > MAX_SAMPLES) samples.shift();
    el.dataset.samples = String(samples.length);
    fill(status, `Live: read every ${OUTCOMES_POLL_MS / 1000} s from GET /v1/experiments/${e.key}/outcomes; last read ${fmtTime(new Date().toISOString())}. `,
      `Since revision ${o.revision.slice(0, 12)} (${fmtTime(o.since)}).`);
    const total = o.total.reduce((a, v) => a + n(v.requests), 0);
    fill(body, total ? null : h('p', {class: 'muted'}, 'No request counted yet.'), legend(e, o.total), outcomesTable(e, o.total));
    fill(plots, o.total.length ? charts(samples) : null);
  }, OUTCOMES_POLL_MS);
  return {el, stop};
}
