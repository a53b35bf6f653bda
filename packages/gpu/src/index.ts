/// <reference types="@webgpu/types" />
export { BufferUsage, MapMode } from './constants.js';
export {
  type CreateGpuOptions,
  createGpu,
  type GpuBackendOption,
  NO_ADAPTER_HELP,
} from './create-gpu.js';
export { GpuError, type GpuErrorCode } from './errors.js';
export { Gpu } from './gpu.js';
export { splitWorkgroups } from './gpu-helpers.js';
export {
  type BufferKind,
  type BufferOptions,
  type GpuAdapterReport,
  type GpuBackend,
  type GpuBinding,
  type GpuDeviceReport,
  type GpuLimits,
  type GpuTiming,
  mesaVersion,
  type PipelineDescriptor,
  type Workgroups,
} from './gpu-types.js';
export { UniformArena } from './uniform-arena.js';
