export type { LoadOptions, LoadReport, RequestRecord } from './bench/load.js';
export { runLoad } from './bench/load.js';
export { seededRandom, syntheticPrompts } from './bench/prompts.js';
export type { Summary } from './bench/stats.js';
export { percentile, summarize } from './bench/stats.js';
export { renderLoadChart } from './bench/svg.js';
export type { BuiltEngine } from './bootstrap.js';
export { buildEngine, loadAndPlan, resolveModelPath } from './bootstrap.js';
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
export type { KvasirEngineOptions, PrefixOffloadStats } from './engine.js';
export { KvasirEngine } from './engine.js';
export type { KvasirAppErrorCode } from './errors.js';
export { KvasirAppError } from './errors.js';
export { loadEvictionPolicy } from './eviction.js';
export type { MemoryPlan, MemoryPlanInput, MemorySource } from './memory-plan.js';
export { formatBytes, planMemory } from './memory-plan.js';
export type { LoadedModel } from './model-runner.js';
export { loadModelRunner } from './model-runner.js';
export type { IncrementalDecoder, ModelFacts, ModelRunner, TextCodec } from './runner.js';
