// Writes the wasm comparison model: a seeded random-weight Llama of about 110M parameters
// (hidden 768, 12 layers, 12 heads, MLP 2048, vocab 32000, tied) as a GGUF file; with an
// architecture, the same shape as qwen3 (Q/K norm) or smollm3 (NoPE every fourth layer), or as
// qwen3moe: each MLP 16 experts of width 256 of which a token takes 4 (Qwen3-30B-A3B's shape
// scaled down: 166M parameters, 81M of them active per token, embedding included), or as gemma3
// (GELU, sandwich norms, layers 0-4 and 6-10 sliding over 512 positions, 5 and 11 global), or as
// gpt-oss (qwen3moe's experts with biases and OpenAI's SwiGLU, attention sinks, even layers
// sliding over 128 positions, untied; llama-quantize's MXFP4_MOE of it is how gpt-oss ships), or
// as phi3 (Phi-4-mini's: fused QKV and gate/up, 48 of 64 dims rotated, LongRoPE's long factors
// over 512 original positions, attention factor 1.19).
//   tsx make-random-gguf.ts <out.gguf> [F16|Q8_0] [kv heads] [llama|qwen3|smollm3|qwen3moe|gemma3|gpt-oss|phi3]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LLAMA_110M } from '../../packages/model/bench/plans.js';
import { makeModelConfig } from '../../packages/model/src/config.js';
import { convertToGguf } from '../../packages/model/src/formats/gguf/convert.js';
import { writeRandomCheckpoint } from '../../packages/model/src/formats/random-checkpoint.js';

const USAGE =
  'usage: make-random-gguf.ts <out.gguf> [F16|Q8_0] [kv heads] [llama|qwen3|smollm3|qwen3moe|gemma3|gpt-oss|phi3]';
const [out, dtype = 'F16', kvHeads = '12', arch = 'llama'] = process.argv.slice(2);
if (!out) fail(USAGE);
const ARCHS = ['llama', 'qwen3', 'smollm3', 'qwen3moe', 'gemma3', 'gpt-oss', 'phi3'] as const;
if (!(ARCHS as readonly string[]).includes(arch)) fail(USAGE);
// The comparison's other files are llama-quantize's, made from this F16 file as llama.cpp's
// users make theirs (build.sh builds it).
if (dtype !== 'F16' && dtype !== 'Q8_0') {
  fail(
    `make-random-gguf: dtype ${JSON.stringify(dtype)} is not written here (F16 or Q8_0). ` +
      'Q4_K_M and the other llama.cpp presets come from the F16 file: ' +
      '`llama-quantize model-F16.gguf model-Q4_K_M.gguf Q4_K_M` (tooling/llama.cpp/build.sh builds it).',
  );
}
const config = makeModelConfig({
  ...LLAMA_110M,
  numKvHeads: Number(kvHeads),
  architecture: arch as (typeof ARCHS)[number],
  ...(arch === 'qwen3moe'
    ? {
        moe: {
          numExperts: 16,
          numExpertsPerToken: 4,
          expertIntermediateSize: 256,
          normTopkProb: true,
        },
      }
    : {}),
  ...(arch === 'gpt-oss'
    ? {
        // llama.cpp's gpt-oss loader requires output.weight.
        tieWordEmbeddings: false,
        intermediateSize: 256,
        moe: {
          numExperts: 16,
          numExpertsPerToken: 4,
          expertIntermediateSize: 256,
          normTopkProb: true,
          expertBias: true,
          activation: 'swiglu-oai' as const,
        },
      }
    : {}),
  ...(arch === 'phi3'
    ? {
        rotaryDim: 48,
        ropeScaling: {
          type: 'longrope' as const,
          shortFactors: Array.from({ length: 24 }, (_, i) => 1 + i / 24),
          longFactors: Array.from({ length: 24 }, (_, i) => 1 + (i * i) / 8),
          originalMaxPositionEmbeddings: 512,
        },
        ropeAttentionFactor: 1.19,
      }
    : {}),
});
const dir = await mkdtemp(join(tmpdir(), 'kvasir-110m-'));
try {
  await writeRandomCheckpoint(dir, config, 18);
  await convertToGguf(dir, out, { dtype });
} finally {
  await rm(dir, { recursive: true, force: true });
}

/** Prints `message` and exits 1: a usage mistake, not a crash, so no stack trace. */
function fail(message: string): never {
  console.error(message);
  process.exit(1);
}
