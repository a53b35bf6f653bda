import { Command, Option } from 'commander';
import { benchCommand } from './commands/bench.js';
import { evalCommand } from './commands/eval.js';
import { streamingEvalCommand } from './commands/eval-streaming.js';
import { generateCommand } from './commands/generate.js';
import { infoCommand } from './commands/info.js';
import { addEngineOptions, resolveEngineConfig } from './commands/options.js';
import { collect, int, num } from './commands/parsers.js';
import { routerCommand } from './commands/router.js';
import { serveCommand } from './commands/serve.js';
import { simulateCommand } from './commands/simulate.js';
import { KV_DTYPES } from './config.js';
import { userMessage } from './errors.js';

const program = new Command()
  .name('kvasir')
  .description(
    'Kvasir: a KV-cache-centred LLM serving engine on WebGPU with an OpenAI-compatible API',
  )
  .showHelpAfterError();

addEngineOptions(
  program.command('serve').description('serve a model over an OpenAI-compatible HTTP API'),
  { server: true },
).action(async (_opts, cmd: Command) => {
  await serveCommand(await resolveEngineConfig(cmd));
});

addEngineOptions(
  program
    .command('generate')
    .description('generate text for one prompt in-process')
    .argument('<prompt>', 'the prompt')
    .option('-n, --max-tokens <n>', 'tokens to generate', int(1), 64)
    .option('-t, --temperature <t>', 'sampling temperature (0 = greedy)', num(), 0.8)
    .option('--top-p <p>', 'nucleus sampling', num({ positive: true }), 1)
    .option('--top-k <k>', 'top-k sampling (0 = off)', int(0), 0)
    .option('-s, --seed <seed>', 'sampling seed', int())
    .option('--chat', 'apply the chat template to the prompt as a user message', false)
    .option('--stop <text>', 'stop string (repeatable)', collect, [] as string[]),
).action(async (prompt: string, opts, cmd: Command) => {
  await generateCommand(await resolveEngineConfig(cmd), prompt, {
    maxTokens: opts.maxTokens,
    temperature: opts.temperature,
    topP: opts.topP,
    topK: opts.topK,
    ...(opts.seed === undefined ? {} : { seed: opts.seed }),
    chat: opts.chat,
    stop: opts.stop,
  });
});

addEngineOptions(
  program
    .command('info')
    .description(
      'adapter, model and memory plan (weights, KV bytes per token, blocks and tokens that fit)',
    )
    .option('--json', 'print one JSON object', false),
).action(async (opts, cmd: Command) => {
  await infoCommand(await resolveEngineConfig(cmd), opts.json);
});

addEngineOptions(
  program
    .command('eval')
    .description(
      'sliding-window perplexity over a text file, with KL divergence and top-1 agreement against a reference run',
    )
    .requiredOption('-f, --file <file>', 'UTF-8 text to evaluate')
    .option('--ctx <n>', "window length in tokens (default min(512, the model's context))", int(2))
    .option('--stride <n>', 'tokens between window starts (default ctx / 2)', int(1))
    .option('--max-tokens <n>', "evaluate only the file's first n tokens", int(2))
    .addOption(
      new Option(
        '--reference-kv-dtype <dtype>',
        'KV dtype of the reference run (same model, backend, block size), or none (default: f32, none when --kv-dtype is f32)',
      ).choices([...KV_DTYPES, 'none']),
    )
    .option(
      '--reference <file.json>',
      'compare with the logits an earlier run saved (--save-logits) instead of a reference run',
    )
    .option(
      '--save-logits <file.json>',
      'save the logits of every scored position (JSON + .f32 beside it) for a later --reference',
    )
    .option('--tokens-out <file>', 'write the evaluated token ids (JSON array) here')
    .option(
      '--prompt-tokens <n>',
      'with --kv-compression: tokens prefilled as the prompt before one decode step per token (default one block; SnapKV compresses at its end)',
      int(1),
    )
    .option('--json', 'print one JSON object', false)
    .option('--no-progress', 'no progress line on stderr'),
).action(async (opts, cmd: Command) => {
  const config = await resolveEngineConfig(cmd);
  if (config.kvCompression !== undefined) {
    // The text as one sequence through the policy, past the context if it allows.
    await streamingEvalCommand(config, {
      file: opts.file,
      ...(opts.maxTokens === undefined ? {} : { maxTokens: opts.maxTokens }),
      ...(opts.promptTokens === undefined ? {} : { promptTokens: opts.promptTokens }),
      json: opts.json,
      progress: opts.progress && process.stderr.isTTY === true,
    });
    return;
  }
  await evalCommand(config, {
    file: opts.file,
    ...(opts.ctx === undefined ? {} : { ctx: opts.ctx }),
    ...(opts.stride === undefined ? {} : { stride: opts.stride }),
    ...(opts.maxTokens === undefined ? {} : { maxTokens: opts.maxTokens }),
    ...(opts.referenceKvDtype ? { referenceKvDtype: opts.referenceKvDtype } : {}),
    ...(opts.reference ? { reference: opts.reference } : {}),
    ...(opts.saveLogits ? { saveLogits: opts.saveLogits } : {}),
    ...(opts.tokensOut ? { tokensOut: opts.tokensOut } : {}),
    json: opts.json,
    progress: opts.progress && process.stderr.isTTY === true,
  });
});

program
  .command('simulate')
  .description("capacity simulation with the scheduler's roofline serving simulator")
  .option('--hardware <name>', 'hardware profile', 'A100-40GB')
  .option('--model-profile <name>', 'model profile', 'OPT-13B')
  .option('--workload <name>', 'workload: sharegpt, alpaca, shared-prefix', 'sharegpt')
  .option(
    '--rate <r>',
    'request rate to simulate (req/s); omit to search the maximum rate',
    num({ positive: true }),
  )
  .option('--requests <n>', 'requests in the workload', int(1), 1000)
  .option('--seed <seed>', 'workload seed', int(), 1)
  .option(
    '--latency-bound <s>',
    'mean normalized latency bound for the rate search (s/token)',
    num({ positive: true }),
    0.4,
  )
  .option('--json', 'print one JSON object', false)
  .option('--no-progress', 'no progress lines on stderr')
  .action(async (opts) => {
    await simulateCommand(opts);
  });

addEngineOptions(
  program
    .command('bench')
    .description('load generator against a URL or an in-process engine')
    .option('--url <url>', 'server to load (default: start an in-process engine)')
    .option('--api-key <key>', 'bearer key of the --url server')
    .option('--model-name <id>', 'model id to request')
    .option(
      '--concurrency <n>',
      'concurrent clients (closed loop), or the in-flight cap with --rate',
      int(1),
      8,
    )
    .option(
      '--rate <r>',
      'Poisson arrivals per second instead of a closed loop',
      num({ positive: true }),
    )
    .option('--duration <s>', 'seconds to send requests', num({ positive: true }), 30)
    .option('--max-requests <n>', 'stop after this many requests', int(1))
    .option('--max-tokens <n>', 'tokens per request (EOS ignored)', int(1), 32)
    .option('--prompt-words <n>', 'words per synthetic prompt', int(1), 32)
    .option(
      '--shared-prefix-words <n>',
      'shared system-prompt words in every synthetic prompt',
      int(0),
      0,
    )
    .option('--prompts-file <file>', 'prompts, one per line (or JSONL with a "prompt" field)')
    .option('--bench-seed <seed>', 'seed of the synthetic prompts and arrivals', int(), 1)
    .option('--json', 'print one JSON object', false)
    .option('--out <dir>', 'write the full JSON report and an SVG chart here')
    .option('--no-progress', 'no progress bar'),
).action(async (opts, cmd: Command) => {
  const config = opts.url ? undefined : await resolveEngineConfig(cmd);
  await benchCommand(config, {
    ...(opts.url ? { url: opts.url } : {}),
    ...(opts.apiKey ? { apiKey: opts.apiKey } : {}),
    ...(opts.modelName ? { model: opts.modelName } : {}),
    concurrency: opts.concurrency,
    ...(opts.rate ? { rate: opts.rate } : {}),
    durationSec: opts.duration,
    ...(opts.maxRequests ? { maxRequests: opts.maxRequests } : {}),
    maxTokens: opts.maxTokens,
    promptWords: opts.promptWords,
    sharedPrefixWords: opts.sharedPrefixWords,
    ...(opts.promptsFile ? { promptsFile: opts.promptsFile } : {}),
    seed: opts.benchSeed,
    json: opts.json,
    ...(opts.out ? { outDir: opts.out } : {}),
    progress: opts.progress && process.stderr.isTTY === true,
  });
});

program
  .command('router')
  .description(
    'an OpenAI-compatible front for several kvasir serve replicas, routing by cached prefix (their KV events) and load',
  )
  .option(
    '--replica <spec>',
    'a replica: http://host:port[,events=tcp://host:port[,replay=tcp://host:port]] (its --kv-events and --kv-events-replay endpoints; repeatable)',
    collect,
    [] as string[],
  )
  .option(
    '--routing <policy>',
    'cache-aware (the cache decides unless replicas are out of balance), kv-aware (prefix overlap against load, one cost), round-robin, least-loaded, or a JS module exporting a routing policy',
    'cache-aware',
  )
  .option(
    '--overlap-weight <w>',
    'kv-aware: cost of a block to prefill against a block decoding (default 1)',
    num({ positive: true }),
  )
  .option(
    '--cache-threshold <share>',
    'cache-aware: share of the prompt (0-1) the best replica must hold for the cache to decide; below it the prompt is new (default 0.3)',
    num(),
  )
  .option(
    '--balance-abs-threshold <n>',
    'cache-aware: load decides when the busiest replica has more than n requests in flight beyond the idlest (default 64) ...',
    num(),
  )
  .option('--balance-rel-threshold <x>', '... and more than x times as many (default 1.5)', num())
  .option(
    '-m, --model <path>',
    "the replicas' model, for its tokenizer only (as serve --model; default kvasir-mini)",
  )
  .option('--cache-dir <dir>', 'where --model random is written')
  .option(
    '--block-size <tokens>',
    "the replicas' KV block size (default: from their events, else 16)",
    int(1),
  )
  .option(
    '--shared-medium <medium>',
    'a tier every replica reads, such as REDIS when they share one Redis: its blocks count for all (repeatable)',
    collect,
    [] as string[],
  )
  .option('--host <host>', 'interface to bind', '127.0.0.1')
  .option('-p, --port <port>', 'port (0 = any free port)', int(0), 8080)
  .option('--health-interval-ms <ms>', "how often each replica's /health is checked", int(50), 1000)
  .option(
    '--unhealthy-after <n>',
    'failed health checks in a row (timeouts, errors) before a replica is taken out; a refused connection takes it out at once',
    int(1),
    3,
  )
  .option(
    '--explain-routes',
    'add x-kvasir-route to each routed response: the cached prefix and load the policy saw per replica',
    false,
  )
  .action(async (opts) => {
    await routerCommand({
      replicas: opts.replica,
      routing: opts.routing,
      ...(opts.overlapWeight === undefined ? {} : { overlapWeight: opts.overlapWeight }),
      cacheAware: {
        ...(opts.cacheThreshold === undefined ? {} : { cacheThreshold: opts.cacheThreshold }),
        ...(opts.balanceAbsThreshold === undefined
          ? {}
          : { balanceAbsThreshold: opts.balanceAbsThreshold }),
        ...(opts.balanceRelThreshold === undefined
          ? {}
          : { balanceRelThreshold: opts.balanceRelThreshold }),
      },
      ...(opts.model === undefined ? {} : { model: opts.model }),
      ...(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir }),
      ...(opts.blockSize === undefined ? {} : { blockSize: opts.blockSize }),
      sharedMedia: opts.sharedMedium,
      host: opts.host,
      port: opts.port,
      healthIntervalMs: opts.healthIntervalMs,
      unhealthyAfter: opts.unhealthyAfter,
      explainRoutes: opts.explainRoutes,
    });
  });

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`kvasir: ${userMessage(error)}\n`);
  process.exit(1);
});
