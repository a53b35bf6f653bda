// Writes the issue-18 comparison model: a seeded random-weight Llama of about 110M parameters
// (hidden 768, 12 layers, 12 heads, MLP 2048, vocab 32000, tied) as a GGUF file.
//   tsx make-random-gguf.ts <out.gguf> [F16|Q8_0] [kv heads]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLAMA_110M } from '../../packages/model/bench/plans.js';
import { makeModelConfig } from '../../packages/model/src/config.js';
import { convertToGguf } from '../../packages/model/src/formats/gguf/convert.js';
import { writeRandomCheckpoint } from '../../packages/model/src/formats/random-checkpoint.js';

const [out, dtype = 'F16', kvHeads = '12'] = process.argv.slice(2);
if (!out) throw new Error('usage: make-random-gguf.ts <out.gguf> [F16|Q8_0] [kv heads]');
const config = makeModelConfig({ ...LLAMA_110M, numKvHeads: Number(kvHeads) });
const dir = await mkdtemp(join(tmpdir(), 'kvasir-110m-'));
try {
  await writeRandomCheckpoint(dir, config, 18);
  await convertToGguf(dir, out, { dtype: dtype as 'F16' | 'Q8_0' });
} finally {
  await rm(dir, { recursive: true, force: true });
}
