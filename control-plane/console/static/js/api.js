// The admin API client: every request the console makes goes through api(),
// to the public admin API on the same origin, with the token the user signed
// in with. The token lives in sessionStorage only: it is gone when the tab
// closes and is never written anywhere else.

const tokenKey = 'allot.console.token';

// APIError is an admin API error: {"error": {"code", "message", "details"}}.
export class APIError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.code || `http_${status}`;
    this.details = body?.details || [];
  }
}

let caller = null; // the signed-in token's {name, role, namespaces}
let onUnauthenticated = () => {};

export const token = () => sessionStorage.getItem(tokenKey);
export const me = () => caller;

// setUnauthenticated sets what happens when the API refuses the token.
export function setUnauthenticated(f) { onUnauthenticated = f; }

// signIn keeps token for this tab once the API accepts it (GET /v1/whoami).
export async function signIn(t) {
  sessionStorage.setItem(tokenKey, t);
  try {
    await whoami();
  } catch (err) {
    signOut();
    throw err;
  }
}

export function signOut() {
  sessionStorage.removeItem(tokenKey);
  caller = null;
}

// whoami asks the API who the token is.
export async function whoami() {
  caller = await api('GET', '/v1/whoami');
  caller.namespaces ||= [];
  return caller;
}

// api calls the admin API and returns the decoded JSON body (null for
// none), or throws an APIError.
export async function api(method, path, body) {
  const headers = {Authorization: `Bearer ${token() || ''}`};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (err) {
    throw new APIError(0, {code: 'unreachable', message: `allotd did not answer: ${err.message}`});
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = {error: {message: text.trim()}};
    }
  }
  if (!res.ok) {
    const err = new APIError(res.status, data?.error);
    if (res.status === 401) onUnauthenticated(err);
    throw err;
  }
  return data;
}

// withWait adds ?wait=Ns to a write's path when seconds is positive.
export function withWait(path, seconds) {
  if (!(seconds > 0)) return path;
  return `${path}${path.includes('?') ? '&' : '?'}wait=${seconds}s`;
}

// canWrite mirrors the API's rule (admin.Principal.CanWrite): an admin
// writes every experiment, an owner those of its namespaces, a reader none.
export function canWrite(owner) {
  if (!caller) return false;
  if (caller.role === 'admin') return true;
  return caller.role === 'owner' && caller.namespaces.includes(owner);
}

// canCreate reports whether the token may create any experiment.
export const canCreate = () => caller?.role === 'admin' || caller?.role === 'owner';

// denied says why the token may not do op to experiments of owner (or
// create any, when owner is undefined), in the API's words; null when it may.
export function denied(op, owner) {
  if (!caller) return 'not signed in';
  if (caller.role === 'reader') {
    return `${caller.name} may not ${op} experiments: a reader token reads everything and changes nothing`;
  }
  if (owner === undefined ? canCreate() : canWrite(owner)) return null;
  return `${caller.name} may not ${op} experiments of owner "${owner}": its token writes only the namespaces ${caller.namespaces.join(', ')}`;
}

// describe summarizes who the token is, for the header.
export function describe() {
  if (!caller) return '';
  if (caller.role === 'owner') return `${caller.name} · owner of ${caller.namespaces.join(', ')}`;
  return `${caller.name} · ${caller.role}`;
}
