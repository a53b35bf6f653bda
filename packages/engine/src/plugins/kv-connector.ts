import {
  defineKvConnector,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorFactory,
  type KvConnectorHooks,
  validateKvConnector,
} from '@kvasir/offload/connectors';
import { DEFAULT_PLUGIN_BUDGET_MS, PluginGuard } from './plugin-guard.js';
import { loadPlugin, type PluginSource, URL_PLUGIN_SOURCE } from './plugin-loader.js';

/**
 * Loads the `--kv-connector` modules (the config file's `kvConnectors`). Each module's default
 * export is a v1 `KvConnector` of `@kvasir/offload/connectors` (made with `defineKvConnector`)
 * or a factory of one, called once with the engine's context (the allocator, the device
 * blocks, the extra keys, a wake-up) when the engine is built.
 *
 * @example
 * ```js
 * // my-connector.mjs: counts the rows of every step
 * import { defineKvConnector } from '@kvasir/offload/connectors';
 * export default (context) => {
 *   let rows = 0;
 *   return defineKvConnector({
 *     name: 'row-counter',
 *     afterForward: (step) => { rows += step.rows.length; },
 *     close: async () => console.error(`${rows} rows`),
 *   });
 * };
 * ```
 *
 * A module's connector runs under a {@link PluginGuard}: a call whose synchronous part overruns
 * `budgetMs` throws, and the connector is no longer called (its lookups are misses). Only the
 * synchronous part is timed: what a hook awaits (its storage) is the connector's to bound.
 * @returns one factory per module, in order; each throws `POLICY_LOAD` naming its module when
 *   the module's factory throws or returns no valid connector.
 * @throws KvasirEngineError `POLICY_LOAD` when a module cannot be imported or exports neither a
 *   connector nor a function.
 */
export async function loadKvConnectors(
  modulePaths: readonly string[],
  source: PluginSource = URL_PLUGIN_SOURCE,
  options: { readonly budgetMs?: number } = {},
): Promise<KvConnectorFactory[]> {
  const budgetMs = options.budgetMs ?? DEFAULT_PLUGIN_BUDGET_MS;
  const factories: KvConnectorFactory[] = [];
  for (const path of modulePaths) {
    const make = await loadPlugin<KvConnector, [KvConnectorContext]>(
      path,
      {
        kind: 'KV connector',
        validate: validateKvConnector,
        alternatives: 'a path to a JavaScript module',
        factoryTakesArguments: true,
      },
      source,
    );
    factories.push((context) => {
      const connector = make(context);
      return guardKvConnector(
        connector,
        new PluginGuard(`KV connector ${connector.name}`, budgetMs),
      );
    });
  }
  return factories;
}

/**
 * The same connector with every hook timed by `guard`. Once the guard has disabled it, its
 * hooks are no longer called: it brings nothing at admission, has no pending work and moves no
 * block; `close` is still called.
 */
export function guardKvConnector(connector: KvConnector, guard: PluginGuard): KvConnector {
  const on = () => guard.disabled === undefined;
  const c = connector;
  const hooks: KvConnectorHooks = { name: c.name, close: () => c.close() };
  if (c.onAdmit) {
    hooks.onAdmit = async (request) =>
      on() ? guard.call('onAdmit', () => c.onAdmit?.(request) ?? Promise.resolve(0)) : 0;
  }
  if (c.betweenSteps) {
    hooks.betweenSteps = async () => {
      if (on()) await guard.call('betweenSteps', () => c.betweenSteps?.());
    };
    // A getter (a spread would read it once): the connector's state changes between steps.
    Object.defineProperty(hooks, 'hasPendingWork', {
      enumerable: true,
      get: () => on() && guard.call('hasPendingWork', () => c.hasPendingWork === true),
    });
  }
  if (c.beforeForward) {
    hooks.beforeForward = async (step) =>
      on() ? guard.call('beforeForward', () => c.beforeForward?.(step)) : undefined;
  }
  if (c.afterForward) {
    hooks.afterForward = (step) => {
      if (on()) guard.call('afterForward', () => c.afterForward?.(step));
    };
  }
  return defineKvConnector(hooks);
}
