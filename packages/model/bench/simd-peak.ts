// SIMD128's multiply-add ceiling on this machine, one thread (simd-peak.c, built here with clang
// for wasm32): giga multiply-adds per second of i32x4.dot_i16x8_s and of f32x4 mul + add, the
// fastest of `rounds`. The GGML kernels' rates (ggml-kernels.ts' mac_per_ns) read against it.
//   tsx bench/simd-peak.ts [rounds]
// Prints one JSON object. Run with `node --no-liftoff --import tsx` to time optimized code from
// the first round.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { wasmApi } from '../src/backends/wasm/wasm-api.js';

const rounds = Number(process.argv[2] ?? 5);
const dir = mkdtempSync(join(tmpdir(), 'kvasir-simd-peak-'));
let bytes: Buffer;
try {
  const out = join(dir, 'peak.wasm');
  const src = join(dirname(fileURLToPath(import.meta.url)), 'simd-peak.c');
  const flags = ['--target=wasm32', '-O3', '-msimd128', '-nostdlib', '-Wl,--no-entry'];
  execFileSync(process.env.KVASIR_CLANG ?? 'clang', [...flags, '-o', out, src]);
  bytes = readFileSync(out);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const api = wasmApi();
if (!api) throw new Error('simd-peak: this runtime has no WebAssembly');
const instance = await api.instantiate(await api.compile(new Uint8Array(bytes)), {});
const run = instance.exports.run as (iters: number, mode: number) => number;
const iters = 20_000;
const instructions = iters * 64 * 8;
const result: Record<string, number | string> = {
  loadavg: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
};
for (const [mode, name, macs] of [
  [0, 'i16_dot_gmac_s', 8],
  [1, 'f32_madd_gmac_s', 4],
] as const) {
  run(100, mode);
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    run(iters, mode);
    best = Math.min(best, performance.now() - t0);
  }
  result[name] = Number(((instructions * macs) / best / 1e6).toFixed(2));
}
console.log(JSON.stringify(result));
