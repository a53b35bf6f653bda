import type { StoredFormat } from './weight-format.js';
import { weightLoadWgsl } from './weight-load.wgsl.js';

/**
 * Embedding gather from a packed table `[vocab][h]`: a workgroup per token copies (and
 * dequantizes) its row, times `scale` when given (Gemma's √hidden). Bindings: 0 ids (i32), 1 table, 2 y, 4 int8 scales. Dispatch `(T)`.
 */
export function embeddingWgsl(
  format: StoredFormat,
  h: number,
  groupSize: number,
  scale?: number,
): string {
  const times = scale === undefined ? '' : ` * ${Math.fround(scale).toPrecision(9)}`;
  return /* wgsl */ `
const K4: u32 = ${h / 4}u;
@group(0) @binding(0) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;
${weightLoadWgsl(format, 1, 4, groupSize, h)}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  let row = u32(ids[t]);
  for (var i = lid; i < K4; i += 64u) { y[t * K4 + i] = loadW(row, i)${times}; }
}
`;
}
