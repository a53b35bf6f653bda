export {
  findMaxRate,
  type MaxRateOptions,
  type MaxRateResult,
  type RateProbe,
} from './capacity';
export {
  type CostModelOptions,
  type StepCost,
  StepCostModel,
  type StepShape,
} from './cost-model';
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
} from './profiles';
export { Rng } from './rng';
export {
  type SimulationOptions,
  type SimulationResult,
  type SystemKind,
  simulate,
} from './simulate';
export { generateWorkload, type SimRequest, type WorkloadSpec } from './workloads';
