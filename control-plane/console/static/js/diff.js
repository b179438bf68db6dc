// Field-level differences between two versions of an experiment, for the
// audit history.

// outputOnly are the fields the API sets; they are shown beside a change,
// not in its diff.
export const outputOnly = ['revision', 'createTime', 'updateTime', 'createdBy', 'updatedBy'];

// definition is e without its output-only fields.
export function definition(e) {
  const out = {};
  for (const [k, v] of Object.entries(e || {})) if (!outputOnly.includes(k)) out[k] = v;
  return out;
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// flatten maps every leaf of v to its path: objects by key
// (condition.country), lists holding objects or lists by index
// (namespace[1]); a list of plain values is one leaf, read as a whole.
export function flatten(v, prefix = '', out = new Map()) {
  if (isObject(v) && (Object.keys(v).length || !prefix)) {
    for (const k of Object.keys(v).sort()) flatten(v[k], prefix ? `${prefix}.${k}` : k, out);
  } else if (Array.isArray(v) && v.length && v.some((x) => x !== null && typeof x === 'object')) {
    v.forEach((x, i) => flatten(x, `${prefix}[${i}]`, out));
  } else {
    out.set(prefix, v);
  }
  return out;
}

// diff lists what changed from before to after (either may be null: a
// create or a delete), field by field, in path order: {path, kind:
// added|removed|changed, before, after}.
export function diff(before, after) {
  const a = flatten(definition(before));
  const b = flatten(definition(after));
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const out = [];
  for (const path of paths) {
    const had = a.has(path);
    const has = b.has(path);
    if (had && has && JSON.stringify(a.get(path)) === JSON.stringify(b.get(path))) continue;
    out.push({path, kind: had && has ? 'changed' : has ? 'added' : 'removed', before: a.get(path), after: b.get(path)});
  }
  return out;
}
