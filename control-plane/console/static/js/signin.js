// Sign-in: an admin API token, checked with GET /v1/whoami and kept in
// this tab's sessionStorage only.
import {signIn} from './api.js';
import {errorBox, fill, h, summary} from './dom.js';

export function signinPage(page, {next, message}) {
  const input = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true, spellcheck: 'false'});
  const out = h('div', {id: 'signin-error', 'aria-live': 'polite'}, message ? errorBox(message) : null);
  const button = h('button', {type: 'submit', class: 'primary', id: 'signin'}, 'Sign in');
  const form = h('form', {class: 'signin panel'},
    h('h1', null, 'Sign in'),
    summary('Paste an admin API token; it stays in this browser tab until you sign out or close it.', 'Web console'),
    h('div', {class: 'field'}, h('label', {for: 'token'}, 'Token'), input),
    h('div', {class: 'actions'}, button),
    out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    try {
      await signIn(input.value.trim());
      const target = next && next !== '#/signin' ? next : '#/experiments';
      if (location.hash === target) window.dispatchEvent(new HashChangeEvent('hashchange'));
      else location.hash = target;
    } catch (err) {
      if (page.live()) fill(out, errorBox(err, 'Sign-in refused'));
    } finally {
      button.disabled = false;
    }
  });
  fill(page.el, form);
  input.focus();
}
