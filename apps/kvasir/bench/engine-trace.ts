// `pnpm --filter kvasir exec tsx bench/engine-trace.ts [--scenarios N] [--json]`: a behaviour
// fingerprint of the whole engine for refactors that must not change behaviour. The real engine
// (scheduler, allocator, connectors, the plain TypeScript backend on the seeded random-weight
// model) runs N seeded random scenarios on a cache small enough to preempt (recompute and swap);
// every plan the scheduler makes, every token, finish reason and logprob, and the final metrics
// are hashed. Run it before and after a refactor: the hashes must be equal. `outputs` hashes only
// what clients see (tokens, text, finish reasons), which holds even when the loop's timing changes.

import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GenerationRequest } from '@kvasir/server/spec';
import { buildEngine, parseEngineConfig, seededRandom } from '../src/index.js';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const scenarios = arg('--scenarios', 12);

function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, v) => {
    if (ArrayBuffer.isView(v)) return Array.from(v as unknown as ArrayLike<number>);
    if (v instanceof Map) return [...v.entries()];
    if (v instanceof Set) return [...v.values()];
    if (typeof v === 'number' && !Number.isInteger(v)) return Number(v.toPrecision(9));
    return v;
  });
}

const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-trace-'));
const all = createHash('sha256');
const outputsOnly = createHash('sha256');
const perScenario: string[] = [];
let preemptions = 0;
try {
  for (let s = 0; s < scenarios; s++) {
    const rand = seededRandom(1000 + s);
    const pick = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
    const swap = s % 2 === 1;
    const built = await buildEngine(
      parseEngineConfig({
        model: 'random',
        backend: 'cpu',
        cacheDir,
        numGpuBlocks: 14,
        blockSize: 8,
        maxNumSeqs: 4,
        maxNumBatchedTokens: 48,
        ...(swap ? { preemptionMode: 'swap', offload: { hostBytes: 8 * 1024 * 1024 } } : {}),
      }),
    );
    const { engine } = built;
    const hash = createHash('sha256');
    const scheduler = engine.scheduler;
    const schedule = scheduler.schedule.bind(scheduler);
    scheduler.schedule = () => {
      const plan = schedule();
      hash.update(stableJson(plan));
      return plan;
    };
    const shared = Array.from({ length: pick(0, 20) }, () => pick(3, 500));
    const waves = pick(1, 3);
    for (let w = 0; w < waves; w++) {
      const requests: GenerationRequest[] = Array.from({ length: pick(1, 6) }, (_, i) => ({
        id: `s${s}w${w}r${i}`,
        model: engine.modelCard.id,
        promptTokens: [
          ...(rand() < 0.5 ? shared : []),
          ...Array.from({ length: pick(1, 30) }, () => pick(3, 500)),
        ],
        n: pick(1, 2),
        maxTokens: pick(1, 20),
        sampling: {
          temperature: rand() < 0.6 ? 0 : 1,
          topP: 1,
          topK: 0,
          minP: 0,
          presencePenalty: 0,
          frequencyPenalty: 0,
          repetitionPenalty: 1,
          seed: pick(0, 1e6),
        },
        ...(rand() < 0.3 ? { logprobs: 2 } : {}),
        stopTokenIds: [],
        ignoreEos: true,
      }));
      const streams = await Promise.all(
        requests.map((r) => engine.generate(r, new AbortController().signal)),
      );
      const results = await Promise.all(
        streams.map(async (stream) => {
          const events = [];
          for await (const event of stream) events.push(event);
          return events;
        }),
      );
      for (const [i, events] of results.entries()) {
        const seen = stableJson(events);
        hash.update(seen);
        outputsOnly.update(
          stableJson(
            events.map((e) =>
              e.kind === 'delta'
                ? [e.index, e.tokenIds, e.text, e.finishReason]
                : e.kind === 'usage'
                  ? [e.promptTokens, e.completionTokens]
                  : e.kind,
            ),
          ),
        );
        outputsOnly.update(requests[i]!.id);
      }
    }
    const stats = engine.stats();
    for (const count of Object.values(stats.preemptions)) preemptions += count;
    hash.update(stableJson(stats));
    await built.close();
    const digest = hash.digest('hex');
    perScenario.push(digest.slice(0, 16));
    all.update(digest);
  }
} finally {
  rmSync(cacheDir, { recursive: true, force: true });
}

const report = {
  scenarios,
  preemptions,
  trace: all.digest('hex'),
  outputs: outputsOnly.digest('hex'),
  perScenario,
};
console.log(
  process.argv.includes('--json')
    ? JSON.stringify(report)
    : `trace ${report.trace}\noutputs ${report.outputs}`,
);
