// The preview: what the proxies of a service would assign for a unit's
// attributes (POST /v1/evaluate), and the headers its requests would carry
// to the service.
import {api} from './api.js';
import {errorBox, fill, h, summary, table, value} from './dom.js';

export async function previewPage(page, params) {
  const service = h('input', {id: 'p-service', name: 'service', list: 'p-services', autocomplete: 'off', value: params.get('service') || '', placeholder: 'no particular service'});
  const services = h('datalist', {id: 'p-services'});
  const attrs = h('textarea', {id: 'p-attributes', name: 'attributes', rows: 4, spellcheck: 'false'},
    JSON.stringify({id: params.get('id') || 'alice'}, null, 2));
  const at = h('input', {id: 'p-time', name: 'time', autocomplete: 'off', placeholder: 'now (or RFC 3339)'});
  const result = h('div', {id: 'preview-result', 'aria-live': 'polite'});
  const form = h('form', {class: 'experiment-form'},
    h('div', {class: 'field'}, h('label', {for: 'p-service'}, 'Service'), service, services,
      h('p', {class: 'help'}, 'The Envoy cluster whose proxies to emulate; empty: only experiments targeted at no service apply.')),
    h('div', {class: 'field'}, h('label', {for: 'p-attributes'}, 'Attributes'), attrs,
      h('p', {class: 'help'}, 'The unit\'s attributes as the filter extracts them: "id" from the unit header (x-user-id by default), the others from the mesh\'s attribute sources.')),
    h('div', {class: 'field'}, h('label', {for: 'p-time'}, 'Time'), at),
    h('div', {class: 'actions'}, h('button', {type: 'submit', class: 'primary', id: 'evaluate'}, 'Evaluate')));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let attributes;
    try {
      attributes = JSON.parse(attrs.value || '{}');
      if (attributes === null || typeof attributes !== 'object' || Array.isArray(attributes)) throw new Error('want a JSON object');
    } catch (err) {
      fill(result, errorBox({message: `attributes: ${err.message}`}));
      return;
    }
    const body = {service: service.value.trim(), attributes};
    if (at.value.trim()) body.time = at.value.trim();
    fill(result, h('p', {class: 'muted'}, 'Evaluating…'));
    let res;
    try {
      res = await api('POST', '/v1/evaluate', body);
    } catch (err) {
      if (page.live()) fill(result, errorBox(err, 'evaluation refused'));
      return;
    }
    if (!page.live()) return;
    const as = res.assignments || [];
    const inExp = as.filter((a) => a.inExperiment);
    fill(result,
      h('h2', null, 'Headers the service receives'),
      inExp.length
        ? h('pre', {id: 'headers', class: 'headers'}, inExp.map((a) => `${a.header}: ${a.value}`).join('\n'))
        : h('p', {id: 'headers', class: 'muted'}, 'No assignment header: the unit is in no experiment.'),
      h('p', {class: 'muted'}, `Configuration version ${res.version || '—'} (${as.length} experiment${as.length === 1 ? '' : 's'} evaluated for ${body.service || 'no particular service'}).`),
      as.length ? table(['experiment', 'in experiment', 'value', 'variation', 'hashed'], as.map((a) => ({
        attrs: {'data-experiment': a.experiment},
        cells: [h('a', {href: `#/experiments/${encodeURIComponent(a.experiment)}`}, a.experiment), a.inExperiment ? 'yes' : 'no',
          a.inExperiment ? a.value : '—', a.variationId,
          a.hashValue ? `${a.hashAttribute} = ${value(a.hashValue)}${a.hashUsed ? '' : ' (not used)'}` : `${a.hashAttribute || 'id'} missing`],
      })), 'assignments') : null);
  });

  fill(page.el, h('h1', null, 'Preview'),
    summary('What the proxies of a service would assign now, and the headers the service would receive.', 'Web console'),
    form, result);
  try {
    const ro = await api('GET', '/v1/rollout');
    const every = await api('GET', '/v1/experiments');
    if (!page.live()) return;
    const set = new Set([...(ro.proxies || []).map((p) => p.cluster), ...(every.experiments || []).flatMap((e) => e.services || [])]);
    fill(services, [...set].sort().map((s) => h('option', {value: s})));
  } catch {
    // Suggestions only.
  }
}
