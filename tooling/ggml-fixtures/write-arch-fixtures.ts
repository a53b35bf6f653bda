// Writes the architecture fixture GGUFs (packages/model/src/testing/arch-fixtures.ts:
// seeded weights, @kvasir/model's converter and writer, llama.cpp's vocabularies cut by
// make_tokenizer_fixtures.py) into <dir>, and <dir>/fixtures.json: per file its name, path,
// SHA-256, the conversation to prompt with and the llama-quantize types to record. Run by
// make_arch_fixtures.sh through tsx. With a type (F16, Q8_0, Q4_K_M), it writes instead the
// family fixtures in that type, as llama-quantize made them (<name>-<type>.gguf: the tensor
// types of the recorded file, whose bytes the model tests check): what kvasir serve's tests serve.
//   pnpm --filter @kvasir/model exec tsx ../../tooling/ggml-fixtures/write-arch-fixtures.ts <dir> [type]
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import {
  ARCH_FIXTURES,
  type QuantizedType,
  quantizedTensorTypes,
  writeArchFixture,
} from '../../packages/model/src/testing/arch-fixtures.js';

// --only=<name>[,<name>]: just those fixtures (a new one recorded without redoing the others);
// --seed=<n> with it: that seed instead of the fixture's (to search for one with clear margins).
const flags = new Map(
  process.argv
    .slice(2)
    .filter((a) => a.startsWith('--'))
    .map((a) => a.slice(2).split('=') as [string, string]),
);
const [dir, type] = process.argv.slice(2).filter((a) => !a.startsWith('--')) as [
  string | undefined,
  QuantizedType | undefined,
];
if (!dir) {
  console.error(
    'usage: write-arch-fixtures.ts <dir> [F16|Q8_0|Q4_K_M] [--only=<names>] [--seed=<n>]',
  );
  process.exit(2);
}
const only = flags.get('only')?.split(',');
const seed = only && flags.has('seed') ? Number(flags.get('seed')) : undefined;
const out = [];
for (const fx of ARCH_FIXTURES) {
  if (type && !fx.quantized?.includes(type)) continue;
  if (only && !only.includes(fx.name)) continue;
  const path = resolve(join(dir, type ? `${fx.name}-${type}.gguf` : `${fx.name}.gguf`));
  const types = type ? await quantizedTensorTypes(fx, type) : undefined;
  const { sha256 } = await writeArchFixture(
    seed === undefined ? fx : { ...fx, seed },
    path,
    undefined,
    types,
  );
  // A fixture whose experts ship in a block type (gpt-oss: MXFP4) also as all-F32, the
  // template dequantize_gguf.py fills with those blocks' values.
  let f32Path: string | undefined;
  if (fx.expertType && !type) {
    f32Path = resolve(join(dir, `${fx.name}-f32.gguf`));
    await writeArchFixture(seed === undefined ? fx : { ...fx, seed }, f32Path, undefined, {
      ...expertTypes(fx, 'F32'),
    });
  }
  out.push({
    name: fx.name,
    path,
    sha256,
    messages: fx.messages,
    quantized: fx.quantized ?? [],
    ...(f32Path ? { f32_path: f32Path } : {}),
  });
}
/** Every expert matrix of `fx` in `t`, by GGUF name. */
function expertTypes(fx: (typeof ARCH_FIXTURES)[number], t: 'F32'): Record<string, 'F32'> {
  const out: Record<string, 'F32'> = {};
  for (let l = 0; l < fx.config.numLayers; l++) {
    for (const p of ['gate', 'up', 'down']) out[`blk.${l}.ffn_${p}_exps.weight`] = t;
  }
  return out;
}

await writeFile(join(dir, 'fixtures.json'), JSON.stringify(out, null, 1));
console.log(`wrote ${out.map((f) => f.name).join(', ')} in ${dir}`);
