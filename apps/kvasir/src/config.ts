import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseKvCompressionSetting } from '@kvasir/engine';
import { checkRedisUrl } from '@kvasir/offload';
import { z } from 'zod';
import { KvasirAppError } from './errors.js';

const positiveInt = z.number().int().min(1);

/** The KV cache element types `--kv-dtype` accepts (the config schema and every command's flag). */
/** What `--weight-quant` does to a model's matrices at load (the config schema and the flag). */
export const WEIGHT_QUANTS = ['none', 'int8'] as const;

export const KV_DTYPES = [
  'f32',
  'f16',
  'int8',
  'int8-h8',
  'fp8-e4m3',
  'fp8-e5m2',
  'int4',
  'int4-h32',
] as const;

/** `redis://` or `rediss://` with a host: @kvasir/offload's own rule, checked before start-up. */
const redisUrl = z.string().check((ctx) => {
  try {
    checkRedisUrl(ctx.value);
  } catch (error) {
    ctx.issues.push({ code: 'custom', message: (error as Error).message, input: ctx.value });
  }
});

/** The offload tiers below the device (`offload` in a config file). */
const offloadConfigSchema = z.strictObject({
  /** Host-memory tier budget in bytes (also the swap space). */
  hostBytes: z
    .number()
    .int()
    .min(0)
    .default(256 * 1024 * 1024),
  diskDir: z.string().min(1).optional(),
  diskBytes: z.number().int().min(1).optional(),
  redisUrl: redisUrl.optional(),
  /** Host slots for swap preemption (default: what the host budget holds). */
  swapBlocks: z.number().int().min(0).optional(),
});

/** KV block events for routers and gateways (`kvEvents` in a config file; `serve` only). */
const kvEventsConfigSchema = z.strictObject({
  /** ZeroMQ PUB endpoint; no events without it. */
  endpoint: z.string().min(1).optional(),
  /** ZeroMQ ROUTER endpoint for replay and snapshot requests. */
  replayEndpoint: z.string().min(1).optional(),
  topic: z.string().default(''),
  /** `array`: vLLM's positional structs; `map`: its tagged maps. */
  encoding: z.enum(['array', 'map']).default('array'),
});

/**
 * Everything `kvasir serve` (and `generate`, `info`, `bench` in-process) can be told. Strict: an
 * unknown key (a typo such as `prot`) is refused, not ignored.
 */
export const engineConfigSchema = z.strictObject({
  /**
   * HF directory or `.gguf` file; empty = the default model, kvasir-mini (`@kvasir/mini-model`);
   * `random` = the seeded random-weight model (for tests).
   */
  model: z.string().optional(),
  /** Name clients pass as `model`; default: the directory's name. */
  servedModelName: z.string().min(1).optional(),
  backend: z.enum(['auto', 'webgpu', 'wasm', 'cpu']).default('auto'),
  /**
   * Split the model by layer over several devices, in layer order: `wasm,wasm` (two
   * WebAssembly memories, past wasm32's 4 GiB), `webgpu:0:layers=0-19,wasm`, `webgpu:0,webgpu:1`.
   * Each device is `backend[:adapter][:layers=A-B]`; devices without a range share the other
   * layers evenly. Replaces `backend`.
   */
  devices: z.string().min(1).optional(),
  /** llama.cpp's `-ngl`: the first N layers on WebGPU, the rest on wasm. Replaces `backend`. */
  gpuLayers: z.number().int().min(0).optional(),
  /** Threads of the wasm backend (default: the machine's physical cores). */
  threads: positiveInt.max(256).optional(),
  kvDtype: z.enum(KV_DTYPES).default('f32'),
  /**
   * Matrices quantized at load: `none` multiplies them as stored (F16 widened per use, GGUF
   * blocks from their bytes); `int8` (32-column scales) halves an F16 / BF16 model's weight
   * bytes and on the wasm backend about doubles its decode speed, at some prefill speed
   * (@kvasir/model's bench README). Refused for GGUF block files (already quantized).
   */
  weightQuant: z.enum(WEIGHT_QUANTS).default('none'),
  /**
   * Tokens per KV block. 1, 2 and 4 run on the cpu and wasm backends only (token-exact KV
   * compression: a policy drops whole blocks); WebGPU's kernels take 8, 16 or 32.
   */
  blockSize: z.literal([1, 2, 4, 8, 16, 32]).default(16),
  /**
   * Memory the engine plans with, in bytes. WebGPU cannot report it: there the default is
   * 512 MiB, which suits the software adapter (set it to your GPU's memory). On the CPU backend
   * the default is the host memory available at start-up.
   */
  gpuMemoryBytes: positiveInt.optional(),
  /**
   * Bytes one WebAssembly memory of the wasm backend holds, weights, its layers' KV cache and
   * 256 MiB of activations together (default and most: 4 GiB, wasm32's address space). A model
   * past one memory is split by layer over several; a browser that grants less, or a test of
   * that split with a small model, sets it lower.
   */
  wasmMemoryBytes: positiveInt.max(2 ** 32).optional(),
  /** Fraction of that memory the engine may use for weights, activations and KV cache. */
  gpuMemoryFraction: z.number().gt(0).max(1).default(0.9),
  /** Overrides the computed number of KV blocks (handy for tests that force preemption). */
  numGpuBlocks: positiveInt.optional(),
  maxNumSeqs: positiveInt.default(64),
  maxNumBatchedTokens: positiveInt.default(512),
  maxModelLen: positiveInt.optional(),
  /** Requests allowed to wait before new ones get 429. */
  maxWaiting: positiveInt.default(256),
  /**
   * Events a streaming request may have sent and its client not read, per choice: past it the
   * client has stopped reading, and the engine ends the request (its blocks come back) instead
   * of queueing its output without bound.
   */
  maxUnreadEvents: positiveInt.default(1024),
  enableChunkedPrefill: z.boolean().default(true),
  enablePrefixCaching: z.boolean().default(true),
  /**
   * Jump-forward decoding: where an output constraint forces the next characters, their tokens
   * are appended at once and computed in the next step as one chunk, instead of one forward
   * pass per token.
   */
  jumpForward: z.boolean().default(true),
  preemptionMode: z.enum(['recompute', 'swap']).default('recompute'),
  /**
   * Keep whole-context KV on sliding-window layers (llama.cpp's --swa-full). Default off: on
   * cpu and wasm, a model with sliding-window layers (Gemma 3) gets KV cache groups whose
   * sliding layers hold only their window's blocks.
   */
  swaFull: z.boolean().default(false),
  queuePolicy: z.enum(['fcfs', 'priority', 'lpm']).default('fcfs'),
  /** `lru`, `lfu`, `fifo`, or a path to a JavaScript module exporting an `EvictionPolicy`. */
  evictionPolicy: z.string().min(1).default('lru'),
  /**
   * Token-level KV compression every request gets unless it names its own (`kv_compression`):
   * a built-in as `name:key=value,...` (`sinks:sinks=4,window=1020`, `window:window=512`,
   * `h2o:budget=256`, `snapkv:budget=256`, each with an optional `positions=original`), or a
   * path to a JavaScript module exporting a `KvCompressionPolicy`. Default: none.
   */
  kvCompression: z.string().min(1).optional(),
  /**
   * Longest prompt a request with KV compression may send: a policy that drops blocks during
   * prefill streams any prompt through a bounded cache, so only this bounds its prefill time.
   */
  kvCompressionMaxPromptTokens: positiveInt.default(32_768),
  /**
   * Largest `max_tokens` of a request with KV compression: in cache positions its generation is
   * not bounded by the context.
   */
  kvCompressionMaxTokens: positiveInt.default(32_768),
  /**
   * Time budget of one call into a plug-in module (eviction or KV compression policy), in ms. A
   * call that takes longer disables the plug-in: eviction falls back to LRU, requests using the
   * compression policy fail. It bounds a slow plug-in's stall to one call (a call that never
   * returns cannot be interrupted).
   */
  pluginBudgetMs: positiveInt.default(250),
  /**
   * Paths of JavaScript modules exporting a v1 `KvConnector` of `@kvasir/offload/connectors`
   * (or a factory of one taking the engine's context), called after the built-in swap and
   * prefix-offload connectors, in this order. Default: none.
   */
  kvConnectors: z.array(z.string().min(1)).default([]),
  /**
   * Write full KV blocks to the offload tiers and import prompts' prefixes from them (shared
   * across replicas through Redis). Default: on when a tier is configured, except swap
   * preemption with a single tier (prefix blocks would compete with swapped-out ones).
   */
  offloadPrefix: z.boolean().optional(),
  offload: offloadConfigSchema.prefault({}),
  kvEvents: kvEventsConfigSchema.prefault({}),
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(8000),
  apiKey: z.string().optional(),
  /**
   * Largest non-streamed answer `serve` sends, in bytes, estimated from a request before it is
   * generated (prompts, `n`, `max_tokens`, `echo`, `logprobs`); a larger one gets 400 naming
   * the field to lower.
   */
  maxResponseBytes: positiveInt.default(16 * 1024 * 1024),
  /** Where the random-weight model (`model: 'random'`) is written. */
  cacheDir: z.string().optional(),
  /** Seed of the random-weight model's weights. */
  defaultModelSeed: z.number().int().default(1234),
});

/** Validated engine configuration (defaults filled in). */
export type EngineConfig = z.infer<typeof engineConfigSchema>;
/** Engine configuration as written by a user (every field optional). */
export type EngineConfigInput = z.input<typeof engineConfigSchema>;

/** The keys of each object of the configuration, by path (`''` for the top level). */
export const CONFIG_KEYS: Readonly<Record<string, readonly string[]>> = {
  '': Object.keys(engineConfigSchema.shape),
  offload: Object.keys(offloadConfigSchema.shape),
  kvEvents: Object.keys(kvEventsConfigSchema.shape),
};

/** Edit distance with adjacent transpositions (`prot` → `port` is 1). */
function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d = new Int32Array(rows * cols);
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(
        d[(i - 1) * cols + j]! + 1,
        d[i * cols + j - 1]! + 1,
        d[(i - 1) * cols + j - 1]! + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        v = Math.min(v, d[(i - 2) * cols + j - 2]! + 1);
      }
      d[i * cols + j] = v;
    }
  }
  return d[rows * cols - 1]!;
}

/** The candidate closest to `word` when it is close enough to be the one meant. */
export function closestMatch(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(word.length / 3)) ? best : undefined;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const k of path) {
    v = typeof v === 'object' && v !== null ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  }
  return v;
}

/**
 * How messages name a setting given its key path (`blockSize`, `offload.redisUrl`): the flag or
 * the config file it came from. Default: the path.
 */
export type SettingName = (path: string) => string;

/**
 * Validates a configuration object.
 * @throws KvasirAppError `INVALID_CONFIG` naming the first offending setting (through `name`):
 *   for an unknown key, the closest valid one; for a value outside a set, the allowed values.
 */
export function parseEngineConfig(input: unknown, name: SettingName = (p) => p): EngineConfig {
  const result = engineConfigSchema.safeParse(input);
  if (result.success) {
    const config = result.data;
    if (config.kvCompression !== undefined) {
      // The parser `serve` loads it with, so every command refuses the same settings.
      try {
        parseKvCompressionSetting(config.kvCompression, config.blockSize);
      } catch (error) {
        throw new KvasirAppError(
          'INVALID_CONFIG',
          `invalid configuration at ${name('kvCompression')}: ${(error as Error).message.replace(/^--kv-compression: /, '')}`,
          { cause: error, details: { path: 'kvCompression' } },
        );
      }
    }
    return config;
  }
  const issue = result.error.issues[0];
  if (issue === undefined) throw new KvasirAppError('INVALID_CONFIG', 'invalid configuration');
  const path = issue.path.join('.');
  if (issue.code === 'unrecognized_keys') {
    const known = CONFIG_KEYS[path] ?? [];
    const named = issue.keys.map((key) => {
      const near = closestMatch(key, known);
      const full = (k: string) => (path ? `${path}.${k}` : k);
      return `${name(full(key))}${near ? ` (did you mean "${full(near)}"?)` : ''}`;
    });
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `invalid configuration: unknown key${named.length > 1 ? 's' : ''} ${named.join(', ')}; the valid keys${path ? ` of ${path}` : ''} are ${known.join(', ')}`,
      { details: { path, keys: issue.keys } },
    );
  }
  const message =
    issue.code === 'invalid_value'
      ? `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}, got ${JSON.stringify(valueAt(input, issue.path))}`
      : issue.message;
  throw new KvasirAppError(
    'INVALID_CONFIG',
    `invalid configuration at ${path ? name(path) : 'the top level'}: ${message}`,
    { details: { path } },
  );
}

/**
 * Where JSON.parse gave up. V8 names a character offset in most messages, but not for an
 * unexpected token: then it is the shortest prefix that fails on that token (every shorter one
 * only runs out of input), found by bisection.
 */
function jsonErrorOffset(text: string, message: string): number | undefined {
  const at = /at position (\d+)/.exec(message);
  if (at) return Number(at[1]);
  if (/end of JSON input/.test(message)) return text.length;
  if (!message.startsWith('Unexpected token')) return undefined;
  const failsOnToken = (length: number): boolean => {
    try {
      JSON.parse(text.slice(0, length));
      return false;
    } catch (error) {
      return (error as Error).message.startsWith('Unexpected token');
    }
  };
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (failsOnToken(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo > 0 ? lo - 1 : undefined;
}

/** JSON.parse's complaint as `reason at line L, column C`. */
function jsonSyntaxError(text: string, error: unknown): string {
  const raw = error instanceof Error ? error.message : String(error);
  const offset = jsonErrorOffset(text, raw);
  const reason = raw
    .replace(/\s*in JSON at position \d+.*$/s, '')
    .replace(/ of JSON input$/, ' of the file')
    .replace(/^(Unexpected token '.+?'), ".*$/s, '$1');
  if (offset === undefined) return reason;
  const lines = text.slice(0, offset).split('\n');
  return `${reason} at line ${lines.length}, column ${(lines.at(-1)?.length ?? 0) + 1}`;
}

/**
 * Reads a JSON configuration file (keys as in {@link engineConfigSchema}).
 * @throws KvasirAppError `INVALID_CONFIG` when unreadable, not JSON (the message gives line and
 *   column) or not a JSON object.
 */
export async function readConfigFile(path: string): Promise<EngineConfigInput> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `cannot read config file ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      { cause: error },
    );
  }
  // Editors on Windows save a byte-order mark, which JSON.parse refuses.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `config file ${path} is not valid JSON: ${jsonSyntaxError(text, error)}`,
      { cause: error, details: { path } },
    );
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
