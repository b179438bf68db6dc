// vectors.mjs writes vectors.json beside it: the engine's reference vectors,
// computed with JavaScript's own semantics (String.prototype.charCodeAt,
// string <, toLowerCase, IEEE double arithmetic that is never fused), as
// GrowthBook's JavaScript SDK uses them. The algorithms are written here from
// GrowthBook's documentation (hash, getBucketRanges, chooseVariation,
// inNamespace, isIn, paddedVersionString), not from its code, and never from
// the Go engine. Plain Node 20, no packages; the output is deterministic.
//
//   node filter/engine/testdata/vectors.mjs     (or: make vectors)

import { writeFileSync } from "node:fs";

// ---------------------------------------------------------------- reference

// fnv1a32 is FNV-1a over the string's UTF-16 code units.
function fnv1a32(str) {
  let h = 0x811c9dc5;
  for (let i = 0; i < str.length; i++) {
    h ^= str.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

// hash is GrowthBook's hash(seed, value, version).
function hash(seed, value, version) {
  if (version === 2) return (fnv1a32(fnv1a32(seed + value) + "") % 10000) / 10000;
  if (version === 1) return (fnv1a32(value + seed) % 1000) / 1000;
  return null;
}

function equalWeights(n) {
  if (n <= 0) return [];
  return new Array(n).fill(1 / n);
}

// bucketRanges is getBucketRanges: start at the running sum of weights, end
// at start + coverage * weight (the product rounded, then the sum).
function bucketRanges(n, coverage, weights) {
  coverage = coverage < 0 ? 0 : coverage > 1 ? 1 : coverage;
  if (!weights || weights.length !== n) weights = equalWeights(n);
  const total = weights.reduce((sum, w) => sum + w, 0);
  if (total < 0.99 || total > 1.01) weights = equalWeights(n);
  let cumulative = 0;
  return weights.map((w) => {
    const start = cumulative;
    cumulative += w;
    return [start, start + coverage * w];
  });
}

const inRange = (n, r) => n >= r[0] && n < r[1];

function chooseVariation(n, ranges) {
  for (let i = 0; i < ranges.length; i++) if (inRange(n, ranges[i])) return i;
  return -1;
}

function inNamespace(hashValue, [id, start, end]) {
  const n = hash("__" + id, hashValue, 1);
  return n >= start && n < end;
}

// assign runs the bucketing part of GrowthBook's runExperiment for the
// fields the vectors use: namespace or filters, hash, ranges, choice.
function assign(exp, attrs) {
  const attr = exp.hashAttribute || "id";
  const hashValue = attrs[attr] == null ? "" : String(attrs[attr]);
  const out = { variationId: 0, inExperiment: false };
  if (!hashValue) return out;
  if (exp.filters) {
    for (const f of exp.filters) {
      const v = attrs[f.attribute || "id"];
      const n = hash(f.seed, v == null ? "" : String(v), f.hashVersion || 2);
      if (n === null || !f.ranges.some((r) => inRange(n, r))) return out;
    }
  } else if (exp.namespace && !inNamespace(hashValue, exp.namespace)) {
    return out;
  }
  const n = hash(exp.seed || exp.key, hashValue, exp.hashVersion || 1);
  const ranges = exp.ranges || bucketRanges(exp.variations.length, exp.coverage ?? 1, exp.weights);
  const i = chooseVariation(n, ranges);
  if (i < 0) return out;
  return { variationId: i, inExperiment: true };
}

const lower = (v) => (typeof v === "string" ? v.toLowerCase() : v);

// isIn is $in / $ini: strict inclusion, an array attribute matching when any
// element does; insensitive lower-cases strings on both sides.
function isIn(actual, expected, insensitive) {
  if (insensitive) {
    actual = Array.isArray(actual) ? actual.map(lower) : lower(actual);
    expected = expected.map(lower);
  }
  if (Array.isArray(actual)) return actual.some((e) => expected.includes(e));
  return expected.includes(actual);
}

function paddedVersionString(input) {
  if (typeof input === "number") input = input + "";
  if (!input || typeof input !== "string") input = "0";
  const parts = input.replace(/(^v|\+.*$)/g, "").split(/[-.]/);
  if (parts.length === 3) parts.push("~");
  return parts.map((p) => (/^[0-9]+$/.test(p) ? p.padStart(5, " ") : p)).join("-");
}

// ---------------------------------------------------------------- helpers

// fma is a*b+c rounded once, computed exactly with BigInt: what a compiler
// that fuses the multiply-add would produce.
function decompose(x) {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, x);
  const hi = dv.getUint32(0), lo = dv.getUint32(4);
  const bexp = (hi >>> 20) & 0x7ff;
  let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let e = -1074;
  if (bexp !== 0) {
    m |= 1n << 52n;
    e = bexp - 1075;
  }
  return [hi >>> 31 ? -m : m, e];
}

function fma(a, b, c) {
  const [ma, ea] = decompose(a), [mb, eb] = decompose(b), [mc, ec] = decompose(c);
  if (ma === 0n || mb === 0n || mc === 0n) return a * b + c; // one rounding either way
  const k = Math.min(ea + eb, ec);
  const exact = ((ma * mb) << BigInt(ea + eb - k)) + (mc << BigInt(ec - k));
  return Number(exact) * 2 ** k; // Number(bigint) rounds to nearest, ties to even
}

// rng is a small deterministic generator (mulberry32).
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const isHashValue = (x, version) => {
  const m = version === 2 ? 10000 : 1000;
  return Math.round(x * m) / m === x;
};

// idWithHash finds the first id "<prefix><i>" whose hash is exactly n.
function idWithHash(seed, version, n, prefix = "user-") {
  for (let i = 0; i < 2000000; i++) {
    if (hash(seed, prefix + i, version) === n) return prefix + i;
  }
  throw new Error(`no id hashes to ${n} under ${seed} v${version}`);
}

// ---------------------------------------------------------------- hash

const hashValues = [
  "user-1", "123", "abc-XYZ_09", "", "a".repeat(200),
  "Zoë", "été", "Ñandú", "ÿ", "\u00a0", "Zoe\u0308", "e\u0301", "\u0130stanbul",
  "用户", "ユーザー42", "한국어", "\uffff", "\ufffd", "\ue000",
  "😀", "👩\u200d💻-dev", "𠮷野家", "x" + "é".repeat(200), "a😀b😀c",
];
const hashSeeds = ["checkout", "exp.v2", "", "实验", "café", "🧪"];
const hashVectors = [];
for (const seed of hashSeeds) {
  for (const value of hashValues) {
    for (const version of [1, 2]) hashVectors.push({ seed, value, version, want: hash(seed, value, version) });
  }
}

const namespaceVectors = [];
for (const id of ["pricing", "页面", "ns😀"]) {
  for (const value of ["user-1", "Zoë", "用户", "😀", "e\u0301"]) {
    for (const [start, end] of [[0, 0.5], [0.5, 1], [0.25, 0.75]]) {
      namespaceVectors.push({ value, namespace: [id, start, end], n: hash("__" + id, value, 1), want: inNamespace(value, [id, start, end]) });
    }
  }
}

// ---------------------------------------------------------------- order

const orderPairs = [
  ["😀", "ｚ"], ["ｚ", "😀"], ["a", "b"], ["", "a"], ["a", "a"], ["abc", "abcd"],
  ["é", "z"], ["Zoë", "Zoe"], ["\uffff", "😀"], ["\ue000", "😀"], ["\ud7ff", "😀"],
  ["𠮷", "😀"], ["aé", "a😀"], ["a😀", "a\uff5a"], ["a😀x", "a😀y"], ["\ufffd", "𐀀"],
  ["用户", "ユーザー"], ["Z", "a"], ["İ", "i"], ["e\u0301", "é"],
];
const orderPool = ["a", "b", "z", "A", "é", "ÿ", "Ω", "用", "\ud7ff", "\ue000", "ｚ", "\uffff", "😀", "𠮷", "𐐀", "-", "0"];
const orderRand = rng(1);
const pick = (pool, r) => pool[Math.floor(r() * pool.length)];
const randString = (pool, r, max) => {
  let s = "";
  const n = Math.floor(r() * max);
  for (let i = 0; i < n; i++) s += pick(pool, r);
  return s;
};
for (let i = 0; i < 120; i++) {
  const a = randString(orderPool, orderRand, 4);
  // Half the pairs share a prefix, so the first difference is not at 0.
  const cps = [...a];
  const b = i % 2 ? cps.slice(0, Math.floor(cps.length / 2)).join("") + randString(orderPool, orderRand, 3) : randString(orderPool, orderRand, 4);
  orderPairs.push([a, b]);
}
const orderVectors = orderPairs.map(([a, b]) => ({ a, b, lt: a < b, lte: a <= b, gt: a > b, gte: a >= b }));

const versionPairs = [
  ["1.0.0-é", "1.0.0-😀"], ["1.0.0-ｚ", "1.0.0-😀"], ["1.0.0-😀", "1.0.0-ｚ"], ["1.2.3", "1.2.3-ｚ"],
  ["1.2.3-😀.1", "1.2.3-😀.2"], ["v2.0.0-beta", "2.0.0-β"], ["1.0.0-\ue000", "1.0.0-𠮷"],
  ["1.0.0-alpha", "1.0.0-alpha.1"], ["1.10.0", "1.9.0"], ["1.0.0+用户", "1.0.0"], ["1.0.0-用户", "1.0.0-ユーザー"],
];
const versionVectors = versionPairs.map(([a, b]) => {
  const pa = paddedVersionString(a), pb = paddedVersionString(b);
  return { a, b, lt: pa < pb, lte: pa <= pb, gt: pa > pb, gte: pa >= pb, eq: pa === pb };
});

// ---------------------------------------------------------------- lower

// Every code point whose toLowerCase differs from itself.
const codePoints = [];
const cased = [], caseIgnorable = [];
const addRange = (ranges, cp) => {
  const last = ranges[ranges.length - 1];
  if (last && last[1] === cp - 1) last[1] = cp;
  else ranges.push([cp, cp]);
};
for (let cp = 0; cp <= 0x10ffff; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const s = String.fromCodePoint(cp);
  const l = s.toLowerCase();
  if (l !== s) codePoints.push([cp, l]);
  if (/\p{Cased}/u.test(s)) addRange(cased, cp);
  if (/\p{Case_Ignorable}/u.test(s)) addRange(caseIgnorable, cp);
}

const lowerStrings = [
  "", "hello", "Hello WORLD", "ΑΣ", "ΑΣ.", "ΑΣΑ", "Σ", "ΑΣ'Α", "Α'Σ", "ΑΣ'", "ΑΣ1", " Σ ", "ΣΑ", "ΑΣΣ",
  "ΑΣ\u0301", "Α\u0301Σ", "ΑΣ\u0345Α", "ΑΣ😀", "𐐀Σ", "AΣ", "1Σ", "ΑΣ Σ", "ΟΔΥΣΣΕΥΣ", "Σ.Σ",
  "İ", "İSTANBUL", "iİ", "ÀÉÎ", "ǅ", "ẞ", "Ω", "K", "Å", "𐐀𐐁", "ᾈ", "ΑΣ\u200d", "ΑΣ\u00ad",
];
const lowerPool = ["Σ", "σ", "Α", "a", "A", "1", ".", "'", " ", "\u0301", "\u0345", "\u00ad", "İ", "😀", "𐐀", "ǅ", "ß", "ﬀ"];
const lowerRand = rng(2);
for (let i = 0; i < 150; i++) lowerStrings.push(randString(lowerPool, lowerRand, 7));
const lowerVectors = lowerStrings.map((s) => ({ s, want: s.toLowerCase() }));

const bigList = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "ας", "i̇stanbul", "straße"];
const iniCases = [
  [["ΑΣ"], "ας"], [["ας"], "ΑΣ"], [["ασ"], "ΑΣ"], [["İstanbul"], "i̇stanbul"], [["İstanbul"], "istanbul"],
  [["istanbul"], "İSTANBUL"], [bigList, "ΑΣ"], [bigList, "İSTANBUL"], [bigList, "STRASSE"], [bigList, "STRAẞE"],
  [bigList, "J"], [bigList, ["x", "İstanbul"]], [["Zoë", "ÉTÉ"], "été"], [["😀"], "😀"], [["𐐀"], "𐐨"],
];
const iniVectors = iniCases.map(([list, value]) => ({ list, value, want: isIn(value, list, true) }));

// ---------------------------------------------------------------- ranges

const rangeVectors = [];
const addRanges = (n, coverage, weights) => {
  const want = bucketRanges(n, coverage, weights);
  let fusedDiffers = false;
  if (weights && weights.length === n) {
    let cumulative = 0;
    for (const w of weights) {
      if (fma(coverage, w, cumulative) !== cumulative + coverage * w) fusedDiffers = true;
      cumulative += w;
    }
  }
  rangeVectors.push({ n, coverage, weights, want, fusedDiffers });
};
addRanges(2, 1, null);
addRanges(3, 0.5, null);
addRanges(3, 1, [0.1, 0.2, 0.7]);
addRanges(4, 0.8, [0.4, 0.1, 0.3, 0.2]);
addRanges(2, 1, [0.4, 0.4]); // falls back to equal weights

// Search (coverage, weights) whose range ends differ when fused, and among
// them ends that are exactly a hash value (k/1000 or k/10000), so that a
// unit can land on them.
const weightSets = [
  [0.3, 0.7], [0.7, 0.3], [0.15, 0.85], [0.45, 0.55], [0.2, 0.3, 0.5], [0.1, 0.2, 0.7],
  [0.25, 0.25, 0.5], [0.33, 0.33, 0.34], [0.35, 0.65], [0.6, 0.4], [0.05, 0.95], [0.4, 0.1, 0.3, 0.2],
];
const fusedBoundaries = []; // {coverage, weights, index, end, version}
let fusedRanges = 0;
for (const weights of weightSets) {
  for (let i = 1; i < 100; i++) {
    const coverage = i / 100;
    let cumulative = 0, differs = false;
    for (let v = 0; v < weights.length; v++) {
      const w = weights[v];
      const unfused = cumulative + coverage * w;
      const fused = fma(coverage, w, cumulative);
      if (unfused !== fused) {
        differs = true;
        for (const version of [1, 2]) {
          for (const end of [unfused, fused]) {
            if (isHashValue(end, version)) fusedBoundaries.push({ coverage, weights, index: v, end, unfused, version });
          }
        }
      }
      cumulative += w;
    }
    if (differs && fusedRanges < 12 && i % 3 === 0) {
      addRanges(weights.length, coverage, weights);
      fusedRanges++;
    }
  }
}
if (fusedRanges < 12) throw new Error(`only ${fusedRanges} fused-differs ranges`);

// ---------------------------------------------------------------- assign

const assignVectors = [];
const addAssign = (experiment, id, extra = {}) => {
  const version = experiment.hashVersion || 1;
  const n = experiment.filters || experiment.namespace ? undefined : hash(experiment.seed || experiment.key, id, version);
  const res = assign(experiment, { id });
  const v = { experiment, id, ...res, ...extra };
  if (n !== undefined) v.hash = n;
  assignVectors.push(v);
};

const experiments = [
  { key: "fifty", variations: ["a", "b"], hashVersion: 2 },
  { key: "v1half", variations: ["a", "b"], coverage: 0.5 },
  { key: "tri", variations: ["a", "b", "c"], weights: [0.2, 0.3, 0.5], hashVersion: 2 },
  { key: "seeded", seed: "种子😀", variations: ["a", "b", "c", "d"], hashVersion: 2 },
  { key: "ns", variations: ["a", "b"], namespace: ["页面", 0, 0.5] },
  { key: "filtered", variations: ["a", "b"], hashVersion: 2, filters: [{ seed: "ﬁlter-é", ranges: [[0, 0.4]], hashVersion: 2 }] },
];
const ids = ["user-1", "Zoë", "été", "用户", "ユーザー42", "😀", "👩\u200d💻-dev", "𠮷野家", "e\u0301", "Zoe\u0308", "\u0130stanbul", "ÿ\uffff"];
for (const exp of experiments) {
  for (const id of ids) addAssign(exp, id);
}
// Ids landing exactly on range boundaries (start is inclusive, end is not).
for (const exp of experiments.slice(0, 3)) {
  const version = exp.hashVersion || 1;
  const ranges = bucketRanges(exp.variations.length, exp.coverage ?? 1, exp.weights);
  for (const [start, end] of ranges) {
    for (const edge of [start, end]) {
      if (edge > 0 && edge < 1 && isHashValue(edge, version)) addAssign(exp, idWithHash(exp.key, version, edge), { boundary: true });
    }
  }
}
// Ids landing exactly on a range end that fusing the multiply-add moves.
// At most one per (weights, hash version, which end is the hash value), so
// that units fall both out of a range the fused end would widen and into
// one it would narrow.
let fusedAssigns = 0;
const seenFused = new Set();
for (const b of fusedBoundaries) {
  const k = `${b.weights}/${b.version}/${b.end === b.unfused}`;
  if (seenFused.has(k)) continue;
  // Only ends where the fused ranges choose differently guard anything.
  let cumulative = 0;
  const fused = b.weights.map((w) => {
    const start = cumulative;
    cumulative += w;
    return [start, fma(b.coverage, w, start)];
  });
  if (chooseVariation(b.end, fused) === chooseVariation(b.end, bucketRanges(b.weights.length, b.coverage, b.weights))) continue;
  seenFused.add(k);
  const key = `fused-${fusedAssigns}`;
  const exp = { key, variations: b.weights.map((_, i) => "v" + i), weights: b.weights, coverage: b.coverage };
  if (b.version === 2) exp.hashVersion = 2;
  addAssign(exp, idWithHash(key, b.version, b.end), { boundary: true, fusedDiffers: true });
  fusedAssigns++;
}
if (fusedAssigns < 8) throw new Error(`only ${fusedAssigns} fused-differs assignments`);

// ---------------------------------------------------------------- write

const doc = {
  comment: [
    "Generated by vectors.mjs (make vectors) with JavaScript's own semantics, as GrowthBook's JavaScript SDK runs them; never by the Go engine.",
    "hash: FNV-1a over UTF-16 code units. order/versions: string comparison by UTF-16 code units. lower: String.prototype.toLowerCase (Node " + process.version + ", Unicode " + process.versions.unicode + ").",
    "ranges/assign with fusedDiffers=true: a range end start+coverage*w differs from fma(coverage, w, start); the reference rounds the product first.",
    "assign with boundary=true: the id's hash lands exactly on a range start or end.",
  ],
  hash: hashVectors,
  namespace: namespaceVectors,
  order: orderVectors,
  versions: versionVectors,
  lower: { codePoints, cased, caseIgnorable, strings: lowerVectors, ini: iniVectors },
  ranges: rangeVectors,
  assign: assignVectors,
};
// Go strings cannot hold a lone surrogate (Go decodes one to U+FFFD), so
// every string must be well formed.
const checkWellFormed = (v) => {
  if (typeof v === "string" && !v.isWellFormed()) throw new Error(`lone surrogate in ${JSON.stringify(v)}`);
  if (v && typeof v === "object") Object.values(v).forEach(checkWellFormed);
};
checkWellFormed(doc);
const out = new URL("./vectors.json", import.meta.url);
writeFileSync(out, JSON.stringify(doc, null, 1) + "\n");
