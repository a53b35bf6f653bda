// Small pure helpers of `Gpu`: byte views, bind group entries, workgroup counts, shader compile
// messages.
import type { GpuBinding, Workgroups } from './gpu-types.js';

/** The bytes of a view or buffer, without a copy. */
export function asBytes(data: ArrayBufferView | ArrayBuffer): Uint8Array {
  return data instanceof ArrayBuffer
    ? new Uint8Array(data)
    : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/**
 * Bind group entries binding `bindings[i]` at `@binding(i)`, or at the keys of an object (for a
 * shader that skips binding numbers).
 */
export function bindGroupEntries(
  bindings: readonly GpuBinding[] | Readonly<Record<number, GpuBinding>>,
): GPUBindGroupEntry[] {
  const pairs: [number, GpuBinding][] = Array.isArray(bindings)
    ? (bindings as readonly GpuBinding[]).map((b, i) => [i, b])
    : Object.entries(bindings).map(([k, b]) => [Number(k), b as GpuBinding]);
  return pairs.map(([binding, b]) => ({ binding, resource: 'buffer' in b ? b : { buffer: b } }));
}

/** True for a `GPUBindGroup` rather than a buffer or a buffer binding. */
export function isBindGroup(b: unknown): b is GPUBindGroup {
  return (
    typeof b === 'object' &&
    b !== null &&
    !('buffer' in b) &&
    !('size' in b && 'usage' in b) &&
    !('mapState' in b)
  );
}

/** A workgroup count as `[x, y, z]`. */
export function normalizeWorkgroups(w: Workgroups): [number, number, number] {
  return typeof w === 'number' ? [w, 1, 1] : [w[0], w[1] ?? 1, w[2] ?? 1];
}

/**
 * Split `count` workgroups into `[x, y]` with `x ≤ maxPerDimension`, for kernels that index
 * past the 65 535-per-dimension limit (`id = wg.y * x + wg.x`, guarding `id < count`).
 */
export function splitWorkgroups(count: number, maxPerDimension = 65535): [number, number] {
  if (count <= maxPerDimension) return [Math.max(1, count), 1];
  const y = Math.ceil(count / maxPerDimension);
  return [Math.ceil(count / y), y];
}

/** A shader's compilation messages with the source line each names. */
export function formatCompileMessages(
  code: string,
  messages: readonly GPUCompilationMessage[],
): string {
  const lines = code.split('\n');
  return messages
    .map((m) => {
      const src = m.lineNum > 0 ? lines[m.lineNum - 1] : undefined;
      const where = m.lineNum > 0 ? `${m.lineNum}:${m.linePos}` : '?';
      return `  ${m.type} at ${where}: ${m.message}${src === undefined ? '' : `\n    | ${src.trim()}`}`;
    })
    .join('\n');
}
