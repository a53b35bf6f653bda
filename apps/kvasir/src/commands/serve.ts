import { createServer, handleShutdownSignals } from '@kvasir/server';
import { buildEngine } from '../bootstrap.js';
import type { EngineConfig } from '../config.js';
import { formatBytes } from '../memory-plan.js';

/** `kvasir serve`: builds the engine, serves it over HTTP, drains on SIGTERM/SIGINT. */
export async function serveCommand(config: EngineConfig): Promise<void> {
  const built = await buildEngine(config);
  const server = createServer({
    engine: built.engine,
    host: config.host,
    port: config.port,
    ...(config.apiKey ? { apiKey: config.apiKey } : {}),
  });
  let url: string;
  try {
    url = await server.listen();
  } catch (error) {
    await built.close();
    throw error;
  }
  const card = built.engine.modelCard;
  const plan = built.plan;
  const lines = [
    '',
    `Kvasir is listening on ${url}`,
    `  model      ${card.id}  (${built.modelPath})`,
    `  backend    ${built.model.backend}`,
    `  KV cache   ${plan.numBlocks} blocks × ${built.model.kvLayout.blockSize} tokens = ${plan.numTokens} tokens (${formatBytes(plan.kvCacheBytes)}, ${config.kvDtype}); weights ${formatBytes(plan.weightBytes)}`,
    `  scheduler  max ${config.maxNumSeqs} seqs, ${config.maxNumBatchedTokens} tokens/step, prefix caching ${config.enablePrefixCaching ? 'on' : 'off'}, preemption ${config.preemptionMode}, eviction ${config.evictionPolicy}`,
    `  offload    ${built.offloadTiers.length > 0 ? built.offloadTiers.join(' → ') : 'none'}`,
    `  auth       ${config.apiKey ? 'bearer API key required on /v1' : 'none (set --api-key or KVASIR_API_KEY)'}`,
  ];
  if (built.isDefaultModel) {
    lines.push(
      '',
      '  NOTE: this is the embedded default model: a tiny Llama with RANDOM weights.',
      '        Its output is noise. Serve a real checkpoint with',
      '        kvasir serve --model /path/to/hf-model-dir   (or --model model.gguf)',
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
  process.stdout.write(`${lines.join('\n')}\n`);
  handleShutdownSignals(server, { deadlineMs: 30_000, onClosed: () => built.close() });
}
