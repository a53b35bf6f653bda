import {
  type BlockId,
  createEvictionPolicy,
  type EvictionPolicy,
  evictionPolicies,
  isEvictionPolicyName,
  validateEvictionPolicy,
} from '@kvasir/kv-allocator';
import { DEFAULT_PLUGIN_BUDGET_MS, PluginGuard } from './plugin-guard.js';
import { loadPlugin, type PluginSource, URL_PLUGIN_SOURCE } from './plugin-loader.js';

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
 *
 * A module's policy runs under a {@link PluginGuard}: a hook that overruns `budgetMs` throws, and
 * the block pool then goes on with its built-in LRU policy, as it does for a hook that throws.
 * @throws KvasirEngineError `POLICY_LOAD` when the module cannot be imported or exports no valid
 *   policy.
 */
export async function loadEvictionPolicy(
  setting: string,
  source: PluginSource = URL_PLUGIN_SOURCE,
  options: { readonly budgetMs?: number } = {},
): Promise<EvictionPolicy<BlockId>> {
  if (isEvictionPolicyName(setting)) return createEvictionPolicy(setting);
  const make = await loadPlugin(
    setting,
    {
      kind: 'eviction policy',
      validate: (v) => validateEvictionPolicy<BlockId>(v),
      alternatives: `${Object.keys(evictionPolicies).join(', ')} or a path to a JavaScript module`,
    },
    source,
  );
  return guardEvictionPolicy(make(), options.budgetMs ?? DEFAULT_PLUGIN_BUDGET_MS);
}

/** The same policy with every hook timed by a {@link PluginGuard}. */
export function guardEvictionPolicy(
  policy: EvictionPolicy<BlockId>,
  budgetMs: number,
): EvictionPolicy<BlockId> {
  const guard = new PluginGuard(`eviction policy ${policy.name}`, budgetMs);
  return {
    specificationVersion: policy.specificationVersion,
    name: policy.name,
    insert: (k) => guard.call('insert', () => policy.insert(k)),
    touch: (k) => guard.call('touch', () => policy.touch(k)),
    remove: (k) => guard.call('remove', () => policy.remove(k)),
    chooseVictim: () => guard.call('chooseVictim', () => policy.chooseVictim()),
    ...(policy.forget
      ? { forget: (k: BlockId) => guard.call('forget', () => policy.forget?.(k)) }
      : {}),
  };
}
