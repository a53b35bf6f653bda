// A compression request by name with parameters: the CLI's `--kv-compression
// sinks:sinks=4,window=1020` and the HTTP body's `{ "policy": "sinks", "sinks": 4, ... }`.
import { SchedulerError } from '../errors.js';
import {
  KV_COMPRESSION_PARAMETERS,
  type KvCompressionPolicyName,
  kvCompressionPolicies,
} from './builtins.js';
import type { KvCompressionPolicy } from './policy.js';

/** Which RoPE position a cached token keeps once tokens before it are dropped. */
export type KvPositions = 'cache' | 'original';

/** A request's compression: the policy and the position rule. */
export interface KvCompressionSpec {
  readonly policy: KvCompressionPolicy;
  /**
   * 'cache' (StreamingLLM, the default): a token's position is its place in the cache, so
   * positions stay below the cache size and generation can run past the model's context.
   * 'original': a token keeps its index in the sequence; the request stops at the context.
   */
  readonly positions: KvPositions;
}

/** Options of {@link parseKvCompression} and {@link kvCompressionFromJson}. */
export interface KvCompressionParseOptions {
  /** When given, budgets under two blocks are refused here rather than at `Scheduler.add`. */
  readonly blockSize?: number;
}

function invalid(message: string, details: Record<string, unknown>): never {
  throw new SchedulerError('INVALID_ARGUMENT', `kv compression: ${message}`, { details });
}

function isName(name: string): name is KvCompressionPolicyName {
  return Object.hasOwn(KV_COMPRESSION_PARAMETERS, name);
}

function build(
  name: string,
  params: ReadonlyMap<string, unknown>,
  positions: unknown,
  options: KvCompressionParseOptions,
): KvCompressionSpec {
  if (!isName(name)) {
    invalid(
      `unknown policy ${JSON.stringify(name)} (built in: ${Object.keys(KV_COMPRESSION_PARAMETERS).join(', ')})`,
      { policy: name },
    );
  }
  const allowed = KV_COMPRESSION_PARAMETERS[name];
  for (const key of params.keys()) {
    if (!allowed.includes(key)) {
      invalid(
        `unknown parameter ${JSON.stringify(key)} for ${name} (takes ${allowed.join(', ')})`,
        {
          policy: name,
          parameter: key,
        },
      );
    }
  }
  if (positions !== undefined && positions !== 'cache' && positions !== 'original') {
    invalid(`positions must be 'cache' or 'original', got ${JSON.stringify(positions)}`, {
      parameter: 'positions',
    });
  }
  const o = Object.fromEntries(params);
  let policy: KvCompressionPolicy;
  if (name === 'window') policy = kvCompressionPolicies.window({ window: o.window as number });
  else if (name === 'sinks') {
    policy = kvCompressionPolicies.sinks({ sinks: o.sinks as number, window: o.window as number });
  } else if (name === 'h2o') {
    policy = kvCompressionPolicies.h2o({
      budget: o.budget as number,
      ...(o.recent !== undefined ? { recent: o.recent as number } : {}),
    });
  } else {
    policy = kvCompressionPolicies.snapkv({
      budget: o.budget as number,
      ...(o.observation !== undefined ? { observation: o.observation as number } : {}),
    });
  }
  if (options.blockSize !== undefined) checkBudget(policy, options.blockSize);
  return { policy, positions: (positions as KvPositions | undefined) ?? 'cache' };
}

/**
 * Refuses a policy that would hold fewer than two blocks (its last block alone would be all of
 * the context).
 * @throws {SchedulerError} INVALID_ARGUMENT naming the policy and its block count.
 */
export function checkBudget(policy: KvCompressionPolicy, blockSize: number): number {
  const blocks = policy.maxBlocks(blockSize);
  if (!Number.isInteger(blocks) || blocks < 2) {
    invalid(
      `${policy.name} holds ${String(blocks)} block(s) of ${blockSize} tokens; the budget must cover at least 2 blocks (more than ${blockSize} tokens)`,
      { policy: policy.name, blocks },
    );
  }
  return blocks;
}

/**
 * Parses the CLI form `name:key=value,key=value` (`sinks:sinks=4,window=1020`,
 * `h2o:budget=256,recent=0.5`, `window:window=512,positions=original`).
 * @throws {SchedulerError} INVALID_ARGUMENT naming the bad policy, parameter or value.
 */
export function parseKvCompression(
  text: string,
  options: KvCompressionParseOptions = {},
): KvCompressionSpec {
  if (typeof text !== 'string' || text.trim() === '') {
    invalid('expected name:key=value,... (e.g. sinks:sinks=4,window=1020)', { text });
  }
  const colon = text.indexOf(':');
  const name = (colon < 0 ? text : text.slice(0, colon)).trim();
  const params = new Map<string, unknown>();
  let positions: unknown;
  const body = colon < 0 ? '' : text.slice(colon + 1).trim();
  for (const pair of body === '' ? [] : body.split(',')) {
    const eq = pair.indexOf('=');
    const key = (eq < 0 ? pair : pair.slice(0, eq)).trim();
    const raw = eq < 0 ? '' : pair.slice(eq + 1).trim();
    if (eq < 0 || key === '' || raw === '') {
      invalid(`expected key=value, got ${JSON.stringify(pair)}`, { text });
    }
    if (params.has(key) || (key === 'positions' && positions !== undefined)) {
      invalid(`parameter ${key} given twice`, { parameter: key });
    }
    if (key === 'positions') {
      positions = raw;
      continue;
    }
    const value = Number(raw);
    if (!Number.isFinite(value)) {
      invalid(`${name}: ${key} must be a number, got ${JSON.stringify(raw)}`, {
        parameter: key,
        value: raw,
      });
    }
    params.set(key, value);
  }
  return build(name, params, positions, options);
}

/**
 * Reads the JSON form `{ "policy": "sinks", "sinks": 4, "window": 1020, "positions"?: "cache" }`
 * (the request body's `kv_compression`).
 * @throws {SchedulerError} INVALID_ARGUMENT naming the bad policy, key or value.
 */
export function kvCompressionFromJson(
  value: unknown,
  options: KvCompressionParseOptions = {},
): KvCompressionSpec {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    invalid('expected an object such as {"policy": "sinks", "sinks": 4, "window": 1020}', {
      value,
    });
  }
  const { policy, positions, ...rest } = value as Record<string, unknown>;
  if (typeof policy !== 'string') {
    invalid(`policy must be a policy name, got ${JSON.stringify(policy)}`, { parameter: 'policy' });
  }
  return build(policy, new Map(Object.entries(rest)), positions, options);
}
