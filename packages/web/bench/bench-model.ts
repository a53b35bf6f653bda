// The benchmark's model: a GGUF given on the command line, or a seeded random-weight Llama of
// about 110M parameters (the shape packages/model/bench and tooling/llama.cpp compare on), Q8_0,
// made once under .kvasir-cache/.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import { convertToGguf } from '@kvasir/model/formats';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../../..');

export async function benchModel(path?: string): Promise<{ name: string; bytes: Uint8Array }> {
  if (path) return { name: path, bytes: new Uint8Array(await readFile(path)) };
  const out = join(ROOT, '.kvasir-cache', 'web-bench-llama110m-Q8_0.gguf');
  if (!existsSync(out)) {
    await mkdir(dirname(out), { recursive: true });
    const tmp = await mkdtemp(join(tmpdir(), 'kvasir-web-bench-'));
    try {
      const config = makeModelConfig({
        hiddenSize: 768,
        intermediateSize: 2048,
        numLayers: 12,
        numHeads: 12,
        numKvHeads: 12,
        vocabSize: 32000,
        tieWordEmbeddings: true,
        maxPositionEmbeddings: 2048,
      });
      await writeRandomCheckpoint(join(tmp, 'hf'), config, 110);
      await convertToGguf(join(tmp, 'hf'), out, { dtype: 'Q8_0' });
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }
  return { name: 'random llama 110M Q8_0 (seed 110)', bytes: new Uint8Array(await readFile(out)) };
}
