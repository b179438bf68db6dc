// The experiments page: every experiment, filtered by owner, status and
// service (the API's filters) and searched by key (here, in the list).
import {api, denied} from './api.js';
import {badge, errorBox, fill, fmtTime, h, table, value} from './dom.js';

const statuses = ['draft', 'running', 'paused', 'stopped'];

// qs is "?a=b" for non-empty params, else "".
const qs = (params) => (params.toString() ? `?${params}` : '');

// variationsText renders "control 50% · treatment 50%".
export function variationsText(e) {
  const vs = e.variations || [];
  const ws = e.weights?.length === vs.length ? e.weights : vs.map(() => 1 / vs.length);
  return vs.map((v, i) => `${typeof v === 'string' ? v : value(v)} ${+(ws[i] * 100).toFixed(2)}%`).join(' · ');
}

export async function experimentsPage(page, params) {
  const f = {
    owner: params.get('owner') || '',
    status: params.get('status') || '',
    service: params.get('service') || '',
    q: params.get('q') || '',
  };
  const results = h('div', {id: 'results'}, h('p', {class: 'muted'}, 'Loading…'));
  const owners = h('datalist', {id: 'owners'});
  const services = h('datalist', {id: 'services'});
  const input = (name, label, attrs) => h('label', null, label,
    h('input', {name, id: `filter-${name}`, value: f[name], autocomplete: 'off', ...attrs}));
  const statusSelect = h('select', {name: 'status', id: 'filter-status'},
    h('option', {value: ''}, 'any'),
    statuses.map((s) => h('option', {value: s, selected: f.status === s}, s)));
  const form = h('form', {class: 'filters', role: 'search'},
    input('q', 'Key', {type: 'search', placeholder: 'search by key'}),
    input('owner', 'Owner', {list: 'owners', placeholder: 'any'}),
    h('label', null, 'Status', statusSelect),
    input('service', 'Service', {list: 'services', placeholder: 'any'}),
    owners, services);
  const reason = denied('create');
  const newButton = reason
    ? h('button', {type: 'button', id: 'new-experiment', disabled: true, title: reason}, 'New experiment')
    : h('a', {class: 'button primary', id: 'new-experiment', href: '#/experiments/new'}, 'New experiment');
  fill(page.el,
    h('div', {class: 'title-row'}, h('h1', null, 'Experiments'), newButton),
    reason ? h('p', {class: 'reason', id: 'create-reason'}, reason) : null,
    form, results);

  let all = [];
  const render = () => {
    const q = f.q.trim().toLowerCase();
    const shown = all.filter((e) => !q || e.key.toLowerCase().includes(q));
    if (!shown.length) {
      fill(results, h('p', {class: 'muted', id: 'no-results'}, 'No experiment matches.'));
      return;
    }
    fill(results, table(['key', 'status', 'owner', 'services', 'variations', 'updated'], shown.map((e) => ({
      attrs: {'data-key': e.key},
      cells: [
        h('a', {href: `#/experiments/${encodeURIComponent(e.key)}`}, e.key),
        badge(e.status || 'running'),
        e.owner || '—',
        e.services?.length ? e.services.join(', ') : h('span', {class: 'muted'}, 'every proxy'),
        variationsText(e),
        h('span', null, fmtTime(e.updateTime), h('span', {class: 'muted'}, ` by ${e.updatedBy || '—'}`)),
      ],
    })), 'experiments'));
  };
  const load = async () => {
    const q = new URLSearchParams();
    for (const k of ['owner', 'status', 'service']) if (f[k]) q.set(k, f[k]);
    try {
      const res = await api('GET', `/v1/experiments${qs(q)}`);
      if (!page.live()) return;
      all = res.experiments || [];
      render();
    } catch (err) {
      if (page.live()) fill(results, errorBox(err, 'listing experiments'));
    }
  };
  // Keep the filters in the address, so a filtered list can be bookmarked.
  const remember = () => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    history.replaceState(null, '', `#/experiments${qs(q)}`);
  };
  form.addEventListener('submit', (ev) => ev.preventDefault());
  form.addEventListener('input', (ev) => {
    const name = ev.target.name;
    if (!(name in f)) return;
    f[name] = ev.target.value;
    remember();
    if (name === 'q') render();
    else load();
  });
  load();
  // The filters' suggestions: every owner and service known.
  try {
    const [every, ro] = await Promise.all([api('GET', '/v1/experiments'), api('GET', '/v1/rollout')]);
    if (!page.live()) return;
    const ownerSet = new Set((every.experiments || []).map((e) => e.owner).filter(Boolean));
    const serviceSet = new Set([...(every.experiments || []).flatMap((e) => e.services || []), ...(ro.proxies || []).map((p) => p.cluster)]);
    fill(owners, [...ownerSet].sort().map((o) => h('option', {value: o})));
    fill(services, [...serviceSet].sort().map((s) => h('option', {value: s})));
  } catch {
    // Suggestions only; the list shows its own error.
  }
}
