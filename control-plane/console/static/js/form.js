// The form that creates and edits an experiment. It sends the whole
// definition to the API (POST, or PUT with the revision read) and shows
// the API's field errors beside their fields; fields the form has no input
// for are edited as JSON under "Other fields".
import {api, denied, me, withWait} from './api.js';
import {definition} from './diff.js';
import {errorBox, fill, h} from './dom.js';
import {setFlash, waitControl} from './experiment.js';
import {outcome, rolloutPanel} from './rollout.js';

// fields are the inputs, by the experiment field they edit.
const fields = ['key', 'owner', 'status', 'description', 'services', 'variations', 'weights', 'coverage', 'hashAttribute', 'condition', 'startTime', 'endTime'];

// others are the resource's fields edited as JSON under "Other fields".
const others = ['fallbackAttribute', 'hashVersion', 'seed', 'namespace', 'force', 'filters', 'ranges', 'bucketVersion', 'minBucketVersion', 'disableStickyBucketing', 'observe',
  'guardrails', 'ramp'];

// state are the fields allotd writes; the API keeps them whatever a write
// sends, so the form leaves them out.
const state = ['rampState', 'rollback'];

// variationLine shows one variation: a string as it is, unless it would
// read back as another JSON value ("1", "true", "\"x\""), which is quoted.
function variationLine(v) {
  if (typeof v !== 'string') return JSON.stringify(v);
  try {
    JSON.parse(v);
    return JSON.stringify(v);
  } catch {
    return v;
  }
}

// parseVariation reads a line back: JSON if it is a JSON value, else the
// string itself.
function parseVariation(line) {
  try {
    const v = JSON.parse(line);
    if (v === null || typeof v !== 'object') return v;
  } catch {
    // a plain string
  }
  return line;
}

export async function formPage(page, key) {
  const editing = key != null;
  let e = {};
  if (editing) {
    try {
      e = await api('GET', `/v1/experiments/${encodeURIComponent(key)}`);
    } catch (err) {
      if (page.live()) fill(page.el, h('h1', null, `Edit ${key}`), errorBox(err, 'reading the experiment'));
      return;
    }
    if (!page.live()) return;
  }
  const caller = me();
  const reason = editing ? denied('change', e.owner) : denied('create');

  const errs = {};
  const inputs = {};
  const row = (name, label, control, help) => {
    inputs[name] = control;
    control.id = `f-${name}`;
    control.name = name;
    errs[name] = h('p', {class: 'field-error', id: `err-${name}`, 'aria-live': 'polite'});
    return h('div', {class: 'field', 'data-field': name},
      h('label', {for: control.id}, label), control,
      help ? h('p', {class: 'help'}, help) : null, errs[name]);
  };
  const text = (v, attrs) => h('input', {type: 'text', value: v ?? '', autocomplete: 'off', spellcheck: 'false', ...attrs});
  const area = (v, rows) => h('textarea', {rows, spellcheck: 'false'}, v ?? '');

  const ownerControl = caller.role === 'owner'
    ? h('select', null, caller.namespaces.map((ns) => h('option', {value: ns, selected: e.owner === ns}, ns)),
      editing && !caller.namespaces.includes(e.owner) ? h('option', {value: e.owner, selected: true}, e.owner) : null)
    : text(e.owner, {placeholder: 'an owner namespace, e.g. team-a'});
  const statusControl = h('select', null, ['running', 'draft'].map((s) => h('option', {value: s, selected: (e.status || 'running') === s}, s)));
  const rest = {};
  for (const [k, v] of Object.entries(definition(e))) if (!fields.includes(k) && !state.includes(k)) rest[k] = v;
  const wait = waitControl('form-wait');
  const general = h('div', {id: 'form-errors', 'aria-live': 'polite'});
  const progress = h('div', {id: 'form-progress'});
  const submit = h('button', {type: 'submit', class: 'primary', id: 'submit', disabled: !!reason, title: reason}, editing ? 'Save' : 'Create');

  const form = h('form', {class: 'experiment-form', novalidate: true},
    row('key', 'Key', text(e.key, {readonly: editing, placeholder: 'checkout-button', required: true}),
      'The header suffix: x-experiment-<key>. Lowercase letters, digits, ".", "_", "-".'),
    row('owner', 'Owner', ownerControl),
    editing ? null : row('status', 'Status', statusControl, 'Start, pause and stop later from the experiment\'s page.'),
    row('description', 'Description', area(e.description, 2), 'At most 4,096 bytes.'),
    row('services', 'Services', text((e.services || []).join(', '), {placeholder: 'every proxy'}),
      'The Envoy clusters whose proxies run it, separated by commas (at most 64); empty: every proxy. '
      + 'The headers a request of one service gets from all its running experiments must stay within 16,384 bytes.'),
    row('variations', 'Variations', area((e.variations || ['control', 'treatment']).map(variationLine).join('\n'), 3),
      'One header value a line (at least two, at most 64; each at most 4,096 bytes).'),
    row('weights', 'Weights', text((e.weights || []).join(', '), {placeholder: 'equal'}),
      'Each variation\'s share of the traffic, separated by commas, summing to 1; empty: equal.'),
    row('coverage', 'Coverage', text(e.coverage ?? '', {placeholder: '1', inputmode: 'decimal'}),
      'The fraction of units included, 0 to 1; empty: 1.'),
    row('hashAttribute', 'Hash attribute', text(e.hashAttribute, {placeholder: 'id'}), 'The attribute whose value picks the variation; empty: id (the unit header).'),
    row('condition', 'Condition', area(e.condition ? JSON.stringify(e.condition, null, 2) : '', 3),
      'A GrowthBook targeting condition as JSON, e.g. {"country": "NL"}; empty: everyone.'),
    row('startTime', 'Start time', text(e.startTime, {placeholder: 'RFC 3339, e.g. 2030-01-01T00:00:00Z'})),
    row('endTime', 'End time', text(e.endTime, {placeholder: 'RFC 3339'})),
    row('rest', 'Other fields', area(Object.keys(rest).length ? JSON.stringify(rest, null, 2) : '', 3),
      `Any other field of the experiment resource as a JSON object: ${others.join(', ')}.`),
    h('div', {class: 'actions'}, submit, wait.el, h('a', {href: editing ? `#/experiments/${encodeURIComponent(key)}` : '#/experiments'}, 'Cancel')));

  // read builds the experiment from the inputs; problems found before
  // sending (a weight that is not a number, JSON that does not parse) are
  // field errors too.
  const read = () => {
    const problems = {};
    const val = (n) => inputs[n]?.value.trim() ?? '';
    const out = {key: val('key')};
    if (val('owner')) out.owner = val('owner');
    out.status = editing ? e.status : val('status');
    if (!out.status) delete out.status;
    if (val('description')) out.description = val('description');
    const services = val('services').split(',').map((s) => s.trim()).filter(Boolean);
    if (services.length) out.services = services;
    out.variations = inputs.variations.value.split('\n').map((l) => l.trim()).filter(Boolean).map(parseVariation);
    if (val('weights')) {
      const ws = val('weights').split(',').map((s) => s.trim());
      const bad = ws.filter((w) => w === '' || !Number.isFinite(Number(w)));
      if (bad.length) problems.weights = `not a number: ${bad.map((b) => JSON.stringify(b)).join(', ')}`;
      else out.weights = ws.map(Number);
    }
    if (val('coverage')) {
      if (Number.isFinite(Number(val('coverage')))) out.coverage = Number(val('coverage'));
      else problems.coverage = `not a number: ${JSON.stringify(val('coverage'))}`;
    }
    if (val('hashAttribute')) out.hashAttribute = val('hashAttribute');
    for (const [name, want] of [['condition', 'a JSON object'], ['rest', 'a JSON object']]) {
      if (!val(name)) continue;
      try {
        const v = JSON.parse(val(name));
        if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error(`want ${want}`);
        if (name === 'condition') out.condition = v;
        else {
          const clash = Object.keys(v).filter((k) => fields.includes(k) || k === 'revision');
          if (clash.length) throw new Error(`${clash.join(', ')}: set in its own field`);
          Object.assign(out, v);
        }
      } catch (err) {
        problems[name] = err.message;
      }
    }
    if (val('startTime')) out.startTime = val('startTime');
    if (val('endTime')) out.endTime = val('endTime');
    if (editing) out.revision = e.revision;
    return {out, problems};
  };

  // show puts each "path: message" detail beside its field (the first
  // segment of the path names it); the rest go above the form.
  const show = (details, message) => {
    const rest = [];
    for (const d of details) {
      const i = d.indexOf(': ');
      const path = i < 0 ? '' : d.slice(0, i);
      const root = path.split(/[.[]/)[0];
      const target = errs[root] ? root : (others.includes(root) ? 'rest' : null);
      if (target) {
        errs[target].append(h('span', null, target === root && path === root ? d.slice(i + 2) : d));
        inputs[target].setAttribute('aria-invalid', 'true');
      } else {
        rest.push(d);
      }
    }
    const placed = details.length - rest.length;
    fill(general, h('div', {class: 'error', role: 'alert'},
      h('p', null, message, placed ? ` (${placed === 1 ? 'the field' : `${placed} fields`} marked below)` : ''),
      rest.length ? h('ul', null, rest.map((d) => h('li', null, d))) : null));
  };
  const clear = () => {
    for (const n of Object.keys(errs)) {
      fill(errs[n]);
      inputs[n].removeAttribute('aria-invalid');
    }
    fill(general);
  };

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear();
    const {out, problems} = read();
    if (Object.keys(problems).length) {
      show(Object.entries(problems).map(([f, m]) => `${f}: ${m}`), 'Fix the fields marked below.');
      return;
    }
    const seconds = wait.seconds();
    submit.disabled = true;
    let panel = null;
    if (seconds) {
      panel = rolloutPanel(out.services, {title: 'Proxies'});
      page.onLeave(panel.stop);
      fill(progress, h('p', {class: 'muted'}, `${editing ? 'Saving' : 'Creating'}: waiting up to ${seconds} s for the proxies to apply it…`), panel.el);
    }
    const here = location.hash;
    try {
      const path = editing ? `/v1/experiments/${encodeURIComponent(key)}` : '/v1/experiments';
      const res = await api(editing ? 'PUT' : 'POST', withWait(path, seconds), out);
      const saved = seconds ? res.experiment : res;
      setFlash({key: saved.key, text: `${editing ? 'Saved' : 'Created'} at revision ${saved.revision}.`, rollout: res.rollout, seconds});
      if (page.live() && location.hash === here) location.hash = `#/experiments/${encodeURIComponent(saved.key)}`;
    } catch (err) {
      if (!page.live()) return;
      fill(progress);
      if (err.details?.length) show(err.details, err.message);
      else fill(general, errorBox(err, editing ? 'Saving refused' : 'Creating refused'));
    } finally {
      panel?.stop();
      submit.disabled = !!reason;
    }
  });

  fill(page.el,
    h('h1', null, editing ? `Edit ${key}` : 'New experiment'),
    reason ? h('p', {class: 'reason', id: 'form-reason'}, reason) : null,
    general, form, progress);
}
