// page.mjs evaluates flags with OpenFeature's OFREP web provider, then calls
// a backend through the same gateway, and writes both into the DOM:
//
//   index.html?ofrep=BASE_URL&unit=UNIT&flags=KEY,KEY&backend=URL
//
// - BASE_URL: where OFREP is served (the provider posts to
//   BASE_URL/ofrep/v1/evaluate/flags), e.g. the gateway's origin;
// - UNIT: the evaluation context's targetingKey, also sent as x-user-id on
//   the backend request;
// - KEY: a flag (string-valued) to evaluate;
// - URL: the backend, answered by an echo of the request it received.
//
// Every fetch carries credentials (cookies), so the gateway's sticky cookie
// set on the OFREP reply goes with the backend request. The page writes
// <li id="flag-KEY" data-value data-variant data-reason data-error> per flag,
// <li id="header-KEY" data-value> with the x-experiment-KEY header the
// backend saw ("" when none), and sets body[data-done] to "ok", or to
// "error" with the message in #error.
import { OpenFeature } from '@openfeature/web-sdk';
import { OFREPWebProvider } from '@openfeature/ofrep-web-provider';

const q = new URLSearchParams(location.search);
const unit = q.get('unit');
const flags = (q.get('flags') || '').split(',').filter(Boolean);

// withCredentials is the provider's fetch: the browser's, sending and
// storing cookies across origins (CORS with credentials).
const withCredentials = (input, init) => fetch(input, { ...init, credentials: 'include' });

function item(list, id, data) {
  const li = document.createElement('li');
  li.id = id;
  for (const [k, v] of Object.entries(data)) li.dataset[k] = v ?? '';
  li.textContent = `${id}: ${JSON.stringify(data)}`;
  document.getElementById(list).append(li);
}

async function main() {
  const provider = new OFREPWebProvider({
    baseUrl: q.get('ofrep'),
    fetchImplementation: withCredentials,
    cacheMode: 'disabled', // every page load asks the gateway
    changeDetection: 'none',
  });
  await OpenFeature.setProviderAndWait(provider, { targetingKey: unit });
  const client = OpenFeature.getClient();
  for (const key of flags) {
    const d = client.getStringDetails(key, '');
    item('flags', `flag-${key}`, { value: d.value, variant: d.variant, reason: d.reason, error: d.errorCode });
  }

  const r = await fetch(q.get('backend'), { credentials: 'include', headers: { 'x-user-id': unit } });
  if (!r.ok) throw new Error(`backend: status ${r.status}`);
  const echo = await r.json();
  for (const key of flags) {
    const v = echo.headers[`x-experiment-${key}`];
    item('headers', `header-${key}`, { value: v ? v.join(',') : '' });
  }
}

main().then(
  () => { document.body.dataset.done = 'ok'; },
  (e) => {
    document.getElementById('error').textContent = String(e && e.stack ? e.stack : e);
    document.body.dataset.done = 'error';
  },
);
