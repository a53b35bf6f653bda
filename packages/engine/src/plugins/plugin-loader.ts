import { KvasirEngineError } from '../errors.js';

/**
 * How long a plug-in module may take to load. A top-level `await` that never settles would
 * otherwise leave nothing for Node to wait on, and the process would exit 0 without a word
 * (and leave a page waiting forever).
 */
export const PLUGIN_IMPORT_TIMEOUT_MS = 5_000;

/**
 * Where plug-in modules come from: how a setting's name becomes the module's full name (shown in
 * errors), and how that module is imported. The app's Node source resolves paths against the
 * working directory; {@link URL_PLUGIN_SOURCE}, the default, imports URLs as a page or worker does.
 */
export interface PluginSource {
  /** The module's full name: an absolute path in Node, a URL in a page. */
  resolve(specifier: string): string;
  /** Imports the module {@link resolve} named; rejects when it cannot. */
  import(resolved: string): Promise<unknown>;
}

/** Imports modules by URL (absolute, or relative to the running script), as `import()` does. */
export const URL_PLUGIN_SOURCE: PluginSource = {
  resolve: (specifier) => specifier,
  import: (url) => import(/* @vite-ignore */ url),
};

/** What {@link loadPlugin} needs to know of one kind of plug-in. */
export interface PluginKind<T> {
  /** Shown in errors: `eviction policy`. */
  readonly kind: string;
  /** The owning library's check of its contract; throws naming what is wrong. */
  readonly validate: (value: unknown) => T;
  /** What else the setting could have named, for the error of a module that cannot load. */
  readonly alternatives?: string;
  /**
   * True when a factory takes what only its caller has (a KV connector's engine context): it is
   * then first called, and checked, by the caller, instead of once at load.
   */
  readonly factoryTakesArguments?: boolean;
}

/**
 * Loads a user's plug-in module. Its default export (or an export named `plugin`) is either the
 * plug-in itself, an object of the owning library's versioned contract (made with its
 * `define…()` helper), or a factory: a function returning one, called for each use (with no
 * arguments, or those of `Args` for a kind whose factories take some). A class is not a
 * factory: export `() => new MyPolicy()` or an instance.
 *
 * @returns a factory of validated plug-ins (an exported object is returned by every call); it
 *   throws `POLICY_LOAD` naming the module when the module's factory throws or breaks the
 *   contract.
 * @throws KvasirEngineError `POLICY_LOAD` when the module cannot be imported (or does not finish
 *   loading within `importTimeoutMs`), exports nothing usable, or what it makes breaks the
 *   contract.
 */
export async function loadPlugin<T, Args extends unknown[] = []>(
  modulePath: string,
  plugin: PluginKind<T>,
  source: PluginSource = URL_PLUGIN_SOURCE,
  importTimeoutMs = PLUGIN_IMPORT_TIMEOUT_MS,
): Promise<(...args: Args) => T> {
  const path = source.resolve(modulePath);
  let mod: Record<string, unknown>;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new KvasirEngineError(
              'POLICY_LOAD',
              `${plugin.kind} module ${path} did not finish loading within ${importTimeoutMs / 1000} s (a top-level await that never settles?)`,
            ),
          ),
        importTimeoutMs,
      );
    });
    mod = (await Promise.race([source.import(path), timeout])) as Record<string, unknown>;
  } catch (error) {
    if (KvasirEngineError.isInstance(error)) throw error;
    throw new KvasirEngineError(
      'POLICY_LOAD',
      `cannot load ${plugin.kind} module ${path}: ${(error as Error).message}${plugin.alternatives ? ` (expected ${plugin.alternatives})` : ''}`,
      { cause: error },
    );
  } finally {
    clearTimeout(timer);
  }
  const exported = mod.default ?? mod.plugin;
  const fail = (why: string, cause?: unknown): never => {
    throw new KvasirEngineError('POLICY_LOAD', `${plugin.kind} module ${path} ${why}`, { cause });
  };
  const check = (value: unknown): T => {
    try {
      return plugin.validate(value);
    } catch (error) {
      return fail(`does not export a valid ${plugin.kind}: ${(error as Error).message}`, error);
    }
  };
  if (typeof exported === 'function') {
    const factory = exported as (...args: Args) => unknown;
    const make = (...args: Args): T => {
      let value: unknown;
      try {
        value = factory(...args);
      } catch (error) {
        if (error instanceof TypeError && /class constructor/i.test(error.message)) {
          return fail(
            `exports a class; export an instance or a factory such as () => new ${factory.name || 'MyPolicy'}()`,
            error,
          );
        }
        return fail(`threw from its factory: ${(error as Error).message}`, error);
      }
      return check(value);
    };
    // A broken factory fails at start-up, not at first use.
    if (!plugin.factoryTakesArguments) make(...([] as unknown[] as Args));
    return make;
  }
  if (typeof exported === 'object' && exported !== null) {
    const value = check(exported);
    return () => value;
  }
  return fail(`has no default export (export default a ${plugin.kind} or a factory of one)`);
}
