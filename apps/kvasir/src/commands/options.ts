import { type Command, InvalidArgumentError, Option } from 'commander';
import {
  type EngineConfig,
  type EngineConfigInput,
  parseEngineConfig,
  readConfigFile,
} from '../config.js';

const int = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('expected an integer');
  return n;
};
const num = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError('expected a number');
  return n;
};
const bytes = (value: string): number => {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?$/i.exec(value.trim());
  if (!m) throw new InvalidArgumentError('expected bytes, e.g. 268435456, 256MiB or 2GiB');
  const unit = (m[2] ?? '').toLowerCase().replace(/i?b$/, '');
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[unit] ?? 1;
  return Math.round(Number(m[1]) * scale);
};

/** Adds the engine flags shared by `serve`, `generate`, `info` and in-process `bench`. */
export function addEngineOptions(cmd: Command): Command {
  return cmd
    .option('-c, --config <file>', 'JSON config file (flags override it)')
    .option(
      '-m, --model <path>',
      'Hugging Face model directory or .gguf file (default: the embedded random model)',
    )
    .option('--served-model-name <name>', 'model id clients use')
    .addOption(
      new Option('--backend <backend>', 'execution backend').choices(['auto', 'webgpu', 'cpu']),
    )
    .addOption(
      new Option('--kv-dtype <dtype>', 'KV cache element type').choices([
        'f32',
        'f16',
        'int8',
        'int8-h8',
        'fp8-e4m3',
        'fp8-e5m2',
        'int4',
        'int4-h32',
      ]),
    )
    .option('--block-size <tokens>', 'tokens per KV block (8, 16, 32)', int)
    .option(
      '--gpu-memory-bytes <bytes>',
      'device memory to plan with (WebGPU cannot report it)',
      bytes,
    )
    .option('--gpu-memory-fraction <f>', 'fraction of device memory for weights + KV cache', num)
    .option('--num-gpu-blocks <n>', 'force the number of KV blocks', int)
    .option('--max-num-seqs <n>', 'sequences per step', int)
    .option('--max-num-batched-tokens <n>', 'token budget per step', int)
    .option('--max-model-len <n>', 'longest context', int)
    .option('--max-waiting <n>', 'waiting requests before 429', int)
    .option('--no-chunked-prefill', 'run each prompt in one step')
    .option('--no-prefix-caching', 'disable prefix caching')
    .addOption(
      new Option('--preemption-mode <mode>', 'what preemption does').choices(['recompute', 'swap']),
    )
    .addOption(
      new Option('--queue-policy <policy>', 'waiting-queue order').choices([
        'fcfs',
        'priority',
        'lpm',
      ]),
    )
    .option(
      '--eviction-policy <policy>',
      'lru, lfu, fifo, or a path to a JS module exporting a policy',
    )
    .option('--offload-host-bytes <bytes>', 'host-memory offload tier budget (0 disables)', bytes)
    .option('--offload-disk-dir <dir>', 'disk offload tier directory')
    .option('--offload-disk-bytes <bytes>', 'disk offload tier budget', bytes)
    .option('--offload-redis-url <url>', 'Redis offload tier, e.g. redis://127.0.0.1:6379')
    .option('--swap-blocks <n>', 'host slots for swap preemption', int)
    .option(
      '--offload-prefix',
      'write full KV blocks to the offload tiers and import cached prefixes from them (default on with a tier)',
    )
    .option('--no-offload-prefix', 'offload tiers only carry swapped-out blocks')
    .option('--host <host>', 'interface to bind (default 127.0.0.1)')
    .option('-p, --port <port>', 'port (0 = any free port)', int)
    .option('--api-key <key>', 'require this bearer key (default: $KVASIR_API_KEY)')
    .option('--cache-dir <dir>', 'where the embedded default model is created');
}

interface EngineFlags {
  config?: string;
  model?: string;
  servedModelName?: string;
  backend?: string;
  kvDtype?: string;
  blockSize?: number;
  gpuMemoryBytes?: number;
  gpuMemoryFraction?: number;
  numGpuBlocks?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  maxModelLen?: number;
  maxWaiting?: number;
  chunkedPrefill?: boolean;
  prefixCaching?: boolean;
  preemptionMode?: string;
  queuePolicy?: string;
  evictionPolicy?: string;
  offloadHostBytes?: number;
  offloadDiskDir?: string;
  offloadDiskBytes?: number;
  offloadRedisUrl?: string;
  swapBlocks?: number;
  offloadPrefix?: boolean;
  host?: string;
  port?: number;
  apiKey?: string;
  cacheDir?: string;
}

/**
 * Merges the config file (if any), then the flags the user actually gave, then validates.
 * @throws KvasirAppError `INVALID_CONFIG`.
 */
export async function resolveEngineConfig(cmd: Command): Promise<EngineConfig> {
  const flags = cmd.opts<EngineFlags>();
  const fromFile: EngineConfigInput = flags.config ? await readConfigFile(flags.config) : {};
  const given = (name: keyof EngineFlags) => cmd.getOptionValueSource(name) === 'cli';
  const pick = <K extends keyof EngineFlags>(name: K): EngineFlags[K] | undefined =>
    given(name) ? flags[name] : undefined;
  const defined = <T extends object>(o: T): Partial<T> =>
    Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
  const merged = {
    ...fromFile,
    ...defined({
      model: pick('model'),
      servedModelName: pick('servedModelName'),
      backend: pick('backend'),
      kvDtype: pick('kvDtype'),
      blockSize: pick('blockSize'),
      gpuMemoryBytes: pick('gpuMemoryBytes'),
      gpuMemoryFraction: pick('gpuMemoryFraction'),
      numGpuBlocks: pick('numGpuBlocks'),
      maxNumSeqs: pick('maxNumSeqs'),
      maxNumBatchedTokens: pick('maxNumBatchedTokens'),
      maxModelLen: pick('maxModelLen'),
      maxWaiting: pick('maxWaiting'),
      enableChunkedPrefill: pick('chunkedPrefill'),
      enablePrefixCaching: pick('prefixCaching'),
      preemptionMode: pick('preemptionMode'),
      queuePolicy: pick('queuePolicy'),
      evictionPolicy: pick('evictionPolicy'),
      offloadPrefix: pick('offloadPrefix'),
      host: pick('host'),
      port: pick('port'),
      apiKey: pick('apiKey') ?? fromFile.apiKey ?? process.env.KVASIR_API_KEY,
      cacheDir: pick('cacheDir'),
    }),
    offload: {
      ...(fromFile.offload ?? {}),
      ...defined({
        hostBytes: pick('offloadHostBytes'),
        diskDir: pick('offloadDiskDir'),
        diskBytes: pick('offloadDiskBytes'),
        redisUrl: pick('offloadRedisUrl'),
        swapBlocks: pick('swapBlocks'),
      }),
    },
  };
  return parseEngineConfig(merged);
}
