import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import { convertToGguf, type GgufTypedValue, readGgufHeader } from '@kvasir/model/formats';
import OpenAI from 'openai';
import { randomModelConfig } from '../src/default-model.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The built CLI the end-to-end tests run. */
/** The official client against a test server: no retries, so a failure shows at once. */
function openAiClient(url: string): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 120_000 });
}

export const CLI = join(root, 'dist', 'cli.js');
/** One cache directory per test run: the random-weight model is written once in it. */
export const CACHE_DIR = process.env.KVASIR_E2E_CACHE ?? mkdtempSync(join(tmpdir(), 'kvasir-e2e-'));
export const API_KEY = 'sk-kvasir-e2e';

/** A `kvasir serve` process on a free loopback port. */
export interface ServerProcess {
  readonly url: string;
  readonly client: OpenAI;
  readonly child: ChildProcess;
  /** Everything the process printed so far. */
  output(): string;
  /** Parsed `/metrics`: `series{labels}` → value. */
  metrics(): Promise<Map<string, number>>;
  /** Sends SIGTERM once (graceful drain); a second one would exit at once. */
  terminate(): void;
  /** SIGTERM (unless already sent), then waits for the exit code. */
  stop(): Promise<number | null>;
}

/**
 * Starts `node dist/cli.js serve --port 0 ...args` and waits for its banner. The model is the
 * seeded random-weight one (`--model random`: quick to load, served as `RANDOM_MODEL_NAME`)
 * unless `args` name another, or `defaultModel` asks for the default (kvasir-mini).
 */
export async function startServer(
  args: readonly string[],
  options: { readonly defaultModel?: boolean; readonly openFileLimit?: number } = {},
): Promise<ServerProcess> {
  const model =
    options.defaultModel || args.includes('--model') || args.includes('-m')
      ? []
      : ['--model', 'random'];
  const command = [
    process.execPath,
    CLI,
    'serve',
    '--port',
    '0',
    '--cache-dir',
    CACHE_DIR,
    '--api-key',
    API_KEY,
    ...model,
    ...args,
  ];
  // `ulimit -n` as a user's shell would set it, for the process alone.
  const [file, ...rest] =
    options.openFileLimit === undefined
      ? command
      : ['bash', '-c', `ulimit -n ${options.openFileLimit} && exec "$@"`, 'bash', ...command];
  const child = spawn(file!, rest, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, KVASIR_API_KEY: '' },
  });
  let out = '';
  let signalled = false;
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /Kvasir is listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    void exited.then((code) =>
      reject(new Error(`kvasir serve exited (${code}) before listening:\n${out}`)),
    );
  });
  const terminate = () => {
    if (!signalled && child.exitCode === null) child.kill('SIGTERM');
    signalled = true;
  };
  const client = openAiClient(url);
  return {
    url,
    client,
    child,
    output: () => out,
    async metrics() {
      const text = await (await fetch(`${url}/metrics`)).text();
      const map = new Map<string, number>();
      for (const line of text.split('\n')) {
        if (line.startsWith('#') || line.trim() === '') continue;
        const cut = line.lastIndexOf(' ');
        map.set(line.slice(0, cut), Number(line.slice(cut + 1)));
      }
      return map;
    },
    terminate,
    async stop() {
      terminate();
      return exited;
    },
  };
}

/** Polls `probe` until it returns true (bounded number of tries, 50 ms apart). */
export async function eventually(probe: () => Promise<boolean>, tries = 200): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await probe()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

/** A `kvasir serve` replica publishing KV events, with its resolved endpoints. */
export interface EventReplica extends ServerProcess {
  /** `http://…,events=tcp://…,replay=tcp://…`, as `kvasir router --replica` takes it. */
  readonly spec: string;
  readonly events: string;
  readonly replay: string;
}

/** Starts `kvasir serve` with `--kv-events` and `--kv-events-replay` on free loopback ports. */
export async function startEventReplica(args: readonly string[]): Promise<EventReplica> {
  const server = await startServer([
    ...args,
    '--kv-events',
    'tcp://127.0.0.1:*',
    '--kv-events-replay',
    'tcp://127.0.0.1:*',
  ]);
  const m = /KV events +(tcp:\/\/\S+) .*replay (tcp:\/\/\S+)/.exec(server.output());
  if (!m) throw new Error(`no KV events endpoints in the banner:\n${server.output()}`);
  return Object.assign(server, {
    events: m[1]!,
    replay: m[2]!,
    spec: `${server.url},events=${m[1]!},replay=${m[2]!}`,
  });
}

/** A `kvasir router` process on a free loopback port. */
export interface RouterProcess {
  readonly url: string;
  readonly client: OpenAI;
  readonly child: ChildProcess;
  output(): string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

/** Starts `node dist/cli.js router --port 0 --model random ...args` and waits for its banner. */
export async function startRouterProcess(args: readonly string[]): Promise<RouterProcess> {
  const child = spawn(
    process.execPath,
    [CLI, 'router', '--port', '0', '--cache-dir', CACHE_DIR, '--model', 'random', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const m = /Kvasir router is listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    void exited.then((code) => reject(new Error(`kvasir router exited (${code}):\n${out}`)));
  });
  const client = openAiClient(url);
  return {
    url,
    client,
    child,
    output: () => out,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Writes the random model as GGUF files that carry real chat templates (`name` → template), in
 * `dir`, as `<name>.gguf`; its context is 4,096 tokens (templates that list tools are long).
 */
export async function writeTemplatedGgufs(
  dir: string,
  files: Readonly<Record<string, string>>,
): Promise<void> {
  const checkpoint = join(dir, 'random-checkpoint');
  await writeRandomCheckpoint(
    checkpoint,
    { ...randomModelConfig(), maxPositionEmbeddings: 4096 },
    7,
  );
  for (const [name, template] of Object.entries(files)) {
    await convertToGguf(checkpoint, join(dir, `${name}.gguf`), {
      metadata: { 'general.name': name, 'tokenizer.chat_template': template },
    });
  }
}

/** GGUF token types (llama.cpp's `LLAMA_TOKEN_TYPE_*`). */
const TOKEN_TYPE = { control: 3, userDefined: 4 } as const;

/** What {@link writeVocabularyGguf} writes. */
export interface VocabularyGguf {
  /** A cut real vocabulary under `tooling/ggml-fixtures/tokenizers/` (its stem). */
  readonly vocab: string;
  readonly chatTemplate: string;
  /**
   * Tokens the cut vocabulary lost, put back: placeholder piece → the real piece (llama.cpp's
   * cut files name the added tokens they drop `[PAD<id>]`), keeping its id and type.
   */
  readonly rename?: Readonly<Record<string, string>>;
  /** Tokens added after the vocabulary's, with their type. */
  readonly append?: readonly { readonly piece: string; readonly type: keyof typeof TOKEN_TYPE }[];
}

/**
 * Writes the random model (its shape, seed 7, 4,096 positions) as a GGUF file at `path` over a
 * real family's vocabulary and chat template, with the tokens that family's tool calls start
 * with (Qwen 2.5's `<tool_call>`, Mistral Nemo's control token `[TOOL_CALLS]`) where they are in
 * the family's own files; returns the id of each renamed or appended piece.
 */
export async function writeVocabularyGguf(
  path: string,
  spec: VocabularyGguf,
): Promise<Record<string, number>> {
  const file = join(root, `../../tooling/ggml-fixtures/tokenizers/${spec.vocab}.gguf`);
  const fh = await open(file, 'r');
  let metadata: ReadonlyMap<string, unknown>;
  try {
    metadata = (await readGgufHeader(fh, file)).metadata;
  } finally {
    await fh.close();
  }
  const tokens = [...(metadata.get('tokenizer.ggml.tokens') as string[])];
  const types = [...(metadata.get('tokenizer.ggml.token_type') as number[])];
  const ids: Record<string, number> = {};
  for (const [placeholder, piece] of Object.entries(spec.rename ?? {})) {
    const id = tokens.indexOf(placeholder);
    if (id < 0) throw new Error(`${spec.vocab} has no ${placeholder}`);
    tokens[id] = piece;
    ids[piece] = id;
  }
  for (const { piece, type } of spec.append ?? []) {
    ids[piece] = tokens.length;
    tokens.push(piece);
    types.push(TOKEN_TYPE[type]);
  }
  const tokenizer: Record<string, unknown | GgufTypedValue> = {};
  for (const [key, value] of metadata) if (key.startsWith('tokenizer.')) tokenizer[key] = value;
  tokenizer['tokenizer.ggml.tokens'] = tokens;
  tokenizer['tokenizer.ggml.token_type'] = { type: 'array', itemType: 'i32', value: types };
  const scores = metadata.get('tokenizer.ggml.scores') as number[] | undefined;
  if (scores) {
    const value = [...scores, ...(spec.append ?? []).map(() => 0)];
    tokenizer['tokenizer.ggml.scores'] = { type: 'array', itemType: 'f32', value };
  }
  tokenizer['tokenizer.chat_template'] = spec.chatTemplate;
  const bos = metadata.get('tokenizer.ggml.bos_token_id');
  const eos = metadata.get('tokenizer.ggml.eos_token_id');
  const checkpoint = `${path}.checkpoint`;
  await writeRandomCheckpoint(
    checkpoint,
    makeModelConfig({
      ...randomModelConfig(),
      vocabSize: tokens.length,
      maxPositionEmbeddings: 4096,
      bosTokenId: typeof bos === 'number' ? bos : null,
      eosTokenIds: typeof eos === 'number' ? [eos] : [],
    }),
    7,
  );
  await convertToGguf(checkpoint, path, {
    withoutTokenizer: true,
    metadata: { 'general.name': spec.vocab, ...tokenizer },
  });
  await rm(checkpoint, { recursive: true, force: true });
  return ids;
}
