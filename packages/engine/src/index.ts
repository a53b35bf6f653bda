export type { TemplateMessage } from './chat-template-messages.js';
export { templateMessage } from './chat-template-messages.js';
export type { PrefixOffloadStats } from './engine.js';
export { KvasirEngine, type KvasirEngineOptions } from './engine.js';
export type { ConnectorFailure } from './engine-connectors.js';
export { blockIoOf, createEngineConnectors, EngineConnectors } from './engine-connectors.js';
export type { EngineSettings } from './engine-settings.js';
export { DEFAULT_ENGINE_SETTINGS, engineSettings } from './engine-settings.js';
export type { KvasirEngineErrorCode } from './errors.js';
export { describeError, isDeviceLost, KvasirEngineError } from './errors.js';
export { forcedTokens } from './forced-tokens.js';
export type { KvBlockState, KvSnapshot, KvSnapshotRequest } from './kv-snapshot.js';
export { blockState, kvSnapshot } from './kv-snapshot.js';
export type {
  DeviceMemoryInput,
  DeviceMemoryPlan,
  DeviceMemorySource,
  MemoryPlan,
  MemoryPlanInput,
  MemorySource,
} from './memory-plan.js';
export {
  budgetWords,
  deviceBudgetText,
  deviceMemory,
  formatBytes,
  planMemory,
  WEBGPU_DEFAULT_MEMORY_BYTES,
} from './memory-plan.js';
export type { OffThreadEncoder } from './model-adapter.js';
export {
  kvCompressionLimitsOf,
  kvLayoutFor,
  runnerForModel,
  textCodecFor,
} from './model-adapter.js';
export type {
  IncrementalDecoder,
  KvCompressionLimits,
  ModelFacts,
  ModelRunner,
  TextCodec,
} from './model-runner.js';
export type { OffloadTiers } from './offload-tiers.js';
export { isHostOnly, swapSpaceBlocks } from './offload-tiers.js';
export { guardEvictionPolicy, loadEvictionPolicy } from './plugins/eviction.js';
export type { KvCompressionSetup } from './plugins/kv-compression.js';
export {
  checkDefaultCompression,
  kvCompressionSetup,
  loadKvCompression,
  parseKvCompressionSetting,
} from './plugins/kv-compression.js';
export { guardKvConnector, loadKvConnectors } from './plugins/kv-connector.js';
export { DEFAULT_PLUGIN_BUDGET_MS, PluginGuard } from './plugins/plugin-guard.js';
export type { PluginKind, PluginSource } from './plugins/plugin-loader.js';
export {
  loadPlugin,
  PLUGIN_IMPORT_TIMEOUT_MS,
  URL_PLUGIN_SOURCE,
} from './plugins/plugin-loader.js';
export { createScheduler, engineStats } from './scheduler-setup.js';
export type { StopMatchResult } from './stop-strings.js';
export { StopStringMatcher } from './stop-strings.js';
