import type { GpuBinding } from '@kvasir/gpu';
import { AttentionKernelError } from './errors.js';

/** Bytes a binding covers: the whole buffer from its offset, or its explicit size. */
export function bindingSize(b: GpuBinding): number {
  if ('buffer' in b) return b.size ?? b.buffer.size - (b.offset ?? 0);
  return b.size;
}

/**
 * Check that binding `name` holds at least `bytes` bytes.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH`.
 */
export function requireBytes(b: GpuBinding, bytes: number, name: string, shape: string): void {
  const size = bindingSize(b);
  if (size < bytes) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `${name} holds ${size} bytes but ${shape} needs ${bytes}.`,
      { details: { name, size, needed: bytes } },
    );
  }
}

/**
 * Check that `value` is a non-negative integer.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT`.
 */
export function requireCount(value: number, name: string): void {
  if (!Number.isInteger(value) || value < 0) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} must be a non-negative integer, got ${value}.`,
      {
        details: { [name]: value },
      },
    );
  }
}

/**
 * Check a binding against the device's storage binding limit.
 *
 * @throws {AttentionKernelError} `DEVICE_LIMIT`.
 */
export function requireBindable(b: GpuBinding, maxBinding: number, name: string): void {
  const size = bindingSize(b);
  if (size > maxBinding) {
    throw new AttentionKernelError(
      'DEVICE_LIMIT',
      `${name} binds ${size} bytes, over the device's maxStorageBufferBindingSize ${maxBinding}; split the cache into smaller buffers.`,
      { details: { name, size, maxBinding } },
    );
  }
}
