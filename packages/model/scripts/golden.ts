/**
 * Regenerates src/fixtures/golden-logits.json: for each case, writes a random checkpoint with
 * writeRandomCheckpoint (seeded), runs the independent PyTorch forward in scripts/golden.py on
 * it, and records the config, seed, token ids, a digest of the weights and the logits.
 *
 *   pnpm --filter @kvasir/model exec tsx scripts/golden.ts
 *
 * Needs Debian's python3-torch (`apt-get install -y python3-torch`) on /usr/bin/python3, or set
 * KVASIR_GOLDEN_PYTHON to another interpreter with torch (numpy alone also works).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ModelConfig, makeModelConfig, toHfConfig } from '../src/config.js';
import { writeRandomCheckpoint } from '../src/formats/random-checkpoint.js';

const here = dirname(fileURLToPath(import.meta.url));
const python = process.env.KVASIR_GOLDEN_PYTHON ?? '/usr/bin/python3';

/** Token ids fed to every case: bos, "Hello w" as bytes, eot. */
const TOKENS = [256, 72, 101, 108, 108, 111, 32, 119, 260];

const CASES: { name: string; seed: number; config: ModelConfig }[] = [
  {
    name: 'llama-gqa-tied-llama3rope',
    seed: 1234,
    config: makeModelConfig({
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 2,
      vocabSize: 272,
      tieWordEmbeddings: true,
      rmsNormEps: 1e-5,
      ropeTheta: 10000,
      ropeScaling: {
        type: 'llama3',
        factor: 4,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 16,
      },
    }),
  },
  {
    name: 'qwen2-mqa-bias-untied',
    seed: 99,
    config: makeModelConfig({
      architecture: 'qwen2',
      hiddenSize: 64,
      intermediateSize: 96,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 1,
      vocabSize: 272,
      rmsNormEps: 1e-6,
      ropeTheta: 1000000,
    }),
  },
  {
    name: 'llama-mha-untied',
    seed: 7,
    config: makeModelConfig({
      hiddenSize: 64,
      intermediateSize: 160,
      numLayers: 3,
      numHeads: 2,
      numKvHeads: 2,
      vocabSize: 272,
      rmsNormEps: 1e-5,
      ropeTheta: 10000,
    }),
  },
];

const out: unknown[] = [];
for (const c of CASES) {
  const dir = await mkdtemp(join(tmpdir(), 'kvasir-golden-'));
  try {
    const { config } = await writeRandomCheckpoint(dir, c.config, c.seed);
    const weights = await readFile(join(dir, 'model.safetensors'));
    const result = JSON.parse(
      execFileSync(python, [join(here, 'golden.py'), dir, TOKENS.join(',')], {
        encoding: 'utf8',
        maxBuffer: 64 << 20,
      }),
    ) as { implementation: string; logits: number[][] };
    out.push({
      name: c.name,
      seed: c.seed,
      config: toHfConfig(config),
      weightsSha256: createHash('sha256').update(weights).digest('hex'),
      tokenIds: TOKENS,
      implementation: result.implementation,
      logits: result.logits,
    });
    console.log(
      `${c.name}: ${result.logits.length} positions × ${result.logits[0]?.length} logits (${result.implementation})`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
await writeFile(
  join(here, '..', 'src', 'fixtures', 'golden-logits.json'),
  `${JSON.stringify({ generator: 'packages/model/scripts/golden.py via scripts/golden.ts', dtype: 'F32', cases: out })}\n`,
);
