import {
  type BlockId,
  createEvictionPolicy,
  type EvictionPolicy,
  evictionPolicies,
  isEvictionPolicyName,
  validateEvictionPolicy,
} from '@kvasir/kv-allocator';
import { loadPlugin } from './plugin-loader.js';

/**
 * Resolves the `evictionPolicy` setting: a built-in name from `@kvasir/kv-allocator`'s registry
 * (`lru`, `lfu`, `fifo`) or a path to a JavaScript module whose default export is an
 * `EvictionPolicy` (made with `defineEvictionPolicy`) or a factory of one.
 *
 * @example
 * ```js
 * // my-policy.mjs: evict the block freed most recently (MRU)
 * import { defineEvictionPolicy } from '@kvasir/kv-allocator';
 * export default () => {
 *   const keys = new Set();
 *   return defineEvictionPolicy({
 *     name: 'mru',
 *     insert: (k) => keys.add(k),
 *     touch: () => {},
 *     remove: (k) => keys.delete(k),
 *     chooseVictim: () => [...keys].at(-1),
 *   });
 * };
 * ```
 * @throws KvasirAppError `POLICY_LOAD` when the module cannot be imported or exports no valid
 *   policy.
 */
export async function loadEvictionPolicy(
  setting: string,
  baseDir = process.cwd(),
): Promise<EvictionPolicy<BlockId>> {
  if (isEvictionPolicyName(setting)) return createEvictionPolicy(setting);
  const make = await loadPlugin(
    setting,
    {
      kind: 'eviction policy',
      validate: (v) => validateEvictionPolicy<BlockId>(v),
      alternatives: `${Object.keys(evictionPolicies).join(', ')} or a path to a JavaScript module`,
    },
    baseDir,
  );
  return make();
}
