// The console's entry point: hash routes (#/experiments, #/rollout, ...),
// the navigation bar, and sign-in when the tab holds no token.
import {describe, me, setUnauthenticated, signOut, token, whoami} from './api.js';
import {errorBox, fill, h} from './dom.js';
import {experimentPage} from './experiment.js';
import {experimentsPage} from './experiments.js';
import {formPage} from './form.js';
import {historyPage} from './history.js';
import {previewPage} from './preview.js';
import {rolloutPage} from './rollout.js';
import {signinPage} from './signin.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

// routes map a hash path to its section (for the navigation bar) and page.
const routes = [
  [/^\/experiments\/new$/, 'experiments', (p) => formPage(p, null)],
  [/^\/experiments\/([^/]+)\/edit$/, 'experiments', (p, m) => formPage(p, m[1])],
  [/^\/experiments\/([^/]+)$/, 'experiments', (p, m) => experimentPage(p, m[1])],
  [/^\/experiments$/, 'experiments', (p, m, q) => experimentsPage(p, q)],
  [/^\/rollout$/, 'rollout', (p) => rolloutPage(p)],
  [/^\/preview$/, 'preview', (p, m, q) => previewPage(p, q)],
  [/^\/history$/, 'history', (p) => historyPage(p, null)],
  [/^\/history\/([^/]+)$/, 'history', (p, m) => historyPage(p, m[1])],
];

// current is the page shown: live() turns false once another replaces it,
// and the functions given to onLeave (pollers' stops) run then.
let current = null;
let generation = 0;
let refusal = null; // {err, next}: why the last token was refused, and where the tab was

function newPage() {
  current?.leave();
  const gen = ++generation;
  const leaving = [];
  current = {
    el: main,
    live: () => gen === generation,
    onLeave: (f) => leaving.push(f),
    leave: () => leaving.splice(0).forEach((f) => f()),
  };
  return current;
}

function header(section) {
  nav.hidden = !me();
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  fill(who, me() ? [h('span', {id: 'caller'}, describe()), ' ',
    h('button', {type: 'button', id: 'signout', onclick: signOutNow}, 'Sign out')] : null);
}

function signOutNow() {
  signOut();
  if (location.hash === '#/signin') route();
  else location.hash = '#/signin';
}

async function route() {
  const raw = location.hash.replace(/^#/, '') || '/experiments';
  const [path, query] = raw.split('?');
  const page = newPage();
  if (!token() || path === '/signin') {
    header(null);
    page.signin = true;
    const next = path === '/signin' ? refusal?.next : `#${raw}`;
    signinPage(page, {next, message: refusal?.err});
    refusal = null;
    return;
  }
  if (!me()) {
    try {
      await whoami();
    } catch (err) {
      if (err.status !== 401 && page.live()) {
        header(null);
        fill(main, errorBox(err, 'Asking allotd who you are'));
      }
      return;
    }
    if (!page.live()) return;
  }
  for (const [re, section, show] of routes) {
    const m = path.match(re);
    if (!m) continue;
    header(section);
    show(page, m.map((s, i) => (i ? decodeURIComponent(s) : s)), new URLSearchParams(query || ''));
    return;
  }
  header(null);
  fill(main, h('h1', null, 'Not found'), h('p', null, 'No page at ', h('code', null, raw), '. ', h('a', {href: '#/experiments'}, 'The experiments')));
}

// A refused token (revoked, allotd restarted with another tokens file)
// sends the tab back to sign-in with the API's reason, and from there back
// to where it was.
setUnauthenticated((err) => {
  signOut();
  if (current?.signin) return; // the sign-in page shows the refusal itself
  refusal = {err, next: location.hash};
  location.hash = '#/signin';
});

window.addEventListener('hashchange', route);
route();
