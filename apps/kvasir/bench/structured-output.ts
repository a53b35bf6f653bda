// What structured outputs cost: output tokens/s of greedy requests constrained by a JSON schema
// with fixed keys, with jump-forward decoding and without, against the same requests
// unconstrained, at batch 1 and 16; then the time XGrammar takes to compile a few schemas, cold
// (a fresh compiler) and cached. Two engines over the same GGUF file (jump-forward on / off),
// built in this process; the variants alternate within each round, their order rotating from
// round to round, so the machine's load falls on all of them alike.
//
//   pnpm turbo run build --filter=kvasir
//   cd apps/kvasir && npx tsx bench/structured-output.ts \
//     --gguf ../../.kvasir-cache/issue18-110m-Q4_K_M-kv12.gguf [--threads 2] [--rounds 3]
//     [--batches 1,16] [--tokens 48]
//
// The constrained requests run to the schema's end (their output length is the model's), the
// unconstrained ones for `--tokens`; each variant's first output is in the JSON (`sample`).
// Prints one JSON object: each round's tokens/s per variant and batch size (over the whole
// run, and decode alone: from the last request's first token on, which the ratios use, since
// the prompts' prefill weighs more on the shorter unconstrained runs), the per-round
// ratios (constrained ÷ unconstrained without jump-forward, jump-forward ÷ without), their
// medians, the steps each variant took, compile times, and the load average before and after.
import { readFileSync } from 'node:fs';
import { type OutputConstraint, XGrammarCompiler } from '@kvasir/model';
import type { GenerationRequest } from '@kvasir/server';
import { type BuiltEngine, buildEngine, parseEngineConfig } from '../src/index.js';
import { FIXED_KEYS } from './fixed-keys.js';

const argv = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1]! : fallback;
};
const gguf = arg('--gguf', '');
if (!gguf) throw new Error('usage: structured-output.ts --gguf <file.gguf>');
const threads = Number(arg('--threads', '2'));
const rounds = Number(arg('--rounds', '3'));
const batches = arg('--batches', '1,16').split(',').map(Number);
const freeTokens = Number(arg('--tokens', '48'));

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const COMPILE_SCHEMAS: Record<string, unknown> = {
  fixed_keys: FIXED_KEYS,
  nested_arrays: {
    type: 'object',
    properties: {
      order: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{4}$' },
      lines: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            sku: { type: 'string' },
            qty: { type: 'integer', minimum: 1 },
            price: { type: 'number', minimum: 0 },
          },
          required: ['sku', 'qty', 'price'],
        },
        minItems: 1,
      },
      notes: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    },
    required: ['order', 'lines'],
  },
  weather_tool_args: {
    type: 'object',
    properties: {
      city: { type: 'string' },
      unit: { enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', minimum: 1, maximum: 14 },
    },
    required: ['city'],
  },
};

function engine(jumpForward: boolean): Promise<BuiltEngine> {
  return buildEngine(
    parseEngineConfig({
      model: gguf,
      backend: 'wasm',
      threads,
      numGpuBlocks: 256,
      maxNumSeqs: 16,
      enablePrefixCaching: false,
      jumpForward,
    }),
  );
}

type Variant = 'unconstrained' | 'schema' | 'schema_jump_forward';
const VARIANTS: readonly Variant[] = ['unconstrained', 'schema', 'schema_jump_forward'];

let nextId = 0;
/** Runs `batch` requests at once; returns output tokens/s, tokens and steps. */
async function runBatch(built: BuiltEngine, variant: Variant, batch: number, round: number) {
  const vocab = built.engine.modelCard.vocabSize!;
  const constraint: OutputConstraint | undefined =
    variant === 'unconstrained' ? undefined : { kind: 'json_schema', schema: FIXED_KEYS };
  const requests: GenerationRequest[] = Array.from({ length: batch }, (_, i) => ({
    id: `so-${nextId++}`,
    model: built.engine.modelCard.id,
    // A different 16-token prompt per request and round, the same for every variant.
    promptTokens: Array.from(
      { length: 16 },
      (_, k) => ((round + 2) * 7919 + i * 131 + k * 17 + 1) % vocab,
    ),
    n: 1,
    maxTokens: constraint ? 512 : freeTokens,
    sampling: {
      temperature: 0,
      topP: 1,
      topK: 0,
      minP: 0,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
    },
    stopTokenIds: [],
    ignoreEos: !constraint,
    ...(constraint ? { constraint } : {}),
  }));
  const steps = built.engine.steps;
  const started = performance.now();
  // Decode starts once every request has its first token (the prompts are prefilled first).
  let decodeFrom = started;
  const counts = await Promise.all(
    requests.map(async (req) => {
      let tokens = 0;
      let finish = '';
      let text = '';
      for await (const event of await built.engine.generate(req, new AbortController().signal)) {
        if (event.kind !== 'delta') continue;
        if (tokens === 0) decodeFrom = Math.max(decodeFrom, performance.now());
        tokens += event.tokenIds.length;
        text += event.text;
        if (event.finishReason) finish = event.finishReason;
      }
      return { tokens, finish, text };
    }),
  );
  const ended = performance.now();
  const tokens = counts.reduce((sum, c) => sum + c.tokens, 0);
  return {
    tokensPerSecond: tokens / ((ended - started) / 1000),
    // The tokens after each request's first, over the time after the last first token.
    decodeTokensPerSecond: (tokens - batch) / ((ended - decodeFrom) / 1000),
    tokens,
    steps: built.engine.steps - steps,
    stopped: counts.filter((c) => c.finish === 'stop').length,
    sample: counts[0]!.text,
  };
}

async function compileTimes(built: BuiltEngine) {
  const { codec, facts } = built.engine.runner;
  const vocabulary = codec.vocabulary!({ size: facts.vocabSize, stopTokenIds: facts.eosTokenIds });
  const out: Record<string, { coldMs: number; cachedMs: number }> = {};
  let createMs = 0;
  for (const [name, schema] of Object.entries(COMPILE_SCHEMAS)) {
    let t = performance.now();
    const compiler = await XGrammarCompiler.create(vocabulary);
    createMs = Math.max(createMs, performance.now() - t);
    const constraint: OutputConstraint = { kind: 'json_schema', schema };
    t = performance.now();
    await compiler.compile(constraint);
    const coldMs = performance.now() - t;
    t = performance.now();
    await compiler.compile(constraint);
    out[name] = { coldMs, cachedMs: performance.now() - t };
    compiler.dispose();
  }
  return { compilerCreateMsMax: createMs, schemas: out };
}

const loadBefore = loadavg();
const plain = await engine(false);
const jumping = await engine(true);
const results: Record<string, unknown> = {};
try {
  // Warm both (XGrammar's first compile, the wasm kernels' first calls).
  await runBatch(plain, 'schema', 1, -1);
  await runBatch(jumping, 'schema_jump_forward', 1, -1);
  for (const batch of batches) {
    const perRound: Record<string, unknown>[] = [];
    const constrainedRatio: number[] = [];
    const jumpRatio: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length]!);
      const r: Record<string, Awaited<ReturnType<typeof runBatch>>> = {};
      for (const v of order) {
        r[v] = await runBatch(v === 'schema_jump_forward' ? jumping : plain, v, batch, round);
      }
      constrainedRatio.push(
        r.schema!.decodeTokensPerSecond / r.unconstrained!.decodeTokensPerSecond,
      );
      jumpRatio.push(
        r.schema_jump_forward!.decodeTokensPerSecond / r.schema!.decodeTokensPerSecond,
      );
      perRound.push({ order, ...r, loadavg: loadavg() });
    }
    results[`batch_${batch}`] = {
      rounds: perRound,
      schema_over_unconstrained: constrainedRatio,
      jump_forward_over_schema: jumpRatio,
      median_schema_over_unconstrained: median(constrainedRatio),
      median_jump_forward_over_schema: median(jumpRatio),
    };
  }
  results.compile = await compileTimes(plain);
} finally {
  await plain.close();
  await jumping.close();
}
console.log(
  JSON.stringify(
    {
      setup: { gguf, backend: 'wasm', threads, rounds, batches, unconstrainedTokens: freeTokens },
      loadavg: { before: loadBefore, after: loadavg() },
      ...results,
    },
    null,
    2,
  ),
);
