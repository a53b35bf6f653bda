export {
  findMaxRate,
  type MaxRateOptions,
  type MaxRateResult,
  type RateProbe,
} from './capacity.js';
export {
  type CostModelOptions,
  type StepCost,
  StepCostModel,
  type StepShape,
} from './cost-model.js';
export {
  type CapacityOptions,
  HARDWARE,
  type HardwareName,
  type HardwareProfile,
  type KvCapacity,
  kvCapacity,
  MODELS,
  type ModelName,
  type ModelProfile,
  modelKvLayout,
  resolveHardware,
  resolveModel,
} from './profiles.js';
export { Rng } from './rng.js';
export {
  type SimulationOptions,
  type SimulationResult,
  type SystemKind,
  simulate,
} from './simulate.js';
export { generateWorkload, type SimRequest, type WorkloadSpec } from './workloads.js';
