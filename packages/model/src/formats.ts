// `@kvasir/model/formats`: the checkpoint formats themselves (safetensors, GGUF, tensor names,
// element types) and building tokenizer files. Opening a checkpoint for a model is
// `openCheckpoint` in the main entry.

export type {
  ByteLevelBpe,
  ByteLevelTokenizerConfigSpec,
  ByteLevelTokenizerSpec,
} from './formats/byte-level-bpe.js';
export {
  buildByteLevelTokenizerConfig,
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
  trainByteLevelBpe,
} from './formats/byte-level-bpe.js';
export type {
  CheckpointReader,
  PositionalSource,
  TensorInfo,
} from './formats/checkpoint-reader.js';
export { validateCheckpointTensors } from './formats/checkpoint-reader.js';
export { meanPoolHeads } from './formats/convert-gqa.js';
export type { TensorDtype } from './formats/dtype.js';
export {
  bf16BitsToF32,
  decodeToF32,
  dtypeBitsPerWeight,
  dtypeByteLength,
  encodeFromF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  isBlockDtype,
  Q8_0_BLOCK_BYTES,
  Q8_0_BLOCK_VALUES,
} from './formats/dtype.js';
export { configFromGguf } from './formats/gguf/config-from-metadata.js';
export type { ConvertToGgufOptions } from './formats/gguf/convert.js';
export { convertToGguf } from './formats/gguf/convert.js';
export type { GgufHeader, GgufTensorEntry } from './formats/gguf/header.js';
export { readGgufHeader } from './formats/gguf/header.js';
export { permuteQkRows, unpermuteQkRows } from './formats/gguf/qk-permute.js';
export { openGgufCheckpoint } from './formats/gguf/reader.js';
export { ggufToHfName, hfToGgufName } from './formats/gguf/tensor-names.js';
export type { GgufTokenizerJson } from './formats/gguf/tokenizer-metadata.js';
export {
  ggufTokenizerMetadata,
  LLAMA3_SPLIT_PATTERN,
  QWEN2_SPLIT_PATTERN,
  tokenizerJsonFromGguf,
} from './formats/gguf/tokenizer-metadata.js';
export type { GgufTypedValue, GgufValueType } from './formats/gguf/value-types.js';
export type { GgufTensorToWrite } from './formats/gguf/writer.js';
export { writeGguf } from './formats/gguf/writer.js';
export { randomTensors } from './formats/random-checkpoint.js';
export type { SafetensorsEntry, SafetensorsHeader } from './formats/safetensors.js';
export {
  openSafetensorsCheckpoint,
  readSafetensorsHeader,
  writeSafetensors,
} from './formats/safetensors.js';
export type { TensorToWrite } from './formats/tensor-write.js';
export type { WeightSummary, WeightTypeCount } from './formats/weight-summary.js';
export { summarizeWeights } from './formats/weight-summary.js';
