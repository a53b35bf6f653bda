// Where a constrained step's time goes: the forward pass, XGrammar's mask computation, and the
// rest (sampling, streaming, scheduling), per engine step, with `--batch` requests constrained
// by the JSON schema of 8 fixed keys of structured-output.ts at once (greedy, the 110M GGUF on wasm). Mask time is the
// time spent inside XGrammar's native GetNextTokenBitmask (timed around the embind call, so
// nothing else is counted); forward time is the time from the runner's forward call to its
// result, less the mask time spent inside that window (the masks run on the main thread
// between the forward's microtasks, the forward on the same thread as wasm thread 0).
//
//   pnpm turbo run build --filter=kvasir
//   cd apps/kvasir && npx tsx bench/mask-profile.ts \
//     --gguf ../../.kvasir-cache/issue18-110m-Q8_0-kv12.gguf [--threads 2] [--batches 1,16]
//     [--jump-forward]
//
// Prints one JSON object: per batch size, the steps, the sums and per-step medians of each
// part, the masks' share of the decode steps, the same for the requests unconstrained (48
// tokens each, right after), and the load average before and after.
import { readFileSync } from 'node:fs';
import {
  loadXGrammar,
  type TokenVocabulary,
  XGrammarCompiler,
  type XGrammarInstance,
} from '@kvasir/model';
import type { GenerationRequest } from '@kvasir/server';
import { buildEngine, parseEngineConfig } from '../src/index.js';
import { greedyRequest } from '../src/testing/greedy-request.js';
import { FIXED_KEYS } from './fixed-keys.js';

const argv = process.argv.slice(2);
const arg = (name: string, fallback: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1]! : fallback;
};
const gguf = arg('--gguf', '');
if (!gguf) throw new Error('usage: mask-profile.ts --gguf <file.gguf>');
const threads = Number(arg('--threads', '2'));
const batches = arg('--batches', '1,16').split(',').map(Number);
const jumpForward = argv.includes('--jump-forward');

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const median = (xs: number[]) =>
  xs.length === 0 ? 0 : [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Mask computations, as [start, end] times. */
const maskCalls: [number, number][] = [];

/** XGrammar with each matcher's native GetNextTokenBitmask timed. */
function timedXGrammar(): XGrammarInstance {
  const instance = loadXGrammar();
  const proto = instance.xgrammar.GrammarMatcher.prototype as unknown as {
    getNextTokenBitmask(this: { handle: Record<string, unknown> }): Promise<Int32Array>;
  };
  const original = proto.getNextTokenBitmask;
  proto.getNextTokenBitmask = function (this: { handle: Record<string, unknown> }) {
    const handle = this.handle;
    if (!handle.timed) {
      const native = (handle.GetNextTokenBitmask as (n: number) => unknown).bind(handle);
      handle.GetNextTokenBitmask = (n: number) => {
        const t0 = performance.now();
        const out = native(n);
        maskCalls.push([t0, performance.now()]);
        return out;
      };
      handle.timed = true;
    }
    return original.call(this);
  };
  return instance;
}

const create = XGrammarCompiler.create.bind(XGrammarCompiler);
XGrammarCompiler.create = (vocab: TokenVocabulary, options = {}) =>
  create(vocab, { ...options, load: timedXGrammar });

const built = await buildEngine(
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
const engine = built.engine;
const runner = engine.runner as { forward: typeof engine.runner.forward };
const forward = runner.forward.bind(runner);
/** Each forward call: [start, end]. */
const forwards: [number, number][] = [];
runner.forward = async (plan) => {
  const t0 = performance.now();
  const out = await forward(plan);
  forwards.push([t0, performance.now()]);
  return out;
};

let nextId = 0;
async function run(batch: number, constrained: boolean) {
  const vocab = engine.modelCard.vocabSize!;
  const requests: GenerationRequest[] = Array.from({ length: batch }, (_, i) => ({
    ...greedyRequest(
      `mp-${nextId++}`,
      Array.from({ length: 16 }, (_, k) => (i * 131 + k * 17 + nextId * 7 + 1) % vocab),
      constrained ? 256 : 48,
      engine.modelCard.id,
    ),
    ignoreEos: !constrained,
    ...(constrained ? { constraint: { kind: 'json_schema', schema: FIXED_KEYS } as const } : {}),
  }));
  await Promise.all(
    requests.map(async (req) => {
      for await (const _ of await engine.generate(req, new AbortController().signal));
    }),
  );
}

const loadBefore = loadavg();
const results: Record<string, unknown> = {};
try {
  await run(1, true); // warm: XGrammar's compile, the kernels' first calls
  for (const [batch, constrained] of batches.flatMap((b) => [
    [b, true] as const,
    [b, false] as const,
  ])) {
    maskCalls.length = 0;
    forwards.length = 0;
    const started = performance.now();
    await run(batch, constrained);
    const wall = performance.now() - started;
    const steps: { step: number; forward: number; masks: number; rest: number }[] = [];
    for (let i = 0; i < forwards.length; i++) {
      const [f0, f1] = forwards[i]!;
      const next = forwards[i + 1]?.[0] ?? performance.now();
      const inWindow = sum(maskCalls.filter(([a]) => a >= f0 && a < f1).map(([a, b]) => b - a));
      const after = sum(maskCalls.filter(([a]) => a >= f1 && a < next).map(([a, b]) => b - a));
      steps.push({
        step: next - f0,
        forward: f1 - f0 - inWindow,
        masks: inWindow + after,
        rest: next - f1 - after,
      });
    }
    // Decode steps: after the prompts' prefill (the first step here).
    const decode = steps.slice(1);
    results[`batch_${batch}${constrained ? '' : '_unconstrained'}`] = {
      wallMs: wall,
      steps: steps.length,
      maskCalls: maskCalls.length,
      totalMs: {
        forward: sum(steps.map((s) => s.forward)),
        masks: sum(steps.map((s) => s.masks)),
        rest: sum(steps.map((s) => s.rest)),
      },
      decodeSteps: decode.length,
      medianPerStepMs: {
        step: median(decode.map((s) => s.step)),
        forward: median(decode.map((s) => s.forward)),
        masks: median(decode.map((s) => s.masks)),
        rest: median(decode.map((s) => s.rest)),
      },
      medianMaskMs: median(maskCalls.map(([a, b]) => b - a)),
      maskShareOfDecodeSteps: sum(decode.map((s) => s.masks)) / sum(decode.map((s) => s.step)),
    };
  }
} finally {
  await built.close();
}
console.log(
  JSON.stringify(
    {
      setup: { gguf, backend: 'wasm', threads, batches, jumpForward },
      loadavg: { before: loadBefore, after: loadavg() },
      ...results,
    },
    null,
    2,
  ),
);
