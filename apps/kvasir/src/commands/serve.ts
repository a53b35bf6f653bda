import type { PrefixOffloadStats } from '@kvasir/engine';
import { deviceBudgetText, formatBytes, type MemoryPlan } from '@kvasir/engine';
import { createServer, handleShutdownSignals } from '@kvasir/server';
import type { EngineConfig } from '../config.js';
import { describeDefaultModel } from '../default-model.js';
import { buildEngine } from '../engine/bootstrap.js';
import type { LoadedModel } from '../engine/load-model-runner.js';
import { listenError } from '../listen-error.js';

type Registry = ReturnType<typeof createServer>['metrics']['registry'];

/**
 * Adds the prefix-offload counters to the server's `/metrics` registry. They are read from the
 * engine at scrape time (like the server's own engine mirrors); a minimal metric object keeps
 * the app off a direct prom-client dependency.
 */
export function registerPrefixOffloadMetrics(
  registry: Registry,
  read: () => PrefixOffloadStats,
): void {
  const counter = (name: string, help: string, value: (s: PrefixOffloadStats) => number) => {
    const metric = {
      name,
      help,
      type: 'counter',
      aggregator: 'sum',
      labelNames: [],
      get: async () => ({
        name,
        help,
        type: 'counter',
        aggregator: 'sum',
        values: [{ value: value(read()), labels: {} }],
      }),
      reset() {},
    };
    registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
  };
  counter(
    'kvasir_offload_prefix_imported_tokens_total',
    'Prompt tokens imported from the offload tiers into the GPU prefix cache.',
    (s) => s.importedTokens,
  );
  counter(
    'kvasir_offload_prefix_imported_blocks_total',
    'KV blocks imported from the offload tiers into the GPU prefix cache.',
    (s) => s.importedBlocks,
  );
  counter(
    'kvasir_offload_prefix_stored_blocks_total',
    'Full KV blocks written to the offload tiers for prefix reuse.',
    (s) => s.storedBlocks,
  );
  counter(
    'kvasir_offload_prefix_skipped_imports_total',
    'Prefix imports given up (no room, late or missing blocks); those requests recompute.',
    (s) => s.skippedImports,
  );
  counter(
    'kvasir_offload_prefix_missing_blocks_total',
    'Prefix blocks a lookup expected in the offload tiers but could not read back (deleted or corrupt); written again when next full.',
    (s) => s.missingBlocks,
  );
  counter(
    'kvasir_offload_prefix_errors_total',
    'Failed prefix-offload reads, writes and lookups (never fatal to requests).',
    (s) => s.errors,
  );
}

/**
 * Adds `kvasir_plugin_failures_total{plugin}` to `/metrics`: failures of users' plug-ins (see
 * `KvasirEngine.pluginFailures`), read at scrape time.
 */
export function registerPluginMetrics(
  registry: Registry,
  read: () => Readonly<Record<string, number>>,
): void {
  const name = 'kvasir_plugin_failures_total';
  const help =
    "Calls into a user's plug-in that threw, broke its contract or overran the time budget, by plug-in (kind:name).";
  const metric = {
    name,
    help,
    type: 'counter',
    aggregator: 'sum',
    labelNames: ['plugin'],
    get: async () => ({
      name,
      help,
      type: 'counter',
      aggregator: 'sum',
      values: Object.entries(read()).map(([plugin, value]) => ({ value, labels: { plugin } })),
    }),
    reset() {},
  };
  registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
}

/** The banner's line on sliding-window layers: KV groups, or why they keep the whole context. */
function kvGroupsLines(model: LoadedModel): string[] {
  const { groups, wholeBecause } = model.kvGroups;
  if (groups) {
    return [
      `  KV groups  ${groups.windows.length} groups of ${groups.layersPerGroup} layer(s) per block: sliding-window layers hold only their window (--swa-full keeps the whole context)`,
    ];
  }
  return wholeBecause
    ? [`  KV groups  one: whole-context KV on the sliding-window layers (${wholeBecause})`]
    : [];
}

/**
 * The banner's backend: one line for one device; for a model split by layer, one per device
 * with its layers, weights and KV cache (every device holds every block, for its own layers).
 */
export function backendLines(model: LoadedModel, plan: MemoryPlan): string[] {
  if (model.devices.length === 1) return [`  backend    ${model.backend}`];
  const perLayerBlock = plan.kvBytesPerBlock / model.kvLayout.numLayers;
  return [
    `  backend    split by layer over ${model.devices.length} devices`,
    ...model.devices.map(
      (d, i) =>
        `  device ${i}   ${d.description}: layers ${d.firstLayer}-${d.firstLayer + d.numLayers - 1}, weights ${formatBytes(d.weightBytes)}, KV ${plan.numBlocks} blocks (${formatBytes(plan.numBlocks * perLayerBlock * d.numLayers)})${deviceBudgetText(plan, i)}`,
    ),
  ];
}

/** `kvasir serve`: builds the engine, serves it over HTTP, drains on SIGTERM/SIGINT. */
export async function serveCommand(config: EngineConfig): Promise<void> {
  const built = await buildEngine(config);
  const server = createServer({
    engine: built.engine,
    host: config.host,
    port: config.port,
    ...(config.apiKey ? { apiKey: config.apiKey } : {}),
    maxResponseBytes: config.maxResponseBytes,
  });
  let accepted = 0;
  server.app.server.on('connection', () => {
    accepted++;
  });
  built.engine.watchAcceptedConnections(() => accepted);
  registerPrefixOffloadMetrics(server.metrics.registry, () => built.engine.prefixOffloadStats());
  registerPluginMetrics(server.metrics.registry, () => built.engine.pluginFailures());
  let url: string;
  try {
    url = await server.listen();
  } catch (error) {
    await built.close();
    throw listenError(error, config.host, config.port);
  }
  const card = built.engine.modelCard;
  const plan = built.plan;
  const lines = [
    '',
    `Kvasir is listening on ${url}`,
    `  model      ${card.id}  (${built.modelPath})`,
    ...backendLines(built.model, plan),
    `  KV cache   ${plan.numBlocks} blocks × ${built.model.kvLayout.blockSize} tokens = ${plan.numTokens} tokens (${formatBytes(plan.kvCacheBytes)}, ${config.kvDtype}); weights ${formatBytes(built.model.weightBytes)}`,
    ...kvGroupsLines(built.model),
    `  scheduler  max ${config.maxNumSeqs} seqs, ${config.maxNumBatchedTokens} tokens/step, prefix caching ${config.enablePrefixCaching ? 'on' : 'off'}, preemption ${built.preemption.description}, eviction ${config.evictionPolicy}, KV compression ${config.kvCompression ?? 'off (per request: kv_compression)'}`,
    `  offload    ${built.offloadTiers.length > 0 ? built.offloadTiers.join(' → ') : 'none'}${built.engine.prefixOffloadEnabled ? ' (prefix blocks shared through it)' : ''}`,
    `  auth       ${config.apiKey ? 'bearer API key required on /v1' : 'none (set --api-key or KVASIR_API_KEY)'}`,
  ];
  if (config.kvConnectors.length > 0) {
    lines.push(`  connectors ${built.engine.connectorNames.join(', ')}`);
  }
  if (built.kvEvents) {
    lines.push(
      `  KV events  ${built.kvEvents.pub} (vLLM format, ${config.kvEvents.encoding} encoding)${built.kvEvents.replay ? `, replay ${built.kvEvents.replay}` : ''}`,
    );
  }
  if (built.isDefaultModel) {
    lines.push(
      '',
      ...describeDefaultModel().map((line) => `  ${line}`),
      '  Serve another checkpoint with --model /path/to/hf-model-dir (or --model model.gguf).',
    );
  } else if (built.isRandomModel) {
    lines.push(
      '',
      '  NOTE: --model random is a tiny Llama with RANDOM weights, for tests: its output is noise.',
    );
  }
  const auth = config.apiKey ? ` -H 'authorization: Bearer $KVASIR_API_KEY'` : '';
  lines.push(
    '',
    'Try it:',
    `  curl ${url}/v1/chat/completions -H 'content-type: application/json'${auth} \\`,
    `    -d '{"model":"${card.id}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'`,
    '',
    `Metrics: ${url}/metrics   Health: ${url}/health   Stop: Ctrl-C`,
    '',
  );
  // Signals are handled before the banner goes out: a supervisor (or a test) that reads the
  // banner and stops the server at once must get a drain, not the default SIGTERM death.
  handleShutdownSignals(server, { deadlineMs: 30_000, onClosed: () => built.close() });
  process.stdout.write(`${lines.join('\n')}\n`);
}
