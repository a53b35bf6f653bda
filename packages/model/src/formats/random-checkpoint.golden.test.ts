import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseHfConfig, toHfConfig } from '../config.js';
import golden from '../fixtures/golden-logits.json' with { type: 'json' };
import { writeRandomCheckpoint } from './random-checkpoint.js';

describe('golden fixture', () => {
  it('regenerates bit-identical checkpoints from its seeds, so its logits stay valid', async () => {
    expect(golden.cases.length).toBeGreaterThanOrEqual(3);
    for (const c of golden.cases) {
      const dir = await mkdtemp(join(tmpdir(), 'kvasir-golden-'));
      try {
        const config = parseHfConfig(c.config);
        const written = await writeRandomCheckpoint(dir, config, c.seed);
        expect(toHfConfig(written.config)).toEqual(c.config);
        const digest = createHash('sha256')
          .update(await readFile(join(dir, 'model.safetensors')))
          .digest('hex');
        expect(digest, c.name).toBe(c.weightsSha256);
        expect(c.logits.length).toBe(c.tokenIds.length);
        for (const row of c.logits) {
          expect(row.length).toBe(config.vocabSize);
          expect(row.every((v) => Number.isFinite(v))).toBe(true);
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }
  });
});
