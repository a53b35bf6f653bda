// A matrix-vector kernel that decodes GGUF weights on the fly through wgslGgmlLoad4, against
// ggmlMatVec on the CPU, for every block format: the shape of the model's matmul weight load.

import { createGpu, type Gpu } from '@kvasir/gpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gaussian } from '../synthetic.test-util.js';
import { ggmlMatVec } from './dot.js';
import { wgslGgmlLoad4 } from './ggml-decode.wgsl.js';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

let gpu: Gpu;
beforeAll(async () => {
  gpu = await createGpu();
});
afterAll(() => {
  gpu?.destroy();
});

const ROWS = 24;
const COLS = 512;
const OFFSET = 6; // row 0 starts at a byte that is not a word boundary

describe('GEMV over GGUF blocks decoded on the fly', () => {
  it.each(Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[])(
    '%s matches ggmlMatVec',
    async (type) => {
      const f = GGML_BLOCK_FORMATS[type];
      const w = gaussian(ROWS * COLS, 5);
      const rowBytes = (COLS / f.blockSize) * f.bytesPerBlock;
      const bytes = new Uint8Array(Math.ceil((OFFSET + ROWS * rowBytes) / 4) * 4);
      f.quantize(w, 0, bytes, OFFSET, ROWS * COLS);
      const x = gaussian(COLS, 6);
      const want = new Float32Array(ROWS);
      ggmlMatVec(type, bytes, OFFSET, ROWS, COLS, x, 0, want, 0);

      // One workgroup per row, 64 invocations striding over quads, a tree reduction.
      const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
${wgslGgmlLoad4(type, COLS, { buffer: 'w', offset: OFFSET })}
var<workgroup> red: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var k4 = lid; k4 < ${COLS / 4}u; k4 += 64u) { acc += dot(ggml_load4(wid.x, k4), x[k4]); }
  red[lid] = acc;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  if (lid == 0u) { y[wid.x] = red[0]; }
}`;
      const pipeline = await gpu.pipeline({ code, label: `ggml-gemv-${type}` });
      const yBuf = gpu.storageBuffer(ROWS * 4);
      await gpu.runDispatch(
        pipeline,
        [gpu.storageBuffer(bytes), gpu.storageBuffer(x), yBuf],
        [ROWS, 1],
      );
      const got = new Float32Array(await gpu.readBuffer(yBuf));
      // Same weights bit for bit; only the f32 summation order differs from the CPU's f64 sum.
      let norm = 0;
      for (let c = 0; c < COLS; c++) norm += Math.abs(x[c]!) * 4;
      for (let r = 0; r < ROWS; r++) expect(Math.abs(got[r]! - want[r]!)).toBeLessThan(norm * 1e-6);
    },
  );
});
