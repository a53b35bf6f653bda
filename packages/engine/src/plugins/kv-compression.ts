import {
  type KvCompressionPolicy,
  type KvCompressionSpec,
  kvCompressionFromJson,
  kvCompressionPolicies,
  parseKvCompression,
  SchedulerError,
  validateKvCompressionPolicy,
} from '@kvasir/scheduler';
import type { KvCompressionRequest } from '@kvasir/server/spec';
import { EngineError } from '@kvasir/server/spec';
import { KvasirEngineError } from '../errors.js';
import type { KvCompressionLimits, ModelFacts } from '../model-runner.js';
import { DEFAULT_PLUGIN_BUDGET_MS, PluginGuard } from './plugin-guard.js';
import { loadPlugin, type PluginSource } from './plugin-loader.js';

/**
 * The engine's token-level KV compression: the server-wide default (`--kv-compression`) and a
 * user's policy module, which requests may also name by the policy's `name`.
 */
export interface KvCompressionSetup {
  /** What a request without `kv_compression` gets (none: its cache is never compressed). */
  readonly defaultSpec?: KvCompressionSpec;
  /** The `--kv-compression` text, for banners and reports. */
  readonly describe?: string;
  /**
   * A request's spec: its own `kv_compression` (a built-in by name with parameters, or the
   * loaded module's policy by its name), else the default.
   * @throws EngineError `INVALID_REQUEST` naming the bad policy, parameter or value.
   */
  forRequest(request: KvCompressionRequest | undefined): KvCompressionSpec | undefined;
}

/** A path (has a separator, or ends in .js/.mjs/.cjs) before any `:positions=…`. */
function isModulePath(text: string): boolean {
  const head = text.split(':')[0]!;
  return /[/\\]/.test(head) || /\.(c|m)?js$/.test(head);
}

/**
 * Parses a `--kv-compression` setting without loading anything: a built-in spec, or the module
 * path and the positions that follow it. Every command that reads the setting (`serve`, `info`,
 * `eval`, the config file's check) goes through this one parser.
 * @throws KvasirEngineError `INVALID_CONFIG` naming `--kv-compression` and what is wrong.
 */
export function parseKvCompressionSetting(
  setting: string,
  blockSize: number,
):
  | { readonly spec: KvCompressionSpec }
  | { readonly modulePath: string; readonly positions: 'cache' | 'original' } {
  if (isModulePath(setting)) {
    const [path, ...rest] = setting.split(':');
    const options = rest.join(':').trim();
    if (options === '') return { modulePath: path!, positions: 'cache' };
    const m = /^positions=(cache|original)$/.exec(options);
    if (!m) {
      throw new KvasirEngineError(
        'INVALID_CONFIG',
        `--kv-compression: after a module path only positions=cache|original may follow, got ${JSON.stringify(options)}`,
      );
    }
    return { modulePath: path!, positions: m[1] as 'cache' | 'original' };
  }
  try {
    return { spec: parseKvCompression(setting, { blockSize }) };
  } catch (error) {
    throw new KvasirEngineError('INVALID_CONFIG', `--kv-compression: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * Reads `--kv-compression`: `name:key=value,...` for a built-in (`sinks:sinks=4,window=1020`,
 * `h2o:budget=256`), or the path of a JavaScript module whose default export is a
 * `KvCompressionPolicy` (or a factory of one), optionally followed by `:positions=original`.
 * A module's policy runs under a {@link PluginGuard} (`budgetMs` per call).
 * @throws KvasirEngineError `INVALID_CONFIG` for a bad built-in spec, `POLICY_LOAD` for a module
 *   that does not load, exports no valid policy, takes a built-in's name or whose `maxBlocks`
 *   fails.
 */
export async function loadKvCompression(
  setting: string | undefined,
  blockSize: number,
  options: { readonly budgetMs?: number; readonly source?: PluginSource } = {},
): Promise<KvCompressionSetup> {
  if (setting === undefined) return kvCompressionSetup(blockSize);
  const parsed = parseKvCompressionSetting(setting, blockSize);
  if ('spec' in parsed) return kvCompressionSetup(blockSize, parsed.spec, undefined, setting);
  const make = await loadPlugin(
    parsed.modulePath,
    {
      kind: 'KV compression policy',
      validate: validateKvCompressionPolicy,
      alternatives: 'a built-in such as sinks:sinks=4,window=1020, or a module path',
    },
    options.source,
  );
  const loaded = make();
  const refuse = (why: string, cause?: unknown): never => {
    throw new KvasirEngineError(
      'POLICY_LOAD',
      `KV compression policy module ${parsed.modulePath} (policy ${loaded.name}) ${why}`,
      { cause },
    );
  };
  if (Object.hasOwn(kvCompressionPolicies, loaded.name)) {
    refuse(
      `is named like the built-in policy ${loaded.name}, which requests naming it could no longer reach: give it another name`,
    );
  }
  let blocks: number;
  try {
    blocks = loaded.maxBlocks(blockSize);
  } catch (error) {
    return refuse(`threw from maxBlocks(${blockSize}): ${(error as Error).message}`, error);
  }
  if (!Number.isInteger(blocks) || blocks < 2) {
    refuse(`returned ${String(blocks)} from maxBlocks(${blockSize}): it must be an integer ≥ 2`);
  }
  const guard = new PluginGuard(
    `KV compression policy ${loaded.name}`,
    options.budgetMs ?? DEFAULT_PLUGIN_BUDGET_MS,
  );
  const plugin = guardKvCompressionPolicy(loaded, guard);
  return kvCompressionSetup(
    blockSize,
    { policy: plugin, positions: parsed.positions },
    plugin,
    setting,
    guard,
  );
}

/**
 * A snapshot of `policy` (its properties read once, so a getter cannot fail later) whose hooks
 * run under `guard`.
 */
function guardKvCompressionPolicy(
  policy: KvCompressionPolicy,
  guard: PluginGuard,
): KvCompressionPolicy {
  return {
    specificationVersion: policy.specificationVersion,
    name: policy.name,
    attention: policy.attention,
    ...(policy.observationWindow === undefined
      ? {}
      : { observationWindow: policy.observationWindow }),
    maxBlocks: (blockSize) => guard.call('maxBlocks', () => policy.maxBlocks(blockSize)),
    select: (view) => guard.call('select', () => policy.select(view)),
  };
}

/**
 * The setup of an engine: built-in policies by name for every request, plus an optional default
 * and an optional user policy that requests may name.
 */
export function kvCompressionSetup(
  blockSize: number,
  defaultSpec?: KvCompressionSpec,
  plugin?: KvCompressionPolicy,
  describe?: string,
  guard?: PluginGuard,
): KvCompressionSetup {
  const usable = (spec: KvCompressionSpec | undefined) => {
    if (spec && guard?.disabled !== undefined && spec.policy === plugin) {
      throw new EngineError(
        'INTERNAL',
        `kv_compression: ${guard.label} is disabled (${guard.disabled})`,
        { details: { param: 'kv_compression' } },
      );
    }
    return spec;
  };
  return {
    ...(defaultSpec ? { defaultSpec, describe: describe ?? defaultSpec.policy.name } : {}),
    forRequest(request) {
      if (request === undefined) return usable(defaultSpec);
      try {
        if (plugin && request.policy === plugin.name) {
          const { policy: _name, positions, ...params } = request;
          const extra = Object.keys(params);
          if (extra.length > 0) {
            throw new EngineError(
              'INVALID_REQUEST',
              `kv_compression: policy ${plugin.name} is configured on the server and takes no parameters, got ${extra.join(', ')}`,
              { details: { param: 'kv_compression' } },
            );
          }
          if (positions !== undefined && positions !== 'cache' && positions !== 'original') {
            throw new EngineError(
              'INVALID_REQUEST',
              `kv_compression.positions: must be 'cache' or 'original', got ${JSON.stringify(positions)}`,
              { details: { param: 'kv_compression.positions' } },
            );
          }
          return usable({ policy: plugin, positions: positions ?? 'cache' });
        }
        return kvCompressionFromJson(request, { blockSize });
      } catch (error) {
        if (SchedulerError.isInstance(error)) {
          throw new EngineError('INVALID_REQUEST', `kv_compression: ${error.message}`, {
            cause: error,
            details: { param: 'kv_compression' },
          });
        }
        throw error;
      }
    },
  };
}

/**
 * Refuses, at start-up, a default policy that every request would be refused for: in cache
 * positions its cache must stay below the context (positions run up to its size).
 * @throws KvasirEngineError `INVALID_CONFIG` naming `--kv-compression`, the sizes and the way out.
 */
export function checkDefaultCompression(
  setup: KvCompressionSetup,
  blockSize: number,
  maxModelLen: number,
): void {
  const spec = setup.defaultSpec;
  if (!spec || spec.positions === 'original') return;
  const tokens = spec.policy.maxBlocks(blockSize) * blockSize;
  if (tokens >= maxModelLen) {
    throw new KvasirEngineError(
      'INVALID_CONFIG',
      `--kv-compression: ${spec.policy.name} holds up to ${tokens} tokens (whole blocks of ${blockSize}), so cache positions would reach the context of ${maxModelLen}: keep its budget under ${maxModelLen} tokens, or add positions=original`,
    );
  }
}

/**
 * Why a model cannot run `spec` (see {@link KvCompressionLimits}), or undefined when it can.
 */
export function compressionLimitFor(
  spec: KvCompressionSpec | undefined,
  limits: KvCompressionLimits | undefined,
): string | undefined {
  if (!spec || !limits) return undefined;
  if (limits.any) return limits.any;
  if (spec.positions === 'original' && limits.originalPositions) return limits.originalPositions;
  if (spec.policy.attention !== 'none' && limits.attentionMass) {
    return `${spec.policy.name}: ${limits.attentionMass}`;
  }
  return undefined;
}

/**
 * The engine's setup: `setup`, or none but the built-ins, checked against the model.
 * @throws KvasirEngineError `INVALID_CONFIG` for a default policy the model cannot run.
 */
export function engineKvCompression(
  setup: KvCompressionSetup | undefined,
  facts: Pick<ModelFacts, 'kvLayout' | 'kvCompressionLimits'>,
): KvCompressionSetup {
  const chosen = setup ?? kvCompressionSetup(facts.kvLayout.blockSize);
  const refused = compressionLimitFor(chosen.defaultSpec, facts.kvCompressionLimits);
  if (refused) throw new KvasirEngineError('INVALID_CONFIG', `--kv-compression: ${refused}`);
  return chosen;
}
