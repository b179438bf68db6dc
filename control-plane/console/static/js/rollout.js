// The rollout view: every proxy connected to allotd, its cluster, the
// configuration version it runs and whether it applied, is waiting for
// (pending) or rejected its cluster's current version. It polls
// GET /v1/rollout every POLL_MS while shown.
import {api} from './api.js';
import {badge, errorBox, fill, fmtTime, h, shortVersion, summary, table} from './dom.js';

// POLL_MS is how often rollout status is read while a view shows it.
export const POLL_MS = 1000;

// poll calls f now and then POLL_MS after each call ends (never two at
// once), skipping ticks while the tab is hidden; it returns the stop
// function.
export function poll(f, ms = POLL_MS) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try {
        await f();
      } catch {
        // f shows its own errors; keep polling.
      }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// concerns reports whether proxy p runs an experiment targeted at
// services (empty: every proxy).
const concerns = (services, p) => !services?.length || services.includes(p.cluster);

// proxiesTable lists proxies; each row carries data-node and data-state.
function proxiesTable(proxies, replicas) {
  const cols = ['proxy', 'cluster', 'state', 'runs', 'should run', 'artifact'];
  if (replicas) cols.push('replica');
  cols.push('message');
  return table(cols, proxies.map((p) => {
    const cells = [p.nodeId, p.cluster, badge(p.state), shortVersion(p.ackedVersion), shortVersion(p.targetVersion), p.artifact || 'wasm'];
    if (replicas) cells.push(p.replica || '—');
    cells.push(p.rejectionError ? `rejected ${shortVersion(p.rejectedVersion)}: ${p.rejectionError}` : (p.error || ''));
    return {attrs: {'data-node': p.nodeId, 'data-state': p.state, class: `state-${p.state}`}, cells};
  }), 'proxies');
}

// counts renders {applied: 2, pending: 1} as badges with numbers.
function counts(proxies) {
  const by = {};
  for (const p of proxies) by[p.state] = (by[p.state] || 0) + 1;
  const states = ['applied', 'pending', 'rejected', 'unserved'].filter((s) => by[s]);
  if (!states.length) return h('p', {class: 'muted'}, 'No proxy is connected.');
  return h('p', {class: 'counts'}, states.map((s) => h('span', {class: 'count'}, badge(s), ` ${by[s]}`)));
}

// rolloutPanel shows, live, the proxies an experiment targeted at services
// concerns (every proxy when services is empty). full adds the clusters'
// target versions and allotd's replicas (the rollout page). It returns
// {el, stop}.
export function rolloutPanel(services, {full = false, title = 'Proxies'} = {}) {
  const status = h('p', {class: 'muted live', 'aria-live': 'polite'}, `Reading rollout status (every ${POLL_MS / 1000} s)…`);
  const body = h('div');
  const el = h('section', {class: 'panel rollout-panel'},
    h('h2', null, title), status, body);
  const scope = services?.length ? `the proxies of ${services.join(', ')}` : 'every proxy';
  const stop = poll(async () => {
    let ro;
    try {
      ro = await api('GET', '/v1/rollout');
    } catch (err) {
      fill(status, errorBox(err, 'rollout status'));
      throw err;
    }
    const proxies = (ro.proxies || []).filter((p) => concerns(services, p));
    const replicas = ro.replicas?.length ? ro.replicas : null;
    fill(status, `Live: ${scope}, read every ${POLL_MS / 1000} s from GET /v1/rollout; last read ${fmtTime(new Date().toISOString())}.`);
    const parts = [counts(proxies)];
    if (proxies.length) parts.push(proxiesTable(proxies, replicas));
    if (full) {
      const targets = Object.entries(ro.targets || {}).sort(([a], [b]) => a.localeCompare(b));
      parts.push(h('h3', null, 'Versions each cluster should run'));
      parts.push(targets.length
        ? table(['cluster', 'version'], targets.map(([c, v]) => ({attrs: {'data-cluster': c}, cells: [c, v]})), 'targets')
        : h('p', {class: 'muted'}, 'No cluster is connected.'));
      if (replicas) {
        parts.push(h('h3', null, 'allotd replicas'));
        parts.push(table(['replica', 'admin', 'xDS', 'store revision', 'proxies'],
          replicas.map((r) => ({cells: [r.id, r.adminAddr, r.xdsAddr, r.revision, r.proxies || 0]}))));
      }
    }
    fill(body, parts);
  });
  return {el, stop};
}

// rolloutPage is the rollout view of every proxy.
export function rolloutPage(page) {
  const panel = rolloutPanel(null, {full: true, title: 'Every proxy'});
  page.onLeave(panel.stop);
  fill(page.el,
    h('h1', null, 'Rollout'),
    summary('Every proxy: the version it runs against its cluster\'s, and whether it applied, rejected or was not served it.',
      'Knowing a change is live: wait and rollout status'),
    panel.el);
}

// outcome renders a waited write's rollout: the result, counts, and every
// proxy that did not apply with its reason.
export function outcome(ro, seconds) {
  const c = ro.counts || {};
  const total = Object.values(c).reduce((a, b) => a + b, 0);
  const applied = c.applied || 0;
  let text;
  switch (ro.result) {
    case 'applied':
      text = total ? `applied by ${applied} of ${total} proxies` : 'applied: no connected proxy\'s configuration had to change';
      break;
    case 'timeout':
      text = `not applied everywhere within ${seconds} s: ${applied} of ${total} proxies applied it`;
      break;
    case 'rejected':
      text = `rejected: ${c.rejected || 0} of ${total} proxies refused it, ${applied} applied it`;
      break;
    default:
      text = `${ro.result}: ${applied} of ${total} proxies applied it`;
  }
  return h('div', {class: `outcome outcome-${ro.result}`, 'data-result': ro.result},
    h('p', null, h('strong', null, 'Rollout: '), text),
    ro.error ? h('p', {class: 'muted'}, ro.error) : null,
    ro.proxies?.length ? proxiesTable(ro.proxies, null) : null);
}
