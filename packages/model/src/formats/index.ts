// `@kvasir/model/formats`: the checkpoint formats themselves (safetensors, GGUF, tensor names,
// element types) and building tokenizer files. Opening a checkpoint for a model is
// `openCheckpoint` in the main entry.

export type {
  ByteLevelBpe,
  ByteLevelTokenizerConfigSpec,
  ByteLevelTokenizerSpec,
} from '../tokenizer/byte-level-bpe.js';
export {
  buildByteLevelTokenizerConfig,
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
  trainByteLevelBpe,
} from '../tokenizer/byte-level-bpe.js';
export type { GgufTokenizerJson } from '../tokenizer/gguf-tokenizer.js';
export {
  ggufTokenizerMetadata,
  LLAMA3_SPLIT_PATTERN,
  QWEN2_SPLIT_PATTERN,
  tokenizerJsonFromGguf,
} from '../tokenizer/gguf-tokenizer.js';
export type { CheckpointReader, PositionalSource, TensorInfo } from './checkpoint-reader.js';
export { validateCheckpointTensors } from './checkpoint-reader.js';
export { meanPoolHeads } from './convert-gqa.js';
export type { TensorDtype } from './dtype.js';
export {
  bf16BitsToF32,
  decodeToF32,
  dequantizeQ8_0,
  dtypeBitsPerWeight,
  dtypeByteLength,
  encodeFromF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  isBlockDtype,
  Q8_0_BLOCK_BYTES,
  Q8_0_BLOCK_VALUES,
  quantizeQ8_0,
} from './dtype.js';
export { configFromGguf } from './gguf/config-from-metadata.js';
export type { ConvertToGgufOptions } from './gguf/convert.js';
export { convertToGguf } from './gguf/convert.js';
export type { GgufHeader, GgufTensorEntry } from './gguf/header.js';
export { readGgufHeader } from './gguf/header.js';
export { permuteQkRows, unpermuteQkRows } from './gguf/qk-permute.js';
export { openGgufCheckpoint } from './gguf/reader.js';
export { ggufToHfName, hfToGgufName } from './gguf/tensor-names.js';
export type { GgufTypedValue, GgufValueType } from './gguf/value-types.js';
export type { GgufTensorToWrite } from './gguf/writer.js';
export { writeGguf } from './gguf/writer.js';
export { randomTensors } from './random-checkpoint.js';
export type { SafetensorsEntry, SafetensorsHeader } from './safetensors.js';
export {
  openSafetensorsCheckpoint,
  readSafetensorsHeader,
  writeSafetensors,
} from './safetensors.js';
export type { TensorToWrite } from './tensor-write.js';
export type { WeightSummary, WeightTypeCount } from './weight-summary.js';
export { summarizeWeights } from './weight-summary.js';
