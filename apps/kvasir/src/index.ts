export type {
  IncrementalDecoder,
  KvasirEngineOptions,
  MemoryPlan,
  MemoryPlanInput,
  MemorySource,
  ModelFacts,
  ModelRunner,
  PrefixOffloadStats,
  TextCodec,
} from '@kvasir/engine';
export { formatBytes, KvasirEngine, loadEvictionPolicy, planMemory } from '@kvasir/engine';
export type { LoadOptions, LoadReport, RequestRecord } from './bench/load.js';
export { runLoad } from './bench/load.js';
export { seededRandom, syntheticPrompts } from './bench/prompts.js';
export type { Summary } from './bench/stats.js';
export { percentile, summarize } from './bench/stats.js';
export { renderLoadChart } from './bench/svg.js';
export type { EngineConfig, EngineConfigInput } from './config.js';
export {
  defaultCacheDir,
  engineConfigSchema,
  parseEngineConfig,
  readConfigFile,
} from './config.js';
export {
  DEFAULT_MODEL_NAME,
  DEFAULT_MODEL_PATH,
  describeDefaultModel,
  ensureRandomModel,
  RANDOM_MODEL,
  RANDOM_MODEL_NAME,
  randomModelConfig,
} from './default-model.js';
export type { BuiltEngine } from './engine/bootstrap.js';
export { buildEngine, loadAndPlan, resolveModelPath } from './engine/bootstrap.js';
export type { LoadedModel } from './engine/load-model-runner.js';
export { loadModelRunner } from './engine/load-model-runner.js';
export type { KvasirAppErrorCode } from './errors.js';
export { KvasirAppError } from './errors.js';
