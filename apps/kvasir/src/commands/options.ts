import { type Command, Option } from 'commander';
import {
  type EngineConfig,
  type EngineConfigInput,
  KV_DTYPES,
  parseEngineConfig,
  readConfigFile,
  WEIGHT_QUANTS,
} from '../config.js';
import { bytes, int, num } from './parsers.js';

/** Which commands a flag group is for. */
export interface EngineOptionSet {
  /**
   * `serve` only: `--host`, `--port`, `--api-key`. `generate`, `info` and `bench` (which starts
   * its own server on a free port) do not list them.
   */
  readonly server?: boolean;
}

/**
 * Every engine flag's config key path (commander attribute → path in {@link EngineConfig}):
 * what the flags set, and what an error about a setting names.
 */
const FLAG_PATHS: Readonly<Record<string, string>> = {
  model: 'model',
  servedModelName: 'servedModelName',
  backend: 'backend',
  devices: 'devices',
  gpuLayers: 'gpuLayers',
  threads: 'threads',
  kvDtype: 'kvDtype',
  weightQuant: 'weightQuant',
  blockSize: 'blockSize',
  gpuMemoryBytes: 'gpuMemoryBytes',
  wasmMemoryBytes: 'wasmMemoryBytes',
  gpuMemoryFraction: 'gpuMemoryFraction',
  numGpuBlocks: 'numGpuBlocks',
  maxNumSeqs: 'maxNumSeqs',
  maxNumBatchedTokens: 'maxNumBatchedTokens',
  maxModelLen: 'maxModelLen',
  maxWaiting: 'maxWaiting',
  maxUnreadEvents: 'maxUnreadEvents',
  chunkedPrefill: 'enableChunkedPrefill',
  prefixCaching: 'enablePrefixCaching',
  jumpForward: 'jumpForward',
  swaFull: 'swaFull',
  preemptionMode: 'preemptionMode',
  queuePolicy: 'queuePolicy',
  evictionPolicy: 'evictionPolicy',
  kvCompression: 'kvCompression',
  kvCompressionMaxPromptTokens: 'kvCompressionMaxPromptTokens',
  kvCompressionMaxTokens: 'kvCompressionMaxTokens',
  pluginBudgetMs: 'pluginBudgetMs',
  kvConnector: 'kvConnectors',
  offloadPrefix: 'offloadPrefix',
  offloadHostBytes: 'offload.hostBytes',
  offloadDiskDir: 'offload.diskDir',
  offloadDiskBytes: 'offload.diskBytes',
  offloadRedisUrl: 'offload.redisUrl',
  swapBlocks: 'offload.swapBlocks',
  kvEvents: 'kvEvents.endpoint',
  kvEventsReplay: 'kvEvents.replayEndpoint',
  kvEventsTopic: 'kvEvents.topic',
  kvEventsEncoding: 'kvEvents.encoding',
  host: 'host',
  port: 'port',
  apiKey: 'apiKey',
  maxResponseBytes: 'maxResponseBytes',
  cacheDir: 'cacheDir',
};

/**
 * Adds the engine flags shared by `serve`, `generate`, `info` and in-process `bench`; the
 * server's own flags only with `{ server: true }`.
 */
export function addEngineOptions(cmd: Command, set: EngineOptionSet = {}): Command {
  cmd
    .option('-c, --config <file>', 'JSON config file (flags override it)')
    .option(
      '-m, --model <path>',
      "Hugging Face model directory or .gguf file (default: kvasir-mini, the packaged trained model; 'random': seeded random weights, for tests)",
    )
    .option('--served-model-name <name>', 'model id clients use')
    .addOption(
      new Option(
        '--backend <backend>',
        'execution backend (auto: WebGPU on a hardware GPU, else wasm)',
      ).choices(['auto', 'webgpu', 'wasm', 'cpu']),
    )
    .option(
      '--devices <list>',
      'split the model by layer over devices, in layer order: wasm,wasm | webgpu:0:layers=0-19,wasm | webgpu:0,webgpu:1',
    )
    .option(
      '--gpu-layers <n>',
      'the first N layers on WebGPU, the rest on the wasm backend (llama.cpp -ngl)',
      int(),
    )
    .option('--threads <n>', 'wasm backend threads (default: physical cores)', int())
    .addOption(new Option('--kv-dtype <dtype>', 'KV cache element type').choices(KV_DTYPES))
    .addOption(
      new Option(
        '--weight-quant <mode>',
        'matrices at load: none (as stored) or int8 (F16/BF16/F32 files: half the bytes, faster decode on wasm)',
      ).choices(WEIGHT_QUANTS),
    )
    .option(
      '--block-size <tokens>',
      'tokens per KV block (8, 16, 32; also 1, 2, 4 on the cpu and wasm backends)',
      int(),
    )
    .option(
      '--gpu-memory-bytes <bytes>',
      'memory to plan with (default: 512MiB on WebGPU, which cannot report it; available host memory on the CPU backend)',
      bytes,
    )
    .option(
      '--wasm-memory-bytes <bytes>',
      'most one WebAssembly memory of the wasm backend holds (default 4GiB, wasm32; a model past it is split over several)',
      bytes,
    )
    .option('--gpu-memory-fraction <f>', 'fraction of that memory for weights + KV cache', num())
    .option('--num-gpu-blocks <n>', 'force the number of KV blocks', int())
    .option('--max-num-seqs <n>', 'sequences per step', int())
    .option('--max-num-batched-tokens <n>', 'token budget per step', int())
    .option('--max-model-len <n>', 'longest context', int())
    .option('--max-waiting <n>', 'waiting requests before 429', int())
    .option(
      '--max-unread-events <n>',
      "events per choice a stream's client may leave unread before the request is ended (default 1024)",
      int(),
    )
    .option('--no-chunked-prefill', 'run each prompt in one step')
    .option('--no-prefix-caching', 'disable prefix caching')
    .option(
      '--no-jump-forward',
      'sample the text an output constraint forces token by token instead of appending it at once',
    )
    .addOption(
      new Option('--preemption-mode <mode>', 'what preemption does').choices(['recompute', 'swap']),
    )
    .option(
      '--swa-full',
      "keep whole-context KV on sliding-window layers (default: they hold only their window's blocks)",
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
    .option(
      '--kv-compression <policy>',
      'token-level KV compression by default: sinks:sinks=4,window=1020, window:window=N, h2o:budget=N, snapkv:budget=N (add positions=original to keep original positions), or a JS module path exporting a policy',
    )
    .option(
      '--kv-compression-max-prompt-tokens <n>',
      'longest prompt of a request with KV compression (default 32768; 413 beyond)',
      int(),
    )
    .option(
      '--kv-compression-max-tokens <n>',
      'largest max_tokens of a request with KV compression (default 32768; 400 beyond)',
      int(),
    )
    .option(
      '--kv-connector <module>',
      'a JS module exporting a KV connector (@kvasir/offload/connectors, v1) or a factory of one; repeat for several',
      (path: string, previous: string[] = []) => [...previous, path],
    )
    .option(
      '--plugin-budget-ms <ms>',
      'time budget of one call into a plug-in module; a slower call disables the plug-in (default 250)',
      int(),
    )
    .option(
      '--offload-host-bytes <bytes>',
      'host-memory offload tier budget, also the swap space (default 256MiB; 0 disables)',
      bytes,
    )
    .option('--offload-disk-dir <dir>', 'disk offload tier directory')
    .option('--offload-disk-bytes <bytes>', 'disk offload tier budget', bytes)
    .option(
      '--offload-redis-url <url>',
      'Redis offload tier: redis://127.0.0.1:6379, or a Redis Cluster by seed nodes, redis+cluster://127.0.0.1:7000,127.0.0.1:7001',
    )
    .option('--swap-blocks <n>', 'host slots for swap preemption', int())
    .option(
      '--offload-prefix',
      'write full KV blocks to the offload tiers and import cached prefixes from them (default on with a tier)',
    )
    .option('--no-offload-prefix', 'offload tiers only carry swapped-out blocks')
    .option('--cache-dir <dir>', 'where --model random writes its random-weight model');
  if (set.server) {
    cmd
      .option('--host <host>', 'interface to bind (default 127.0.0.1)')
      .option('-p, --port <port>', 'port (default 8000; 0 = any free port)', int())
      .option('--api-key <key>', 'require this bearer key (default: $KVASIR_API_KEY)')
      .option(
        '--max-response-bytes <bytes>',
        'largest non-streamed answer, estimated before generating (default 16MiB; 400 beyond)',
        bytes,
      )
      .option(
        '--kv-events <endpoint>',
        "publish KV block events in vLLM's format on this ZeroMQ PUB endpoint (tcp://*:5557 binds, tcp://host:port connects)",
      )
      .option(
        '--kv-events-replay <endpoint>',
        'ZeroMQ ROUTER endpoint answering replay (from a sequence number) and snapshot requests, e.g. tcp://*:5558',
      )
      .option('--kv-events-topic <topic>', 'topic frame of each KV event message (default empty)')
      .addOption(
        new Option(
          '--kv-events-encoding <encoding>',
          "KV event encoding: array (vLLM's positional structs, default) or map (vLLM's tagged maps)",
        ).choices(['array', 'map']),
      );
  }
  return cmd;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const [head, tail] = path.split('.') as [string, string | undefined];
  if (tail === undefined) {
    target[head] = value;
    return;
  }
  const inner = { ...((target[head] as Record<string, unknown> | undefined) ?? {}) };
  inner[tail] = value;
  target[head] = inner;
}

/**
 * Merges the config file (if any), then the flags the user actually gave, then validates.
 * Errors name the flag a bad value came from, or the config file.
 * @throws KvasirAppError `INVALID_CONFIG`.
 */
export async function resolveEngineConfig(cmd: Command): Promise<EngineConfig> {
  const flags = cmd.opts<Record<string, unknown> & { config?: string }>();
  const file = flags.config;
  const fromFile: EngineConfigInput = file ? await readConfigFile(file) : {};
  const merged: Record<string, unknown> = { ...fromFile };
  const flagOf = new Map<string, string>();
  for (const option of cmd.options) {
    const attribute = option.attributeName();
    const path = FLAG_PATHS[attribute];
    if (path === undefined || cmd.getOptionValueSource(attribute) !== 'cli') continue;
    setPath(merged, path, flags[attribute]);
    // `--x` and `--no-x` share an attribute: name the one that was given.
    const given =
      cmd.options.find(
        (o) => o.attributeName() === attribute && o.negate === (flags[attribute] === false),
      ) ?? option;
    flagOf.set(path, given.long ?? `--${attribute}`);
  }
  if (merged.apiKey === undefined && cmd.options.some((o) => o.attributeName() === 'apiKey')) {
    const fromEnv = process.env.KVASIR_API_KEY;
    if (fromEnv) merged.apiKey = fromEnv;
  }
  return parseEngineConfig(
    merged,
    (path) => flagOf.get(path) ?? (file ? `"${path}" in config file ${file}` : path),
  );
}
