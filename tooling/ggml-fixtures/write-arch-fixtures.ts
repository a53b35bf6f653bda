// Writes the architecture fixture GGUFs (packages/model/src/testing/arch-fixtures.ts:
// seeded weights, @kvasir/model's converter and writer, llama.cpp's vocabularies cut by
// make_tokenizer_fixtures.py) into <dir>, and <dir>/fixtures.json: per file its name, path,
// SHA-256, the conversation to prompt with and the llama-quantize types to record. Run by make_arch_fixtures.sh through tsx.
//   pnpm --filter @kvasir/model exec tsx ../../tooling/ggml-fixtures/write-arch-fixtures.ts <dir>
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ARCH_FIXTURES, writeArchFixture } from '../../packages/model/src/testing/arch-fixtures.js';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: write-arch-fixtures.ts <dir>');
  process.exit(2);
}
const out = [];
for (const fx of ARCH_FIXTURES) {
  const path = resolve(join(dir, `${fx.name}.gguf`));
  const { sha256 } = await writeArchFixture(fx, path);
  out.push({
    name: fx.name,
    path,
    sha256,
    messages: fx.messages,
    quantized: fx.quantized ?? [],
  });
}
await writeFile(join(dir, 'fixtures.json'), JSON.stringify(out, null, 1));
console.log(`wrote ${out.map((f) => f.name).join(', ')} in ${dir}`);
