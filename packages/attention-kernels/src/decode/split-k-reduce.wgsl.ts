import { MASK, PARAMS_STRUCT, rowInverse, sinksDecl } from '../attention/shader-common.wgsl.js';

/**
 * Pass 2 of split-K decode, shared by every decode kernel: a workgroup per (sequence, query
 * head) merges the splits' partial outputs by their (max, sum).
 */
export function splitKReduceShader(o: {
  readonly headDim: number;
  readonly numQHeads: number;
  /** Attention sinks per query head, in exp2 units: in the merged softmax once. */
  readonly sinks?: readonly number[] | undefined;
}): string {
  const D4 = o.headDim / 4;
  return /* wgsl */ `
${PARAMS_STRUCT}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partial: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> ml: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read> meta_: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
${sinksDecl({ sinks: o.sinks })}

const D4: u32 = ${D4}u;
const NUM_Q_HEADS: u32 = ${o.numQHeads}u;

@compute @workgroup_size(${D4})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
  let h = wid.x;
  let seq = wid.y;
  let ctx = meta_[params.ctx_offset + seq];
  let splits = (ctx + params.chunk_tokens - 1u) / params.chunk_tokens;
  let row = (seq * NUM_Q_HEADS + h) * params.max_splits;
  var m = ${MASK};
  for (var i = 0u; i < splits; i++) {
    m = max(m, ml[row + i].x);
  }
  var denom = 0.0;
  var acc = vec4<f32>(0.0);
  for (var i = 0u; i < splits; i++) {
    let f = exp2(ml[row + i].x - m);
    denom += ml[row + i].y * f;
    acc += partial[(row + i) * D4 + lane] * f;
  }
  ${rowInverse({ sinks: o.sinks }, 'h', 'm', 'denom')}
  out[(seq * NUM_Q_HEADS + h) * D4 + lane] = acc * inv;
}
`;
}
