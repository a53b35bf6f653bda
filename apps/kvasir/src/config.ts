import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { KvasirAppError } from './errors.js';

const positiveInt = z.number().int().min(1);

/** Everything `kvasir serve` (and `generate`, `info`, `bench` in-process) can be told. */
export const engineConfigSchema = z.object({
  /** HF directory or `.gguf` file; empty = the embedded random default model. */
  model: z.string().optional(),
  /** Name clients pass as `model`; default: the directory's name. */
  servedModelName: z.string().min(1).optional(),
  backend: z.enum(['auto', 'webgpu', 'cpu']).default('auto'),
  kvDtype: z
    .enum(['f32', 'f16', 'int8', 'int8-h8', 'fp8-e4m3', 'fp8-e5m2', 'int4', 'int4-h32'])
    .default('f32'),
  blockSize: z.union([z.literal(8), z.literal(16), z.literal(32)]).default(16),
  /**
   * Device memory the engine plans with, in bytes (WebGPU cannot report it). Default 512 MiB,
   * which suits the software adapter; set it to your GPU's memory.
   */
  gpuMemoryBytes: positiveInt.default(512 * 1024 * 1024),
  /** Fraction of the device's memory budget the engine may use for weights plus KV cache. */
  gpuMemoryFraction: z.number().gt(0).max(1).default(0.9),
  /** Overrides the computed number of KV blocks (handy for tests that force preemption). */
  numGpuBlocks: positiveInt.optional(),
  maxNumSeqs: positiveInt.default(64),
  maxNumBatchedTokens: positiveInt.default(512),
  maxModelLen: positiveInt.optional(),
  /** Requests allowed to wait before new ones get 429. */
  maxWaiting: positiveInt.default(256),
  enableChunkedPrefill: z.boolean().default(true),
  enablePrefixCaching: z.boolean().default(true),
  preemptionMode: z.enum(['recompute', 'swap']).default('recompute'),
  queuePolicy: z.enum(['fcfs', 'priority', 'lpm']).default('fcfs'),
  /** `lru`, `lfu`, `fifo`, or a path to a JavaScript module exporting an `EvictionPolicy`. */
  evictionPolicy: z.string().min(1).default('lru'),
  /**
   * Write full KV blocks to the offload tiers and import prompts' prefixes from them (shared
   * across replicas through Redis). Default: on when a tier is configured, except swap
   * preemption with a single tier (prefix blocks would compete with swapped-out ones).
   */
  offloadPrefix: z.boolean().optional(),
  offload: z
    .object({
      /** Host-memory tier budget in bytes (also the swap space). */
      hostBytes: z
        .number()
        .int()
        .min(0)
        .default(256 * 1024 * 1024),
      diskDir: z.string().optional(),
      diskBytes: z.number().int().min(1).optional(),
      redisUrl: z.string().optional(),
      /** Host slots for swap preemption (default: what the host budget holds). */
      swapBlocks: z.number().int().min(0).optional(),
    })
    .prefault({}),
  host: z.string().default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(8000),
  apiKey: z.string().optional(),
  /** Where the embedded default model is created. */
  cacheDir: z.string().optional(),
  /** Seed of the embedded default model's weights. */
  defaultModelSeed: z.number().int().default(1234),
});

/** Validated engine configuration (defaults filled in). */
export type EngineConfig = z.infer<typeof engineConfigSchema>;
/** Engine configuration as written by a user (every field optional). */
export type EngineConfigInput = z.input<typeof engineConfigSchema>;

/**
 * Validates a configuration object.
 * @throws KvasirAppError `INVALID_CONFIG` naming the first offending field.
 */
export function parseEngineConfig(input: unknown): EngineConfig {
  const result = engineConfigSchema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const path = issue?.path.join('.') ?? '';
  throw new KvasirAppError(
    'INVALID_CONFIG',
    `invalid configuration${path ? ` at ${path}` : ''}: ${issue?.message ?? 'unknown problem'}`,
    { details: { path } },
  );
}

/**
 * Reads a JSON configuration file (keys as in {@link engineConfigSchema}).
 * @throws KvasirAppError `INVALID_CONFIG` when unreadable or not a JSON object.
 */
export async function readConfigFile(path: string): Promise<EngineConfigInput> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new KvasirAppError('INVALID_CONFIG', `cannot read config file ${path}`, { cause: error });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new KvasirAppError('INVALID_CONFIG', `config file ${path} is not valid JSON`, {
      cause: error,
    });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new KvasirAppError('INVALID_CONFIG', `config file ${path} must hold a JSON object`);
  }
  return value as EngineConfigInput;
}

/** Where the embedded default model and other generated files live. */
export function defaultCacheDir(): string {
  return process.env.KVASIR_CACHE_DIR ?? join(homedir(), '.cache', 'kvasir');
}
