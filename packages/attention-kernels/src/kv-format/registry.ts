// Built-in KV formats by name, and the registration of new ones.

import { AttentionKernelError } from '../errors.js';
import { f16Format, f32Format } from './float.js';
import { int4KvFormat } from './int4.js';
import { int4H32KvFormat } from './int4-h32.js';
import { fp8E4m3KvFormat, fp8E5m2KvFormat, int8KvFormat } from './int8-fp8.js';
import { int8H8KvFormat } from './int8-h8.js';
import type { KvFormat } from './types.js';

/** The quantized formats with dynamic scales, by name, for registration. */
export const QUANTIZED_KV_FORMATS: readonly KvFormat[] = [
  int8KvFormat,
  fp8E4m3KvFormat,
  fp8E5m2KvFormat,
  int4KvFormat,
  int8H8KvFormat,
  int4H32KvFormat,
];

const FORMATS = new Map<string, KvFormat>([
  ['f32', f32Format],
  ['f16', f16Format],
  ...QUANTIZED_KV_FORMATS.map((f): [string, KvFormat] => [f.name, f]),
]);

/**
 * Register a format of your own so {@link kvFormat} finds it by name (the built-in formats are
 * registered already); a format of the same name is replaced.
 */
export function registerKvFormat(format: KvFormat): void {
  FORMATS.set(format.name, format);
}

/**
 * The format named `name`.
 *
 * @throws {AttentionKernelError} `UNSUPPORTED_FORMAT` for an unknown name.
 */
export function kvFormat(name: string): KvFormat {
  const f = FORMATS.get(name);
  if (f === undefined) {
    throw new AttentionKernelError(
      'UNSUPPORTED_FORMAT',
      `Unknown KV format '${name}'; known: ${[...FORMATS.keys()].join(', ')}.`,
    );
  }
  return f;
}
