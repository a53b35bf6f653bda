export { ggmlDot, ggmlMatVec } from './dot.js';
export {
  type WgslGgmlOptions,
  wgslGgmlDecodeName,
  wgslGgmlDecoders,
  wgslGgmlLoad4,
  wgslGgmlReaders,
} from './ggml-decode.wgsl.js';
export { IQ4_NL_VALUES } from './iq4-nl.js';
export { MXFP4_VALUES } from './mxfp4.js';
export {
  GGML_BLOCK_FORMATS,
  GGML_TYPE_IDS,
  type GgmlBlockFormat,
  type GgmlBlockType,
  type GgmlDequantize,
  type GgmlQuantize,
  type GgmlTypeName,
  ggmlBlockFormat,
  ggmlRowBytes,
  ggmlTypeName,
  isGgmlBlockType,
} from './types.js';
