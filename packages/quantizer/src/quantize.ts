import { QuantizerError } from './errors.js';
import {
  type KvShape,
  numScaleGroups,
  type QuantSpec,
  storageBytes,
  validateSpec,
} from './format.js';
import { hadamardF32 } from './hadamard.js';
import {
  int4Decode,
  int4Encode,
  int4GroupParams,
  int8Decode,
  int8Encode,
  int8ScaleFromAmax,
  inverseScale,
  MIN_SCALE,
} from './integer.js';
import {
  bitsToF32,
  decodeFloatBits,
  encodeFloatBits,
  FLOAT_FORMATS,
  type FloatFormatSpec,
  f32ToBits,
} from './minifloat.js';

const fround = Math.fround;

/**
 * A quantized K or V tensor of logical shape `[tokens][heads][headDim]`.
 *
 * `data` holds element codes in row-major element order: f16/bf16 as little-endian 16-bit
 * words, fp8 one byte each, int8 one two's-complement byte each, int4 two per byte with element
 * 2i in the low nibble. `scales[g]` (and for int4 `zeros[g]`, the integer zero point) belong to
 * scale group g, numbered as `numScaleGroups` describes.
 */
export interface QuantizedTensor {
  readonly spec: QuantSpec;
  readonly shape: KvShape;
  readonly data: Uint8Array;
  readonly scales: Float32Array;
  readonly zeros: Float32Array;
}

/** Visits every scale group as a strided run of elements. */
function forEachGroup(
  spec: QuantSpec,
  shape: KvShape,
  visit: (group: number, start: number, count: number, stride: number) => void,
): void {
  const { tokens, heads, headDim } = shape;
  const g = spec.granularity;
  const n = tokens * heads * headDim;
  switch (g.kind) {
    case 'none':
    case 'per-tensor':
      visit(0, 0, n, 1);
      return;
    case 'per-token-head':
      for (let r = 0; r < tokens * heads; r++) visit(r, r * headDim, headDim, 1);
      return;
    case 'group': {
      const perRow = headDim / g.groupSize;
      for (let r = 0; r < tokens * heads; r++) {
        for (let j = 0; j < perRow; j++)
          visit(r * perRow + j, r * headDim + j * g.groupSize, g.groupSize, 1);
      }
      return;
    }
    case 'per-channel': {
      const rowStride = heads * headDim;
      const tg = Math.ceil(tokens / g.groupSize);
      for (let t = 0; t < tg; t++) {
        const count = Math.min(g.groupSize, tokens - t * g.groupSize);
        for (let c = 0; c < rowStride; c++) {
          visit(t * rowStride + c, t * g.groupSize * rowStride + c, count, rowStride);
        }
      }
    }
  }
}

/**
 * The scale that maps a group's largest finite magnitude `amax` onto the format's largest
 * code (`amax · f32(1/max)`), or 1 when that is below {@link MIN_SCALE} (an all-zero group).
 */
export function scaleFromAmax(format: 'fp8-e4m3' | 'fp8-e5m2' | 'int8', amax: number): number {
  const s =
    format === 'int8'
      ? int8ScaleFromAmax(amax)
      : fround(amax * fround(1 / FLOAT_FORMATS[format].max));
  return s < MIN_SCALE ? 1 : s;
}

/**
 * Quantizes `x` (row-major `[tokens][heads][headDim]`) with `spec`, computing dynamic scales
 * (and int4 zero points) per group from the group's finite values.
 *
 * @throws QuantizerError `LENGTH_MISMATCH` when `x.length` is not the shape's size, and the
 * codes of {@link validateSpec} for an unsupported spec.
 */
export function quantize(x: Float32Array, spec: QuantSpec, shape: KvShape): QuantizedTensor {
  validateSpec(spec, shape);
  const n = shape.tokens * shape.heads * shape.headDim;
  if (x.length !== n) {
    throw new QuantizerError(
      'LENGTH_MISMATCH',
      `input has ${x.length} elements, shape needs ${n}`,
      {
        details: { length: x.length, expected: n },
      },
    );
  }
  if (spec.rotation !== undefined) {
    // Runs never cross a row: headDim is a multiple of the rotation (validated).
    const rotated = Float32Array.from(x);
    hadamardF32(rotated, spec.rotation);
    return { ...quantize(rotated, unrotated(spec), shape), spec };
  }
  const groups = numScaleGroups(spec, shape);
  const scaleBytes = groups * (spec.format === 'int4' ? 8 : 4);
  const data = new Uint8Array(storageBytes(spec, shape) - scaleBytes);
  const scales = new Float32Array(groups);
  const zeros = new Float32Array(spec.format === 'int4' ? groups : 0);
  const xb = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const saturate = spec.saturate ?? true;
  const g = spec.granularity;
  const fmt = spec.format;

  if (fmt === 'f16' || fmt === 'bf16') {
    const fs = FLOAT_FORMATS[fmt];
    for (let i = 0; i < n; i++) {
      const c = encodeFloatBits(fs, xb[i]!, saturate);
      data[2 * i] = c & 0xff;
      data[2 * i + 1] = c >>> 8;
    }
    return { spec, shape, data, scales, zeros };
  }

  const fs: FloatFormatSpec | undefined =
    fmt === 'fp8-e4m3' || fmt === 'fp8-e5m2' ? FLOAT_FORMATS[fmt] : undefined;
  forEachGroup(spec, shape, (grp, start, count, stride) => {
    const end = start + count * stride;
    if (fmt === 'int4') {
      const { scale, inv, zero } = int4GroupParams(x, start, end, stride);
      scales[grp] = scale;
      zeros[grp] = zero;
      for (let i = start; i < end; i += stride) {
        const q = int4Encode(x[i]!, inv, zero);
        const byte = i >>> 1;
        data[byte] = (i & 1) === 0 ? (data[byte]! & 0xf0) | q : (data[byte]! & 0x0f) | (q << 4);
      }
      return;
    }
    let scale: number;
    if (g.kind === 'per-tensor') {
      scale = fround(g.scale);
    } else {
      let amax = 0;
      for (let i = start; i < end; i += stride) {
        if ((xb[i]! & 0x7f800000) === 0x7f800000) continue;
        const a = Math.abs(x[i]!);
        if (a > amax) amax = a;
      }
      scale = scaleFromAmax(fmt as 'int8' | 'fp8-e4m3' | 'fp8-e5m2', amax);
    }
    scales[grp] = scale;
    const inv = inverseScale(scale);
    if (fs === undefined) {
      for (let i = start; i < end; i += stride) data[i] = int8Encode(x[i]!, inv) & 0xff;
    } else {
      for (let i = start; i < end; i += stride) {
        data[i] = encodeFloatBits(fs, f32ToBits(x[i]! * inv), saturate);
      }
    }
  });
  return { spec, shape, data, scales, zeros };
}

function unrotated(spec: QuantSpec): QuantSpec {
  const { rotation: _, ...rest } = spec;
  return rest;
}

/**
 * Reconstructs f32 values from a {@link QuantizedTensor}: `decode(code) · scale` for fp8,
 * `q · scale` for int8, `(q − zero) · scale` for int4, exact decoding for f16/bf16; with a
 * `rotation`, then the same Walsh–Hadamard transform again times `1/rotation` (its inverse).
 *
 * @throws QuantizerError `LENGTH_MISMATCH` when `data`, `scales` or `zeros` do not match the
 * spec and shape.
 */
export function dequantize(t: QuantizedTensor): Float32Array {
  const { spec, shape } = t;
  validateSpec(spec, shape);
  const n = shape.tokens * shape.heads * shape.headDim;
  const groups = numScaleGroups(spec, shape);
  const dataBytes = storageBytes(spec, shape) - groups * (spec.format === 'int4' ? 8 : 4);
  if (
    t.data.length !== dataBytes ||
    t.scales.length !== groups ||
    t.zeros.length !== (spec.format === 'int4' ? groups : 0)
  ) {
    throw new QuantizerError(
      'LENGTH_MISMATCH',
      `quantized tensor has ${t.data.length} data bytes, ${t.scales.length} scales, ${t.zeros.length} zeros; ` +
        `spec and shape need ${dataBytes}, ${groups}, ${spec.format === 'int4' ? groups : 0}`,
    );
  }
  if (spec.rotation !== undefined) {
    const out = dequantize({ ...t, spec: unrotated(spec) });
    hadamardF32(out, spec.rotation);
    const inv = 1 / spec.rotation;
    for (let i = 0; i < n; i++) out[i] = out[i]! * inv;
    return out;
  }
  const out = new Float32Array(n);
  const ob = new Uint32Array(out.buffer);
  const { data, scales, zeros } = t;
  const fmt = spec.format;
  if (fmt === 'f16' || fmt === 'bf16') {
    const fs = FLOAT_FORMATS[fmt];
    for (let i = 0; i < n; i++) ob[i] = decodeFloatBits(fs, data[2 * i]! | (data[2 * i + 1]! << 8));
    return out;
  }
  let lut: Float32Array | undefined;
  if (fmt === 'fp8-e4m3' || fmt === 'fp8-e5m2') {
    const fs = FLOAT_FORMATS[fmt];
    lut = new Float32Array(256);
    for (let c = 0; c < 256; c++) lut[c] = bitsToF32(decodeFloatBits(fs, c));
  }
  forEachGroup(spec, shape, (grp, start, count, stride) => {
    const end = start + count * stride;
    const scale = scales[grp]!;
    if (fmt === 'int4') {
      const zero = zeros[grp]!;
      for (let i = start; i < end; i += stride) {
        const q = (data[i >>> 1]! >>> ((i & 1) * 4)) & 0xf;
        out[i] = int4Decode(q, scale, zero);
      }
    } else if (lut === undefined) {
      for (let i = start; i < end; i += stride) out[i] = int8Decode((data[i]! << 24) >> 24, scale);
    } else {
      for (let i = start; i < end; i += stride) out[i] = lut[data[i]!]! * scale;
    }
  });
  return out;
}
