// Quantizes each tensor of an F32 GGUF with @kvasir/quantizer's GGML reference quantizers to the
// type llama-quantize chose for it in a quantized GGUF, and compares the bytes. Prints JSON:
// per tensor its type and how many blocks differ. (llama-quantize without an importance matrix
// runs the same `quantize_row_*_ref` functions; only floating-point contraction in that build,
// or IQ4_NL's searching quantizer, can make blocks differ.)
//   node tooling/ggml-fixtures/check-quantize.mjs f32-dump-dir quantized-dump-dir
// (dirs written by dump_gguf.py; build @kvasir/quantizer first)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GGML_BLOCK_FORMATS } from '../../packages/quantizer/dist/ggml.js';

const [f32Dir, qDir] = process.argv.slice(2);
const load = (dir) => JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
const f32 = new Map(load(f32Dir).map((t) => [t.name, t]));
const report = [];
for (const t of load(qDir)) {
  const src = f32.get(t.name);
  const bytes = new Uint8Array(readFileSync(join(qDir, t.file)));
  const f = GGML_BLOCK_FORMATS[t.type];
  if (!f || !src) {
    report.push({ name: t.name, type: t.type, compared: false });
    continue;
  }
  const raw = readFileSync(join(f32Dir, src.file));
  const x = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const mine = new Uint8Array(bytes.length);
  f.quantize(x, 0, mine, 0, x.length);
  let blocks = 0;
  let differing = 0;
  for (let o = 0; o < bytes.length; o += f.bytesPerBlock, blocks++) {
    for (let k = o; k < o + f.bytesPerBlock; k++) {
      if (mine[k] !== bytes[k]) {
        differing++;
        break;
      }
    }
  }
  report.push({ name: t.name, type: t.type, compared: true, blocks, differingBlocks: differing });
}
console.log(JSON.stringify(report));
