// The shapes `Gpu` reports and takes: backend, limits, adapter and device reports, buffer and
// pipeline descriptors, timings.

/**
 * The backend a {@link Gpu} runs on; `'browser'` when obtained from `navigator.gpu`, `'provided'`
 * from a caller's entry point (`createGpu({ webgpu })`).
 */
export type GpuBackend = 'vulkan' | 'metal' | 'd3d12' | 'opengles' | 'browser' | 'provided';

/** The device limits kernels plan with: the adapter's real values, requested at creation. */
export interface GpuLimits {
  maxComputeInvocationsPerWorkgroup: number;
  maxComputeWorkgroupSizeX: number;
  maxComputeWorkgroupSizeY: number;
  maxComputeWorkgroupSizeZ: number;
  maxComputeWorkgroupsPerDimension: number;
  maxComputeWorkgroupStorageSize: number;
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  maxStorageBuffersPerShaderStage: number;
  maxUniformBufferBindingSize: number;
  maxUniformBuffersPerShaderStage: number;
  maxBindGroups: number;
  minStorageBufferOffsetAlignment: number;
  minUniformBufferOffsetAlignment: number;
}

/** Which adapter a {@link Gpu} got, from `GPUAdapter.info`. Empty strings where unreported. */
export interface GpuAdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /**
   * Smallest and largest subgroup size of the adapter, where it reports them (adapters with
   * the `subgroups` feature: 32 on NVIDIA, 8 on lavapipe with AVX2); absent otherwise.
   */
  subgroupMinSize?: number;
  subgroupMaxSize?: number;
}

/**
 * The Mesa version of a Mesa driver (llvmpipe, and Mesa's GPU drivers), from the adapter's
 * description (e.g. `OpenGL ES 3.2 Mesa 22.3.6` or `Mesa 25.0.7-2~bpo12+1`); `undefined` for
 * other drivers. Kernels pick shapes by it where Mesa versions compile them very differently.
 */
export function mesaVersion(
  info: Pick<GpuAdapterReport, 'description' | 'device'>,
): readonly [major: number, minor: number, patch: number] | undefined {
  const m = /\bMesa (\d+)\.(\d+)(?:\.(\d+))?/.exec(`${info.description} ${info.device}`);
  if (m === null) return undefined;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

/** Everything `createGpu` learned about the device it opened. */
export interface GpuDeviceReport {
  adapterInfo: GpuAdapterReport;
  backend: GpuBackend;
  /** `'core'` or `'compatibility'` (OpenGL ES: no f16, fewer limits). */
  featureLevel: 'core' | 'compatibility';
  /** True for CPU rasterizers (llvmpipe, lavapipe, SwiftShader, WARP): correct but slow. */
  isSoftware: boolean;
  limits: GpuLimits;
  features: ReadonlySet<string>;
}

/** Named buffer kinds with the usage flags helpers need (copy in/out included). */
export type BufferKind = 'storage' | 'uniform' | 'readback' | 'upload';

/** Options of {@link Gpu.createBuffer}. */
export interface BufferOptions {
  /** Size in bytes (rounded up to a multiple of 4). Defaults to `data`'s size. */
  size?: number;
  /** Initial contents, written at creation. */
  data?: ArrayBufferView | ArrayBuffer;
  /** A kind, or raw `GPUBufferUsage` flags. Default `'storage'`. */
  usage?: BufferKind | number;
  /** Label shown in WebGPU error messages. */
  label?: string;
}

/** A buffer bound whole, or a range of one. */
export type GpuBinding = GPUBuffer | GPUBufferBinding;

/** Workgroup counts: `x`, or `[x, y, z]`. */
export type Workgroups = number | readonly [number, number?, number?];

/** A compute pipeline request; also the pipeline cache key. */
export interface PipelineDescriptor {
  /** WGSL source. */
  code: string;
  /** Entry point (default `'main'`). */
  entryPoint?: string;
  /** Values of WGSL `override` constants. */
  constants?: Readonly<Record<string, number>>;
  /** Label shown in errors. */
  label?: string;
}

/** A GPU time measurement and where it came from. */
export interface GpuTiming {
  /** Milliseconds. */
  ms: number;
  /**
   * `'timestamp'`: GPU timestamp queries around the work. `'wall-clock'`: host time from
   * submit to completion, which includes submission and synchronization overhead.
   */
  source: 'timestamp' | 'wall-clock';
}
