import { QuantizerError } from './errors.js';
import { type HadamardSize, isHadamardSize } from './hadamard.js';
import { FLOAT_FORMATS, type FloatFormat } from './minifloat.js';

/** Every storage format of the package. `fp8-*` are OCP OFP8 (E4M3 max 448, E5M2 max 57344). */
export type QuantFormat = FloatFormat | 'int8' | 'int4';

/** All format names, in order of decreasing precision. */
export const QUANT_FORMATS: readonly QuantFormat[] = [
  'f16',
  'bf16',
  'fp8-e4m3',
  'fp8-e5m2',
  'int8',
  'int4',
];

/** Group sizes along the head dimension that kernels are generated for. */
export type HeadDimGroupSize = 32 | 64 | 128;

/**
 * Where scales (and int4 zero points) apply, as part of the format.
 *
 * - `none`: no scale (f16, bf16).
 * - `per-tensor`: one static scale, calibrated offline (see `calibrateScale`); fp8 and int8.
 * - `per-token-head`: one scale per head vector, computed from its amax at write time.
 * - `group`: one scale per `groupSize` consecutive elements along the head dimension.
 * - `per-channel`: one scale per (head, channel) for each run of `groupSize` tokens: KIVI's
 *   arrangement for keys, whose outliers sit in fixed channels.
 */
export type Granularity =
  | { readonly kind: 'none' }
  | { readonly kind: 'per-tensor'; readonly scale: number }
  | { readonly kind: 'per-token-head' }
  | { readonly kind: 'group'; readonly groupSize: HeadDimGroupSize }
  | { readonly kind: 'per-channel'; readonly groupSize: number };

/** A complete quantization recipe: element format, scale granularity, overflow mode. */
export interface QuantSpec {
  readonly format: QuantFormat;
  readonly granularity: Granularity;
  /** Float formats: clamp finite overflow to ±max (default true). Integers always clamp. */
  readonly saturate?: boolean;
  /**
   * Rotate every run of `rotation` elements along the head dimension with the Walsh–Hadamard
   * transform before quantizing (see `hadamardF32`), and back after dequantizing: outlier
   * channels are spread over their run, so one large channel no longer sets a whole group's
   * step. Only with dynamic scales along the head dimension (`per-token-head`, `group`).
   */
  readonly rotation?: HadamardSize;
}

/** Logical shape of a K or V tensor: `[tokens][heads][headDim]`, row-major. */
export interface KvShape {
  readonly tokens: number;
  readonly heads: number;
  readonly headDim: number;
}

/** Static facts about a format, for tables and memory arithmetic. */
export interface FormatInfo {
  readonly format: QuantFormat;
  /** Bits per stored element, scales excluded. */
  readonly bits: 4 | 8 | 16;
  /** Largest finite value of the element code (int formats: largest code magnitude). */
  readonly max: number;
  /** True for formats with no scale. */
  readonly unscaled: boolean;
  /** Bytes of metadata per scale group: 4 (f32 scale), 8 for int4 (f32 scale and f32 min). */
  readonly bytesPerGroup: number;
}

/** Facts about `format`. @throws QuantizerError `UNKNOWN_FORMAT`. */
export function formatInfo(format: QuantFormat): FormatInfo {
  switch (format) {
    case 'f16':
    case 'bf16':
      return { format, bits: 16, max: FLOAT_FORMATS[format].max, unscaled: true, bytesPerGroup: 0 };
    case 'fp8-e4m3':
    case 'fp8-e5m2':
      return { format, bits: 8, max: FLOAT_FORMATS[format].max, unscaled: false, bytesPerGroup: 4 };
    case 'int8':
      return { format, bits: 8, max: 127, unscaled: false, bytesPerGroup: 4 };
    case 'int4':
      return { format, bits: 4, max: 15, unscaled: false, bytesPerGroup: 8 };
    default:
      throw new QuantizerError('UNKNOWN_FORMAT', `unknown format ${JSON.stringify(format)}`, {
        details: { format },
      });
  }
}

function positiveInt(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) {
    throw new QuantizerError('BAD_SHAPE', `${name} must be a positive integer, got ${v}`, {
      details: { [name]: v },
    });
  }
}

/**
 * Checks that `spec` is a supported combination for `shape`.
 * @throws QuantizerError `UNKNOWN_FORMAT`, `UNSUPPORTED_GRANULARITY`, `BAD_GROUP_SIZE`,
 * `BAD_SCALE` or `BAD_SHAPE`, naming what is wrong.
 */
export function validateSpec(spec: QuantSpec, shape: KvShape): void {
  const info = formatInfo(spec.format);
  positiveInt('tokens', shape.tokens);
  positiveInt('heads', shape.heads);
  positiveInt('headDim', shape.headDim);
  const g = spec.granularity;
  const bad = (why: string): never => {
    throw new QuantizerError(
      'UNSUPPORTED_GRANULARITY',
      `format ${spec.format} does not support granularity ${g.kind}: ${why}`,
      { details: { format: spec.format, granularity: g.kind } },
    );
  };
  if (spec.rotation !== undefined) {
    if (!isHadamardSize(spec.rotation) || shape.headDim % spec.rotation !== 0) {
      throw new QuantizerError(
        'BAD_GROUP_SIZE',
        `rotation must be 8, 16, 32, 64 or 128 and divide headDim ${shape.headDim}, got ${spec.rotation}`,
        { details: { rotation: spec.rotation, headDim: shape.headDim } },
      );
    }
    if (g.kind !== 'per-token-head' && g.kind !== 'group') {
      bad('a rotation needs scales computed per row or per group along the head dimension');
    }
  }
  if (info.unscaled) {
    if (g.kind !== 'none') bad('f16 and bf16 are stored without scales');
    return;
  }
  switch (g.kind) {
    case 'none':
      bad('scaled formats need a scale granularity');
      break;
    case 'per-tensor':
      if (spec.format === 'int4') bad('int4 is asymmetric and needs per-group zero points');
      if (!(Number.isFinite(g.scale) && g.scale > 0)) {
        throw new QuantizerError(
          'BAD_SCALE',
          `per-tensor scale must be finite and > 0, got ${g.scale}`,
          {
            details: { scale: g.scale },
          },
        );
      }
      break;
    case 'per-token-head':
      break;
    case 'group':
      if (g.groupSize !== 32 && g.groupSize !== 64 && g.groupSize !== 128) {
        throw new QuantizerError(
          'BAD_GROUP_SIZE',
          `group size must be 32, 64 or 128, got ${g.groupSize}`,
          {
            details: { groupSize: g.groupSize },
          },
        );
      }
      if (shape.headDim % g.groupSize !== 0) {
        throw new QuantizerError(
          'BAD_GROUP_SIZE',
          `headDim ${shape.headDim} is not a multiple of group size ${g.groupSize}`,
          { details: { groupSize: g.groupSize, headDim: shape.headDim } },
        );
      }
      break;
    case 'per-channel':
      if (!Number.isInteger(g.groupSize) || g.groupSize < 1) {
        throw new QuantizerError(
          'BAD_GROUP_SIZE',
          `per-channel token group must be ≥ 1, got ${g.groupSize}`,
          {
            details: { groupSize: g.groupSize },
          },
        );
      }
      break;
    default:
      throw new QuantizerError(
        'UNSUPPORTED_GRANULARITY',
        `unknown granularity ${JSON.stringify(g)}`,
      );
  }
}

/** Number of scale groups `spec` uses for `shape` (0 for unscaled formats). */
export function numScaleGroups(spec: QuantSpec, shape: KvShape): number {
  const g = spec.granularity;
  const rows = shape.tokens * shape.heads;
  switch (g.kind) {
    case 'none':
      return 0;
    case 'per-tensor':
      return 1;
    case 'per-token-head':
      return rows;
    case 'group':
      return rows * (shape.headDim / g.groupSize);
    case 'per-channel':
      return Math.ceil(shape.tokens / g.groupSize) * shape.heads * shape.headDim;
  }
}

/**
 * Bytes a tensor of `shape` occupies in `spec`, element codes plus scales and zero points
 * (a per-tensor scale is counted once).
 */
export function storageBytes(spec: QuantSpec, shape: KvShape): number {
  const info = formatInfo(spec.format);
  const n = shape.tokens * shape.heads * shape.headDim;
  return Math.ceil((n * info.bits) / 8) + numScaleGroups(spec, shape) * info.bytesPerGroup;
}

/**
 * Bytes per token per KV head for K or V alone, element codes plus per-token scales: the
 * figure the KV layout counts (per-tensor scales are not per token and count 0).
 */
export function bytesPerTokenHead(spec: QuantSpec, headDim: number): number {
  const info = formatInfo(spec.format);
  const g = spec.granularity;
  const data = (headDim * info.bits) / 8;
  switch (g.kind) {
    case 'per-token-head':
      return data + info.bytesPerGroup;
    case 'group':
      return data + (headDim / g.groupSize) * info.bytesPerGroup;
    case 'per-channel':
      // One group per channel every groupSize tokens.
      return data + (headDim * info.bytesPerGroup) / g.groupSize;
    default:
      return data;
  }
}

/**
 * KIVI's int4 arrangement: keys quantized per channel in runs of `tokenGroup` tokens (their
 * outliers are channel-aligned), values per token in groups of `valueGroup` along the head dim.
 */
export function kiviSpecs(
  tokenGroup = 32,
  valueGroup: HeadDimGroupSize = 32,
): { readonly key: QuantSpec; readonly value: QuantSpec } {
  return {
    key: { format: 'int4', granularity: { kind: 'per-channel', groupSize: tokenGroup } },
    value: { format: 'int4', granularity: { kind: 'group', groupSize: valueGroup } },
  };
}

/**
 * The two numbers `@kvasir/kv-allocator`'s `KvLayout` needs for a cache stored in `spec`:
 * `bytesPerElement` (codes only) and `scaleBytesPerTokenHead` (per-token scales and zero
 * points of K or V alone; a static per-tensor scale is not per token and counts 0).
 *
 * @example int8 per token-head, head dim 128: `{ bytesPerElement: 1, scaleBytesPerTokenHead: 4 }`.
 * @throws QuantizerError `UNKNOWN_FORMAT`.
 */
export function kvLayoutBytes(
  spec: QuantSpec,
  headDim: number,
): { readonly bytesPerElement: number; readonly scaleBytesPerTokenHead: number } {
  const bytesPerElement = formatInfo(spec.format).bits / 8;
  return {
    bytesPerElement,
    scaleBytesPerTokenHead: bytesPerTokenHead(spec, headDim) - headDim * bytesPerElement,
  };
}
