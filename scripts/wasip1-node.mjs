// wasip1-node.mjs runs a GOOS=wasip1 GOARCH=wasm program (typically a test
// binary from `go test -exec scripts/go_wasip1_wasm_exec`) in Node's own
// WASI preview1, so the engine's tests run in the Wasm build without a
// separate runtime.
//
//   node wasip1-node.mjs prog.wasm [args...]
//
// Like Go's lib/wasm/go_wasip1_wasm_exec it preopens the host's / as / and
// sets PWD to the current directory: Go's wasip1 runtime resolves relative
// paths (testdata/...) against PWD, and `go test` runs the binary in the
// package directory. The rest of the environment passes through, so
// ALLOT_GROWTHBOOK_CASES reaches the conformance test. The exit status is
// the program's.
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";

const [prog, ...args] = process.argv.slice(2);
if (!prog) {
  console.error("usage: node wasip1-node.mjs prog.wasm [args...]");
  process.exit(2);
}
const wasi = new WASI({
  version: "preview1",
  args: [prog, ...args],
  env: { ...process.env, PWD: process.cwd() },
  preopens: { "/": "/" },
  returnOnExit: true,
});
const { instance } = await WebAssembly.instantiate(await readFile(prog), wasi.getImportObject());
process.exit(wasi.start(instance));
