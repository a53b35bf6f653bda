import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  type BlockId,
  createEvictionPolicy,
  type EvictionPolicy,
  validateEvictionPolicy,
} from '@kvasir/kv-allocator';
import { KvasirAppError } from './errors.js';

const BUILT_IN = new Set(['lru', 'lfu', 'fifo']);

/**
 * Resolves the `evictionPolicy` setting: a built-in name (`lru`, `lfu`, `fifo`) or a path to a
 * JavaScript module. The module's default export (or its `policy` / `createPolicy` export) is a
 * policy object, a class, or a factory function returning one; a fresh policy is made per pool.
 *
 * @example
 * ```js
 * // my-policy.mjs: evict the block inserted most recently (MRU)
 * export default function createPolicy() {
 *   const keys = new Set();
 *   return {
 *     name: 'mru',
 *     insert: (k) => keys.add(k),
 *     touch: () => {},
 *     remove: (k) => keys.delete(k),
 *     chooseVictim: () => [...keys].at(-1),
 *   };
 * }
 * ```
 * @throws KvasirAppError `POLICY_LOAD` when the module cannot be imported or exports no policy.
 */
export async function loadEvictionPolicy(
  setting: string,
  baseDir = process.cwd(),
): Promise<EvictionPolicy<BlockId>> {
  if (BUILT_IN.has(setting)) return createEvictionPolicy(setting as 'lru' | 'lfu' | 'fifo');
  const path = resolve(baseDir, setting);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    throw new KvasirAppError(
      'POLICY_LOAD',
      `cannot load eviction policy module ${path}: ${(error as Error).message} (expected lru, lfu, fifo or a path to a JavaScript module)`,
      { cause: error },
    );
  }
  const exported = mod.default ?? mod.policy ?? mod.createPolicy;
  let candidate: unknown = exported;
  if (typeof exported === 'function') {
    const fn = exported as (...args: never[]) => unknown;
    // A class has a prototype with methods; call factories, construct classes.
    const isClass = /^class[\s{]/.test(Function.prototype.toString.call(fn));
    candidate = isClass ? new (fn as unknown as new () => unknown)() : fn();
  }
  try {
    return validateEvictionPolicy<BlockId>(candidate);
  } catch (error) {
    throw new KvasirAppError(
      'POLICY_LOAD',
      `eviction policy module ${path} does not export a policy: ${(error as Error).message}`,
      { cause: error },
    );
  }
}
