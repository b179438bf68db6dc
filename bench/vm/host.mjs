// host.mjs is a proxy-wasm ABI v0.2.1 host in JavaScript, just enough to
// run a filter module in Node's V8 (the engine Envoy embeds) and time the
// module's own work per request, without Envoy: `make bench-vm` (bench/README.md,
// "Allot's work inside V8"). The host's side of every call is as cheap as
// it can be made (header maps serialized once up front, writes counted, not
// stored), so what is timed is the module.
//
// Usage: node host.mjs <module.wasm> <plugin-config.json or -> <warm|cold> <requests> [evict KiB]
//
// With evict, the host writes to every cache line of a buffer that size
// before each request, as Envoy's own work on a request does, so that the
// module finds its data in memory rather than in the CPU's caches; only the
// callbacks are timed then.
//
// It prints one JSON object: ns per request, host calls per request by name,
// and the writes of a probe request (x-user-id "user-0") for the caller to
// check against the engine.
//
// Spec: https://github.com/proxy-wasm/spec/tree/main/abi-versions/v0.2.1
import { readFileSync } from 'node:fs';
import { WASI } from 'node:wasi';

const [modulePath, configPath, mode, requestsArg, evictArg] = process.argv.slice(2);
if (!modulePath || !['warm', 'cold'].includes(mode)) {
  console.error('usage: node host.mjs <module.wasm> <config.json|-> <warm|cold> <requests> [evict KiB]');
  process.exit(2);
}
const requests = Number(requestsArg || 100000);
const evict = new Uint8Array(Number(evictArg || 0) * 1024);
const warmup = evict.length ? 2000 : 20000; // requests before timing: V8 tiers up, caches fill
const tickEvery = 20000; // proxy_on_tick every this many requests (about 1 s of Envoy traffic)
const config = configPath && configPath !== '-' ? readFileSync(configPath) : new Uint8Array(0);

const encoder = new TextEncoder();
const decoder = new TextDecoder();
let instance;
let view; // DataView over linear memory, renewed when memory grows
let bytes;
function mem() {
  if (!view || view.buffer !== instance.exports.memory.buffer) {
    view = new DataView(instance.exports.memory.buffer);
    bytes = new Uint8Array(instance.exports.memory.buffer);
  }
}
const text = (p, n) => { mem(); return decoder.decode(bytes.subarray(p, p + n)); };

// give copies b into memory the module allocates and writes its address and
// size to the out-parameters, as the host does for every returned buffer.
function give(b, retPtr, retSize) {
  const p = instance.exports.proxy_on_memory_allocate(b.length);
  mem();
  bytes.set(b, p);
  view.setUint32(retPtr, p, true);
  view.setUint32(retSize, b.length, true);
}

// serialize encodes a header map as the spec's pairs: a u32 count, the
// sizes, then each name and value NUL-terminated.
function serialize(pairs) {
  const kv = pairs.map(([k, v]) => [encoder.encode(k), encoder.encode(v)]);
  let size = 4 + 8 * kv.length;
  for (const [k, v] of kv) size += k.length + v.length + 2;
  const b = new Uint8Array(size);
  const d = new DataView(b.buffer);
  d.setUint32(0, kv.length, true);
  let o = 4;
  for (const [k, v] of kv) { d.setUint32(o, k.length, true); d.setUint32(o + 4, v.length, true); o += 8; }
  for (const [k, v] of kv) { b.set(k, o); o += k.length + 1; b.set(v, o); o += v.length + 1; }
  return b;
}

function parsePairs(p) {
  mem();
  const n = view.getUint32(p, true);
  const out = [];
  let o = p + 4 + 8 * n;
  for (let i = 0; i < n; i++) {
    const kl = view.getUint32(p + 4 + 8 * i, true);
    const vl = view.getUint32(p + 8 + 8 * i, true);
    out.push([text(o, kl), text(o + kl + 1, vl)]);
    o += kl + vl + 2;
  }
  return out;
}

let current; // the serialized request headers of the request in flight
let probe = null; // when set, the writes of the request in flight
const calls = {};
const count = (name) => { calls[name] = (calls[name] || 0) + 1; };
const OK = 0, NOT_FOUND = 1;

const env = {
  proxy_log: (level, p, n) => { if (level >= 4) console.error('module log:', text(p, n)); return OK; },
  proxy_get_buffer_bytes: (type, start, max, retPtr, retSize) => { give(config, retPtr, retSize); return OK; },
  proxy_get_header_map_pairs: (type, retPtr, retSize) => { count('proxy_get_header_map_pairs'); give(current, retPtr, retSize); return OK; },
  proxy_add_header_map_value: (type, kp, kn, vp, vn) => {
    count('proxy_add_header_map_value');
    if (probe) probe.push([text(kp, kn), text(vp, vn)]);
    return OK;
  },
  proxy_replace_header_map_value: (type, kp, kn, vp, vn) => {
    count('proxy_replace_header_map_value');
    if (probe) probe.push([text(kp, kn), text(vp, vn)]);
    return OK;
  },
  proxy_remove_header_map_value: () => { count('proxy_remove_header_map_value'); return OK; },
  proxy_set_header_map_pairs: (type, p, n) => {
    count('proxy_set_header_map_pairs');
    if (probe) probe.push(...parsePairs(p));
    return OK;
  },
  proxy_get_property: () => { count('proxy_get_property'); return NOT_FOUND; },
  proxy_set_property: () => { count('proxy_set_property'); return OK; },
  proxy_define_metric: (type, p, n, retID) => { mem(); view.setUint32(retID, 1, true); return OK; },
  proxy_increment_metric: () => OK,
  proxy_record_metric: () => OK,
  proxy_set_tick_period_milliseconds: () => OK,
};

const wasi = new WASI({ version: 'preview1', args: [], env: {} });
const module = new WebAssembly.Module(readFileSync(modulePath));
instance = new WebAssembly.Instance(module, { env, wasi_snapshot_preview1: wasi.wasiImport });
wasi.initialize(instance);
const x = instance.exports;
const root = 1;
x.proxy_on_context_create(root, 0);
if (!x.proxy_on_vm_start(root, 0)) throw new Error('proxy_on_vm_start refused');
if (!x.proxy_on_configure(root, config.length)) throw new Error('proxy_on_configure refused the configuration');

// The benchmark's requests (bench/suite): Envoy's pseudo-headers and the
// headers it adds, the targeted attributes, and the user id.
const base = [[':authority', 'bench'], [':path', '/'], [':method', 'GET'], [':scheme', 'http'],
  ['user-agent', 'allot-bench'], ['x-country', 'US'], ['x-platform', 'ios'], ['x-app-version', '2.3.1'],
  ['x-forwarded-proto', 'http'], ['x-request-id', '5f1c2a9e-1b2c-4d5e-8f90-123456789abc']];
const warmMaps = [];
for (let i = 0; i < 1000; i++) warmMaps.push(serialize([...base, ['x-user-id', `user-${i}`]]));
const coldMap = serialize([...base, ['x-user-id', 'cold-000000000']]);
const coldDigits = coldMap.length - 10; // the id's 9 digits, then its NUL
let coldSeq = 0;

let inside = 0n; // time in the callbacks, when evicting
let evicted = 0;
function request(i) {
  for (let k = 0; k < evict.length; k += 64) evicted += evict[k]++;
  const began = evict.length ? process.hrtime.bigint() : 0n;
  if (mode === 'cold') {
    let n = coldSeq++;
    for (let j = 8; j >= 0; j--) { coldMap[coldDigits + j] = 48 + (n % 10); n = Math.floor(n / 10); }
    current = coldMap;
  } else {
    current = warmMaps[i % 1000];
  }
  const id = 2 + (i % 1000000);
  x.proxy_on_context_create(id, root);
  x.proxy_on_request_headers(id, base.length + 1, 1);
  x.proxy_on_delete(id);
  if (evict.length) inside += process.hrtime.bigint() - began;
  if (i % tickEvery === tickEvery - 1) x.proxy_on_tick(root);
}

probe = [];
current = warmMaps[0];
x.proxy_on_context_create(2, root);
x.proxy_on_request_headers(2, base.length + 1, 1);
x.proxy_on_delete(2);
const written = probe;
probe = null;

for (let i = 0; i < warmup; i++) request(i);
for (const k of Object.keys(calls)) delete calls[k];
inside = 0n;
const t0 = process.hrtime.bigint();
for (let i = 0; i < requests; i++) request(warmup + i);
const ns = Number(evict.length ? inside : process.hrtime.bigint() - t0) / requests;
for (const k of Object.keys(calls)) calls[k] /= requests;
console.log(JSON.stringify({ ns, calls, probe: written }));
