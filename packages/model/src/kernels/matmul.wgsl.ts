import type { MatmulEpilogue } from './reference.js';
import type { StoredFormat } from './weight-format.js';
import { weightLoadWgsl } from './weight-load.wgsl.js';

/** Shape and options that select one matmul shader. */
export interface MatmulShaderOptions {
  readonly format: StoredFormat;
  /** Output features (weight rows). */
  readonly n: number;
  /** Input features (weight columns); a multiple of 4. */
  readonly k: number;
  readonly groupSize: number;
  readonly epilogue: MatmulEpilogue;
  readonly bias: boolean;
}

/** Workgroup size of the matrix-vector kernel. */
export const GEMV_WORKGROUP = 64;
/** Output features per matrix-vector workgroup (even, for the SwiGLU pairs). */
export const GEMV_ROWS = 4;
/** Output tile of the register-tiled kernel (rows and columns). */
export const TILE = 32;

// Bindings shared by every matmul variant so one bind-group layout per signature serves all:
// 0 x, 1 w, 2 y, 3 params, 4 int8 scales, 5 bias.
function header(o: MatmulShaderOptions): string {
  return /* wgsl */ `
const K4: u32 = ${o.k / 4}u;
const N: u32 = ${o.n}u;
struct Params { m: u32 }
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
${o.bias ? '@group(0) @binding(5) var<storage, read> bias: array<f32>;' : ''}
${weightLoadWgsl(o.format, 1, 4, o.groupSize, o.k)}
`;
}

/** Whether the epilogue is a gated unit of a gate/up row pair (SwiGLU, GeGLU, OpenAI's SwiGLU). */
function gated(o: MatmulShaderOptions): boolean {
  return o.epilogue === 'swiglu' || o.epilogue === 'geglu' || o.epilogue === 'swiglu-oai';
}

// `v` for (m, n) -> the store. For a gated unit the caller passes the gate/up pair.
function storeFn(o: MatmulShaderOptions): string {
  const b = (n: string) => (o.bias ? ` + bias[${n}]` : '');
  if (gated(o)) {
    // GELU's tanh argument clamped: tanh of a large f32 can be NaN on some drivers.
    // gpt-oss's SwiGLU clamps the gate above and the up value both ways at 7.
    const act =
      o.epilogue === 'geglu'
        ? '0.5 * g * (1.0 + tanh(clamp(0.7978845608 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0))) * u'
        : o.epilogue === 'swiglu-oai'
          ? 'min(g, 7.0) / (1.0 + exp(-1.702 * min(g, 7.0))) * (clamp(u, -7.0, 7.0) + 1.0)'
          : 'g / (1.0 + exp(-g)) * u';
    return /* wgsl */ `
fn storePair(m: u32, n: u32, g0: f32, u0: f32) {
  let g = g0${b('n')};
  let u = u0${b('n + 1u')};
  y[m * (N / 2u) + n / 2u] = ${act};
}`;
  }
  const op = o.epilogue === 'residual' ? '+=' : '=';
  return /* wgsl */ `
fn store(m: u32, n: u32, v: f32) { y[m * N + n] ${op} v${b('n')}; }`;
}

/**
 * Output features per matrix-vector workgroup for `mTile` input rows: more features when fewer
 * rows share the workgroup, so that the reduction and launch cost is spread over more work (a
 * 32,000-row LM head otherwise launches 8,000 tiny workgroups).
 */
export function gemvRows(mTile: number): number {
  return mTile === 1 ? 16 : mTile <= 4 ? 8 : GEMV_ROWS;
}

/**
 * Matrix-vector(s) kernel for decode: a workgroup computes {@link gemvRows} output features for
 * `mTile` input rows, each invocation striding over K, then a tree reduction in workgroup
 * memory. Reading each weight quad once for all `mTile` rows is what makes batched decode
 * cheaper than `mTile` separate decodes. Dispatch `(ceil(N / gemvRows(mTile)), ceil(M / mTile))`.
 */
export function gemvWgsl(o: MatmulShaderOptions, mTile: number): string {
  const WG = GEMV_WORKGROUP;
  const R = gemvRows(mTile);
  const G = R / 4;
  // Straight-line code over rows and feature quads: llvmpipe compiles dynamically indexed
  // private arrays into very slow code (or takes minutes to compile them).
  const rows = Array.from({ length: mTile }, (_, i) => i);
  const groups = Array.from({ length: G }, (_, g) => g);
  const accs = rows.flatMap((i) => groups.map((g) => `acc${i}_${g}`));
  const accDecl = accs.map((a) => `  var ${a} = vec4<f32>(0.0);`).join('\n');
  const wLoad = groups
    .flatMap((g) =>
      [0, 1, 2, 3].map((r) => `    let w${g}_${r} = loadW(min(n0 + ${4 * g + r}u, N - 1u), k4);`),
    )
    .join('\n');
  const accUpd = rows
    .map(
      (i) => `    {
      let xv = x[min(m0 + ${i}u, M - 1u) * K4 + k4];
${groups.map((g) => `      acc${i}_${g} += vec4<f32>(dot(xv, w${g}_0), dot(xv, w${g}_1), dot(xv, w${g}_2), dot(xv, w${g}_3));`).join('\n')}
    }`,
    )
    .join('\n');
  // red[(i * G + g) * WG + lid] holds features 4g..4g+3 of row i.
  const accStore = rows
    .flatMap((i) => groups.map((g) => `  red[${(i * G + g) * WG}u + lid] = acc${i}_${g};`))
    .join('\n');
  const write = gated(o)
    ? /* wgsl */ `
  if (lid < ${(mTile * R) / 2}u) {
    let i = lid / ${R / 2}u;
    let r = 2u * (lid % ${R / 2}u);
    let m = m0 + i;
    let n = n0 + r;
    let v = red[(i * ${G}u + r / 4u) * ${WG}u];
    if (m < M && n < N) { storePair(m, n, v[r % 4u], v[r % 4u + 1u]); }
  }`
    : /* wgsl */ `
  if (lid < ${mTile * R}u) {
    let i = lid / ${R}u;
    let r = lid % ${R}u;
    let m = m0 + i;
    let n = n0 + r;
    let v = red[(i * ${G}u + r / 4u) * ${WG}u];
    if (m < M && n < N) { store(m, n, v[r % 4u]); }
  }`;
  return /* wgsl */ `${header(o)}
${storeFn(o)}
var<workgroup> red: array<vec4<f32>, ${WG * mTile * G}>;

@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let M = params.m;
  let n0 = wid.x * ${R}u;
  let m0 = wid.y * ${mTile}u;
${accDecl}
  for (var k4 = lid; k4 < K4; k4 += ${WG}u) {
${wLoad}
    // Clamped rows past M compute values that are never stored; no divergent branch.
${accUpd}
  }
${accStore}
  workgroupBarrier();
  for (var s = ${WG / 2}u; s > 0u; s >>= 1u) {
    if (lid < s) {
${accs.map((_, j) => `      red[${j * WG}u + lid] += red[${j * WG}u + lid + s];`).join('\n')}
    }
    workgroupBarrier();
  }${write}
}
`;
}

/**
 * Register-tiled matmul for prefill: 8×8 invocations, each owning a 4×4 output block of a
 * {@link TILE}×{@link TILE} tile, K staged through workgroup memory 16 at a time, weights
 * dequantized while staging. Dispatch `(ceil(N / TILE), ceil(M / TILE))`.
 */
export function tiledMatmulWgsl(o: MatmulShaderOptions): string {
  const KT4 = 4;
  const write = gated(o)
    ? /* wgsl */ `
      if (m < M) {
        for (var j = 0u; j < 4u; j += 2u) {
          let n = nBase + tn + j;
          if (n < N) { storePair(m, n, acc[i][j], acc[i][j + 1u]); }
        }
      }`
    : /* wgsl */ `
      if (m < M) {
        for (var j = 0u; j < 4u; j++) {
          let n = nBase + tn + j;
          if (n < N) { store(m, n, acc[i][j]); }
        }
      }`;
  return /* wgsl */ `${header(o)}
${storeFn(o)}
const KT4: u32 = ${KT4}u;
var<workgroup> As: array<vec4<f32>, ${TILE * KT4}>;
var<workgroup> Bs: array<vec4<f32>, ${TILE * KT4}>;

@compute @workgroup_size(8, 8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let M = params.m;
  let mBase = wid.y * ${TILE}u;
  let nBase = wid.x * ${TILE}u;
  let tm = l.y * 4u;
  let tn = l.x * 4u;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < K4; k0 += KT4) {
    for (var e = lid; e < ${TILE}u * KT4; e += 64u) {
      let r = e / KT4;
      let k4 = k0 + e % KT4;
      var a = vec4<f32>(0.0);
      if (mBase + r < M && k4 < K4) { a = x[(mBase + r) * K4 + k4]; }
      As[e] = a;
      var b = vec4<f32>(0.0);
      if (nBase + r < N && k4 < K4) { b = loadW(nBase + r, k4); }
      Bs[e] = b;
    }
    workgroupBarrier();
    for (var c = 0u; c < KT4; c++) {
      var b: array<vec4<f32>, 4>;
      for (var j = 0u; j < 4u; j++) { b[j] = Bs[(tn + j) * KT4 + c]; }
      for (var i = 0u; i < 4u; i++) {
        let a = As[(tm + i) * KT4 + c];
        acc[i] += vec4<f32>(dot(a, b[0]), dot(a, b[1]), dot(a, b[2]), dot(a, b[3]));
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let m = mBase + tm + i;${write}
  }
}
`;
}
