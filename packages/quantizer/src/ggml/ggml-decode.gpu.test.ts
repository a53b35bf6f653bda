// The WGSL GGML decoders against the CPU dequantizers, bit for bit, on the WebGPU adapter
// (Mesa llvmpipe where there is no GPU): every fixture block of every type (edge-value f16
// scales, every code point and sub-block scale) plus random blocks, each type's blocks starting
// at an odd byte offset of the buffer, as GGUF's unaligned block sizes place them.

import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { createGpu, type Gpu } from '@kvasir/gpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from '../synthetic.test-util.js';
import { wgslGgmlDecodeName, wgslGgmlDecoders } from './ggml-decode.wgsl.js';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

let gpu: Gpu;
beforeAll(async () => {
  gpu = await createGpu();
});
afterAll(() => {
  gpu?.destroy();
});

const TYPES = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];

/** The raw blocks of a fixture file (see fixtures.test.ts for the layout). */
function fixtureBlocks(name: GgmlBlockType): Uint8Array {
  const f = GGML_BLOCK_FORMATS[name];
  const raw = gunzipSync(readFileSync(new URL(`./fixtures/${name}.bin.gz`, import.meta.url)));
  const n = raw.readUInt32LE(0);
  return new Uint8Array(raw.subarray(8, 8 + n * f.bytesPerBlock));
}

describe('WGSL GGML decoders equal the CPU dequantizers bit for bit', () => {
  it('every type, one weight and four at a time, fixture and random blocks at unaligned byte offsets', async () => {
    const r = rng(2024);
    const regions: { type: GgmlBlockType; offset: number; blocks: Uint8Array }[] = [];
    let size = 0;
    for (const [t, type] of TYPES.entries()) {
      const f = GGML_BLOCK_FORMATS[type];
      const fixture = fixtureBlocks(type);
      const random = Uint8Array.from({ length: 4 * f.bytesPerBlock }, () => Math.floor(r() * 256));
      const blocks = new Uint8Array(fixture.length + random.length);
      blocks.set(fixture);
      blocks.set(random, fixture.length);
      const offset = size + 1 + (t % 3); // 1 to 3 bytes past the previous region: never aligned
      regions.push({ type, offset, blocks });
      size = offset + blocks.length;
    }
    const bytes = new Uint8Array(Math.ceil(size / 4) * 4);
    for (const g of regions) bytes.set(g.blocks, g.offset);

    // One output per weight: its type index, block byte offset and index in the block.
    const typeOf: number[] = [];
    const blockOf: number[] = [];
    const indexOf: number[] = [];
    const want: number[] = [];
    for (const g of regions) {
      const f = GGML_BLOCK_FORMATS[g.type];
      const n = (g.blocks.length / f.bytesPerBlock) * f.blockSize;
      const cpu = new Float32Array(n);
      f.dequantize(bytes, g.offset, cpu, 0, n);
      for (let k = 0; k < n; k++) {
        typeOf.push(TYPES.indexOf(g.type));
        blockOf.push(g.offset + Math.floor(k / f.blockSize) * f.bytesPerBlock);
        indexOf.push(k % f.blockSize);
        want.push(cpu[k]!);
      }
    }

    // Each weight twice: through the one-weight decoder (out[k]) and as a component of the
    // four-weight decoder at i rounded down to a multiple of 4 (out[n + k]).
    const cases = TYPES.map((type, t) => {
      const name = wgslGgmlDecodeName(type);
      return `case ${t}u: { v = ${name}(b, i); v4 = ${name}_x4(b, i & ~3u); }`;
    }).join('\n      ');
    const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read> weights: array<u32>;
@group(0) @binding(1) var<storage, read> types: array<u32>;
@group(0) @binding(2) var<storage, read> blocks: array<u32>;
@group(0) @binding(3) var<storage, read> indices: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;
${wgslGgmlDecoders(TYPES, { buffer: 'weights' })}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = gid.x + gid.y * nwg.x * 64u;
  let n = arrayLength(&types);
  if (k >= n) { return; }
  let b = blocks[k];
  let i = indices[k];
  var v = 0.0;
  var v4 = vec4<f32>(0.0);
  switch (types[k]) {
      ${cases}
      default: {}
  }
  out[k] = bitcast<u32>(v);
  out[n + k] = bitcast<u32>(v4[i & 3u]);
}`;
    const n = want.length;
    const pipeline = await gpu.pipeline({ code, label: 'ggml-decode-test' });
    const outBuf = gpu.storageBuffer(2 * n * 4);
    const groups = Math.ceil(n / 64);
    const x = Math.min(groups, 32768);
    await gpu.runDispatch(
      pipeline,
      [
        gpu.storageBuffer(bytes),
        gpu.storageBuffer(Uint32Array.from(typeOf)),
        gpu.storageBuffer(Uint32Array.from(blockOf)),
        gpu.storageBuffer(Uint32Array.from(indexOf)),
        outBuf,
      ],
      [x, Math.ceil(groups / x)],
    );
    const got = new Float32Array(await gpu.readBuffer(outBuf));
    const gotBits = new Uint32Array(got.buffer);
    const wantF = Float32Array.from(want);
    const wantBits = new Uint32Array(wantF.buffer);
    const bad: string[] = [];
    for (let g = 0; g < 2 * n && bad.length < 8; g++) {
      const k = g % n;
      const bothNaN = Number.isNaN(got[g]) && Number.isNaN(wantF[k]);
      if (gotBits[g] !== wantBits[k] && !bothNaN) {
        const via = g < n ? 'one' : 'x4';
        bad.push(
          `${TYPES[typeOf[k]!]} (${via}) block@${blockOf[k]} i=${indexOf[k]}: gpu ${got[g]}, cpu ${wantF[k]}`,
        );
      }
    }
    expect(bad).toEqual([]);
    // Every type's edge values reached the GPU: infinities, f16 max multiples and subnormal scales.
    expect(wantF.some((v) => Math.abs(v) > 65504 && Number.isFinite(v))).toBe(true);
    expect(wantF.some((v) => v !== 0 && Math.abs(v) < 2 ** -14)).toBe(true);
  });
});
