/// <reference types="@webgpu/types" />
export { BufferUsage, MapMode } from './constants.js';
export {
  type CreateGpuOptions,
  createGpu,
  type GpuBackendOption,
  NO_ADAPTER_HELP,
} from './create-gpu.js';
export { GpuError, type GpuErrorCode } from './errors.js';
export {
  type BufferKind,
  type BufferOptions,
  Gpu,
  type GpuAdapterReport,
  type GpuBackend,
  type GpuBinding,
  type GpuDeviceReport,
  type GpuLimits,
  type GpuTiming,
  mesaVersion,
  type PipelineDescriptor,
  splitWorkgroups,
  type Workgroups,
} from './gpu.js';
export { UniformArena } from './uniform-arena.js';
