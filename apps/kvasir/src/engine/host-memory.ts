import { freemem } from 'node:os';

/**
 * Host memory this process may still take: what the OS reports available, within a cgroup
 * (container) limit when there is one. The CPU backend plans its KV cache with it.
 */
export function hostAvailableBytes(): number {
  const available = freemem();
  const limit = process.constrainedMemory?.() ?? 0;
  return limit > 0 && limit < available ? limit : available;
}
