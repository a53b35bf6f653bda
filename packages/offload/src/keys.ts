import { createHash } from 'node:crypto';
import type { BlockHash } from '@kvasir/kv-allocator';
import { OffloadError } from './errors.js';

/** Version of the stored KV byte format; part of every namespace fingerprint. */
export const KV_FORMAT_VERSION = 1;

const HEX32 = /^[0-9a-f]{32}$/;

/**
 * Everything that changes the bytes of a stored KV block. Two engines share blocks only when
 * every field is equal; change any of them and the fingerprint, hence every key, changes.
 */
export interface KvNamespaceSpec {
  /** Model identifier, e.g. `meta-llama/Llama-3.1-8B-Instruct`. */
  readonly modelId: string;
  /** Digest of the weights (a safetensors SHA-256, a revision hash): fine-tunes of one id differ. */
  readonly weightDigest: string;
  /** KV element format as stored: `f32`, `f16`, `bf16`, `fp8-e4m3`, `int8`, `int4`, ... */
  readonly kvDtype: string;
  /** Where and how quantization scales are laid out, e.g. `per-slab-f32`; `none` by default. */
  readonly scaleLayout?: string;
  readonly blockSize: number;
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /**
   * Optional, from a spread `KvLayout`: bytes per stored element and scale bytes per token and
   * head. Implied by `kvDtype`/`scaleLayout`; when given they are fingerprinted too.
   */
  readonly bytesPerElement?: number;
  readonly scaleBytesPerTokenHead?: number;
  /** Layout revision of the engine's cache; defaults to {@link KV_FORMAT_VERSION}. */
  readonly formatVersion?: number;
  /** Anything else that changes the bytes (tensor-parallel rank, LoRA merged into K/V, ...). */
  readonly extra?: Readonly<Record<string, string | number>>;
}

function positiveInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `namespace field ${name} must be a positive integer`,
      {
        details: { [name]: v },
      },
    );
  }
  return v;
}

function nonEmpty(name: string, v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `namespace field ${name} must be a non-empty string`,
      {
        details: { [name]: v },
      },
    );
  }
  return v;
}

function optionalNumber(name: string, v: unknown): [string, number][] {
  if (v === undefined) return [];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `namespace field ${name} must be a finite number ≥ 0`,
      {
        details: { [name]: v },
      },
    );
  }
  return [[name, v]];
}

/**
 * The namespace fingerprint of a KV layout: 32 lowercase hex characters (SHA-256 of a canonical
 * encoding of every field, truncated to 128 bits). Stores put it in every key and every frame
 * header, so a block written under one layout can never be read under another.
 *
 * @example
 * ```ts
 * const ns = kvNamespace({ modelId: 'tiny', weightDigest: 'sha256:ab12', kvDtype: 'f16',
 *   blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64 });
 * // or from the allocator's layout:
 * const ns2 = kvNamespace({ ...layout, modelId, weightDigest, kvDtype: 'int8', scaleLayout: 'per-slab-f32' });
 * ```
 * @throws {OffloadError} INVALID_OPTIONS when a field is missing or out of range.
 */
export function kvNamespace(spec: KvNamespaceSpec): string {
  return createHash('sha256').update(canonicalSpec(spec)).digest('hex').slice(0, 32);
}

/**
 * {@link kvNamespace} through Web Crypto (`crypto.subtle`), for runtimes without `node:crypto`
 * (browsers, workers): the same fingerprint for the same spec.
 * @throws {OffloadError} INVALID_OPTIONS when a field is missing or out of range.
 */
export async function kvNamespaceAsync(spec: KvNamespaceSpec): Promise<string> {
  const canonical = new TextEncoder().encode(canonicalSpec(spec));
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', canonical));
  let hex = '';
  for (const b of digest.subarray(0, 16)) hex += b.toString(16).padStart(2, '0');
  return hex;
}

/** The fields of a spec, checked, in one canonical string. */
function canonicalSpec(spec: KvNamespaceSpec): string {
  const extra = spec.extra ?? {};
  const extraPairs: [string, string | number][] = [];
  for (const k of Object.keys(extra).sort()) {
    const v = extra[k];
    if (typeof v !== 'string' && !(typeof v === 'number' && Number.isFinite(v))) {
      throw new OffloadError('INVALID_OPTIONS', `namespace extra.${k} must be a string or number`, {
        details: { [k]: v },
      });
    }
    extraPairs.push([k, v]);
  }
  // A fixed field order (not object key order) keeps the fingerprint stable across callers.
  return JSON.stringify([
    'kvasir-offload-namespace',
    nonEmpty('modelId', spec.modelId),
    nonEmpty('weightDigest', spec.weightDigest),
    nonEmpty('kvDtype', spec.kvDtype),
    nonEmpty('scaleLayout', spec.scaleLayout ?? 'none'),
    positiveInt('blockSize', spec.blockSize),
    positiveInt('numLayers', spec.numLayers),
    positiveInt('numKvHeads', spec.numKvHeads),
    positiveInt('headDim', spec.headDim),
    positiveInt('formatVersion', spec.formatVersion ?? KV_FORMAT_VERSION),
    extraPairs,
    // Appended only when present, so specs without them keep their fingerprints.
    ...optionalNumber('bytesPerElement', spec.bytesPerElement),
    ...optionalNumber('scaleBytesPerTokenHead', spec.scaleBytesPerTokenHead),
  ]);
}

/** True when `key` is a well-formed block hash (32 lowercase hex characters). */
export function isBlockHash(key: unknown): key is BlockHash {
  return typeof key === 'string' && HEX32.test(key);
}

/** @throws {OffloadError} INVALID_KEY */
export function checkKey(key: unknown): asserts key is BlockHash {
  if (!isBlockHash(key)) {
    throw new OffloadError(
      'INVALID_KEY',
      `block key must be a 32-character lowercase hex block hash, got ${JSON.stringify(String(key)).slice(0, 80)}`,
      { details: { key } },
    );
  }
}

/** @throws {OffloadError} INVALID_KEY */
export function checkNamespace(ns: unknown): asserts ns is string {
  if (!isBlockHash(ns)) {
    throw new OffloadError(
      'INVALID_KEY',
      'namespace must be a fingerprint from kvNamespace() (32 lowercase hex characters)',
      { details: { namespace: ns } },
    );
  }
}
