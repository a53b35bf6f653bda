import { loadPlugin } from '@kvasir/engine';
import { ModelTokenizer, openCheckpoint } from '@kvasir/model';
import {
  type BuiltinRoutingName,
  type CacheAwareOptions,
  KvRouter,
  type PromptTokenizer,
  parseReplicaSpec,
  RouterError,
  type RoutingPolicy,
  validateRoutingPolicy,
} from '@kvasir/router';
import { parseEngineConfig } from '../config.js';
import { resolveModelPath } from '../engine/bootstrap.js';
import { codecFor } from '../engine/load-model-runner.js';
import { KvasirAppError } from '../errors.js';
import { listenError } from '../listen-error.js';
import { nodePluginSource } from '../plugins/node-plugin-source.js';

const BUILTIN_ROUTING: readonly BuiltinRoutingName[] = [
  'cache-aware',
  'kv-aware',
  'round-robin',
  'least-loaded',
];

/** `kvasir router`'s settings, as the command line gives them. */
export interface RouterCommandOptions {
  readonly replicas: readonly string[];
  /** `cache-aware`, `kv-aware`, `round-robin`, `least-loaded`, or a JS module exporting a routing policy. */
  readonly routing: string;
  readonly overlapWeight?: number;
  /** `cache-aware`'s thresholds (those given). */
  readonly cacheAware?: CacheAwareOptions;
  /** The replicas' model, for its tokenizer (as `serve --model`; default kvasir-mini). */
  readonly model?: string;
  readonly cacheDir?: string;
  readonly blockSize?: number;
  readonly sharedMedia: readonly string[];
  readonly host: string;
  readonly port: number;
  readonly healthIntervalMs?: number;
  /** Failed health checks in a row before a replica is taken out (default 3). */
  readonly unhealthyAfter?: number;
  /** `x-kvasir-route` on each routed response. */
  readonly explainRoutes?: boolean;
}

/**
 * Loads the tokenizer alone (no weights) the replicas serve `model` with: the same files and
 * the same encode and chat-template code as the engine, so the router's block hashes are theirs.
 */
async function loadTokenizer(
  model: string | undefined,
  cacheDir: string | undefined,
): Promise<{
  tokenizer: PromptTokenizer;
  path: string;
}> {
  const config = parseEngineConfig({
    ...(model === undefined ? {} : { model }),
    ...(cacheDir === undefined ? {} : { cacheDir }),
  });
  const { path } = await resolveModelPath(config);
  try {
    const reader = await openCheckpoint(path);
    let codec: ReturnType<typeof codecFor>;
    try {
      codec = codecFor(await ModelTokenizer.load(path, reader.config.eosTokenIds));
    } finally {
      await reader.close();
    }
    return {
      tokenizer: {
        encode: (text) => codec.encode(text),
        // Roles the template does not know make it throw: that request is routed by load.
        encodeChat: (m) =>
          codec.applyChatTemplate(m as Parameters<typeof codec.applyChatTemplate>[0]),
      },
      path,
    };
  } catch (error) {
    throw new KvasirAppError(
      'MODEL_LOAD',
      `--model: cannot load the tokenizer of ${path}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
}

async function routingPolicy(setting: string): Promise<BuiltinRoutingName | RoutingPolicy> {
  if ((BUILTIN_ROUTING as readonly string[]).includes(setting))
    return setting as BuiltinRoutingName;
  const make = await loadPlugin(
    setting,
    {
      kind: 'routing policy',
      validate: validateRoutingPolicy,
      alternatives: BUILTIN_ROUTING.join(', '),
    },
    nodePluginSource(),
  );
  return make();
}

/** The banner's parameters of a built-in policy. */
function routingDetails(name: string, options: RouterCommandOptions): string {
  if (name === 'kv-aware') return ` (overlap weight ${options.overlapWeight ?? 1})`;
  if (name !== 'cache-aware') return '';
  const c = options.cacheAware ?? {};
  return ` (cache threshold ${c.cacheThreshold ?? 0.3}; load decides past ${c.balanceAbsThreshold ?? 64} requests and ${c.balanceRelThreshold ?? 1.5}x apart)`;
}

/** `kvasir router`: an OpenAI-compatible front routing over `kvasir serve` replicas. */
export async function routerCommand(options: RouterCommandOptions): Promise<void> {
  if (options.replicas.length === 0) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      '--replica: give at least one (--replica http://127.0.0.1:8001,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558)',
    );
  }
  let replicas: ReturnType<typeof parseReplicaSpec>[];
  try {
    replicas = options.replicas.map(parseReplicaSpec);
  } catch (error) {
    if (RouterError.isInstance(error))
      throw new KvasirAppError('INVALID_CONFIG', `--replica: ${error.message}`, { cause: error });
    throw error;
  }
  const policy = await routingPolicy(options.routing);
  const { tokenizer, path } = await loadTokenizer(options.model, options.cacheDir);
  let router: KvRouter;
  try {
    router = new KvRouter({
      replicas,
      policy,
      tokenizer,
      ...(options.overlapWeight === undefined ? {} : { overlapWeight: options.overlapWeight }),
      ...(options.cacheAware === undefined ? {} : { cacheAware: options.cacheAware }),
      ...(options.blockSize === undefined ? {} : { blockSize: options.blockSize }),
      ...(options.sharedMedia.length > 0 ? { sharedMedia: options.sharedMedia } : {}),
      ...(options.healthIntervalMs === undefined
        ? {}
        : { healthIntervalMs: options.healthIntervalMs }),
      ...(options.unhealthyAfter === undefined ? {} : { unhealthyAfter: options.unhealthyAfter }),
      ...(options.explainRoutes ? { explainRoutes: true } : {}),
      host: options.host,
      port: options.port,
    });
  } catch (error) {
    if (RouterError.isInstance(error))
      throw new KvasirAppError('INVALID_CONFIG', error.message, { cause: error });
    throw error;
  }
  let url: string;
  try {
    url = await router.listen();
  } catch (error) {
    await router.close();
    throw listenError(error, options.host, options.port);
  }
  const lines = [
    '',
    `Kvasir router is listening on ${url}`,
    `  routing    ${router.policy.name}${routingDetails(router.policy.name, options)}`,
    `  health     every ${options.healthIntervalMs ?? 1000} ms; out after ${options.unhealthyAfter ?? 3} failed checks in a row, at once when refused`,
    `  tokenizer  ${path}`,
    ...replicas.map(
      (r, i) =>
        `  replica ${i}  ${r.url}${r.events ? `  events ${r.events}${r.replay ? `, replay ${r.replay}` : ' (no replay: gaps are not recovered)'}` : '  (no KV events: routed by load)'}`,
    ),
    '',
    `Health: ${url}/health   Replicas: ${url}/router/replicas   Metrics: ${url}/metrics   Stop: Ctrl-C`,
    '',
  ];
  let stopping = false;
  const stop = () => {
    if (stopping) process.exit(1);
    stopping = true;
    void router.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write(`${lines.join('\n')}\n`);
}
