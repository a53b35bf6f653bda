import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TokenMatcher } from '@kvasir/model';
import type { GenerationRequest } from '@kvasir/server';
import type { OutputConstraint } from '@kvasir/server/spec';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { wrapNextMatchers } from '../testing/wrap-matchers.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// The token masks of a step overlap its forward pass on WebGPU (the software adapter here):
// the forward pass dispatches its work and waits for the device, and the masks are computed
// meanwhile, on this thread. The claim: every mask is computed while a forward pass is in
// flight, and the outputs are those of computing the masks first (the runner told that its
// forward pass holds the thread), token for token, beside an unconstrained neighbour.
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-overlap-'));
afterAll(async () => {
  await rm(cacheDir, { recursive: true, force: true });
});
afterEach(() => {
  vi.restoreAllMocks();
});

const CONSTRAINTS: readonly OutputConstraint[] = [
  {
    kind: 'json_schema',
    schema: {
      type: 'object',
      properties: {
        name: { type: 'string', maxLength: 6 },
        age: { type: 'integer', minimum: 0, maximum: 120 },
        tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
      },
      required: ['name', 'age', 'tags'],
      additionalProperties: false,
    },
  },
  { kind: 'regex', pattern: '(yes|no), because [a-z]{2,8}\\.' },
  { kind: 'json_object' },
];

/** Where mask computations ran: inside a forward pass's flight or outside it. */
interface Tally {
  inFlight: number;
  outside: number;
}

/** An engine on webgpu whose masks and forward passes are tallied. */
async function engine(overlap: boolean): Promise<{ built: BuiltEngine; tally: Tally }> {
  const tally: Tally = { inFlight: 0, outside: 0 };
  let flying = 0;
  wrapNextMatchers(
    (m): TokenMatcher => ({
      get length() {
        return m.length;
      },
      get isTerminated() {
        return m.isTerminated;
      },
      nextTokenBitmask() {
        if (flying > 0) tally.inFlight++;
        else tally.outside++;
        return m.nextTokenBitmask();
      },
      accept: (token) => m.accept(token),
      rollback: (count) => m.rollback(count),
      reset: () => m.reset(),
      forcedText: () => m.forcedText(),
      dispose: () => m.dispose(),
    }),
  );
  const built = await buildEngine(
    parseEngineConfig({
      backend: 'webgpu',
      cacheDir,
      model: 'random',
      numGpuBlocks: 64,
      maxNumSeqs: 8,
      jumpForward: false,
    }),
  );
  const runner = built.engine.runner as {
    forward: BuiltEngine['engine']['runner']['forward'];
    forwardLeavesThread?: boolean;
  };
  expect(runner.forwardLeavesThread).toBe(true);
  runner.forwardLeavesThread = overlap;
  const forward = runner.forward.bind(runner);
  runner.forward = async (plan) => {
    flying++;
    try {
      return await forward(plan);
    } finally {
      flying--;
    }
  };
  return { built, tally };
}

async function run(built: BuiltEngine): Promise<{ ids: number[]; text: string }[]> {
  const vocab = built.engine.modelCard.vocabSize!;
  const base = { model: built.engine.modelCard.id, stopTokenIds: [] };
  const sampling: GenerationRequest['sampling'] = {
    temperature: 0.8,
    topP: 0.95,
    topK: 0,
    minP: 0,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
  };
  const requests: GenerationRequest[] = CONSTRAINTS.map((constraint, i) => ({
    ...base,
    id: `c${i}`,
    promptTokens: Array.from({ length: 6 + i }, (_, k) => (k * 31 + i * 7 + 3) % vocab),
    n: 2,
    maxTokens: 48,
    sampling: { ...sampling, seed: 100 + i },
    ignoreEos: false,
    constraint,
  }));
  requests.push({
    ...base,
    id: 'neighbour',
    promptTokens: [5, 6, 7],
    n: 1,
    maxTokens: 40,
    sampling: { ...sampling, seed: 7 },
    ignoreEos: true,
  });
  const out = await Promise.all(
    requests.map(async (req) => {
      const choices = Array.from({ length: req.n }, () => ({ ids: [] as number[], text: '' }));
      for await (const event of await built.engine.generate(req, new AbortController().signal)) {
        if (event.kind !== 'delta') continue;
        choices[event.index]!.ids.push(...event.tokenIds);
        choices[event.index]!.text += event.text;
      }
      return choices;
    }),
  );
  return out.flat();
}

describe('mask computation beside the forward pass (webgpu)', () => {
  it('computes every mask while a forward pass is in flight, with the outputs of computing them first', async () => {
    const first = await engine(false);
    const overlapped = await engine(true);
    try {
      const expected = await run(first.built);
      const actual = await run(overlapped.built);
      expect(actual).toEqual(expected);
      expect(JSON.parse(actual[0]!.text)).toHaveProperty('age');
      // Masks were computed (about one per constrained token), all of them in flight when
      // overlapping, none when not.
      expect(overlapped.tally.outside).toBe(0);
      expect(overlapped.tally.inFlight).toBeGreaterThan(30);
      expect(first.tally).toEqual({ inFlight: 0, outside: overlapped.tally.inFlight });
    } finally {
      await first.built.close();
      await overlapped.built.close();
    }
  });
});
