import { GpuError } from './errors.js';
import { Gpu } from './gpu.js';
import type { GpuAdapterReport, GpuBackend, GpuLimits } from './gpu-types.js';

/** Backends `createGpu` can be told to use. `'auto'` picks the platform's native one, then OpenGL ES. */
export type GpuBackendOption = 'auto' | 'vulkan' | 'metal' | 'd3d12' | 'opengles';

/** Options of {@link createGpu}. */
export interface CreateGpuOptions {
  /**
   * Force a backend (Node only). Default `'auto'`: Vulkan / Metal / D3D12 at the core feature
   * level, and when that yields no adapter, Dawn's OpenGL ES backend (Mesa llvmpipe on a
   * machine without a GPU) at the compatibility feature level.
   */
  backend?: GpuBackendOption;
  /** Passed to `requestAdapter`. */
  powerPreference?: GPUPowerPreference;
  /**
   * Feature level to request. Default: `'core'` for native backends, `'compatibility'` for
   * OpenGL ES (which cannot offer core).
   */
  featureLevel?: 'core' | 'compatibility';
  /**
   * Only accept an adapter whose device name or description contains this text
   * (case-insensitive), e.g. `'llvmpipe'` or `'NVIDIA'`.
   */
  adapterName?: string;
  /**
   * Extra Dawn instance options, e.g. `'enable-dawn-features=allow_unsafe_apis'` or
   * `'disable-dawn-features=timestamp_quantization'` (the latter is added by default).
   */
  dawnToggles?: readonly string[];
  /** Milliseconds to wait for one adapter request before treating it as failed (default 15 000). */
  adapterTimeoutMs?: number;
  /** Label of the device, shown in WebGPU error messages. */
  label?: string;
  /**
   * A WebGPU entry point to take the adapter from instead of finding one (then `backend` and
   * `dawnToggles` do not apply): in Node, an instance from the `webgpu` package's `create()`
   * made with your own options; in a browser, `navigator.gpu` is already the default. The
   * resulting {@link Gpu} keeps it alive and reports backend `'provided'`.
   */
  webgpu?: GPU;
}

const BACKENDS: readonly GpuBackendOption[] = ['auto', 'vulkan', 'metal', 'd3d12', 'opengles'];

/** The limits kernels need, requested at the adapter's real values instead of WebGPU defaults. */
const REQUESTED_LIMITS: readonly (keyof GpuLimits)[] = [
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxComputeWorkgroupStorageSize',
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxStorageBuffersPerShaderStage',
  'maxUniformBufferBindingSize',
  'maxUniformBuffersPerShaderStage',
  'maxBindGroups',
  'minStorageBufferOffsetAlignment',
  'minUniformBufferOffsetAlignment',
];

const OPTIONAL_FEATURES = [
  'timestamp-query',
  'shader-f16',
  'subgroups',
] as unknown as readonly GPUFeatureName[];

const SOFTWARE_ADAPTER = /llvmpipe|lavapipe|softpipe|swiftshader|basic render|\bwarp\b/i;

/** What to install, for the NO_ADAPTER message. */
export const NO_ADAPTER_HELP =
  'Install a GPU driver (Vulkan on Linux), or the software OpenGL ES stack for the llvmpipe ' +
  'fallback: `apt-get install libegl1 libegl-dev libgles2 libegl-mesa0 libgl1-mesa-dri` ' +
  '(Debian/Ubuntu; Dawn opens the unversioned libEGL.so, which Debian ships in libegl-dev).';

/**
 * Obtain a WebGPU device and wrap it in a {@link Gpu}.
 *
 * In Node it uses the npm package `webgpu` (Dawn); in a browser, `navigator.gpu`. Adapter order
 * with `backend: 'auto'`: the platform's native backend at the core feature level, then Dawn's
 * OpenGL ES backend at the compatibility level (setting `EGL_PLATFORM=surfaceless` when unset,
 * which Mesa needs without a display). The device is created with the adapter's real values
 * for the limits kernels need and with `timestamp-query` / `shader-f16` when offered.
 *
 * @example
 * ```ts
 * const gpu = await createGpu();
 * console.log(gpu.describe());
 * gpu.destroy();
 * ```
 * @throws {GpuError} `INVALID_OPTIONS` for an unknown backend; `NO_ADAPTER` (with what to
 *   install) when no adapter exists; `DEVICE_REQUEST_FAILED` when the device cannot be created.
 */
export async function createGpu(options: CreateGpuOptions = {}): Promise<Gpu> {
  const backend = options.backend ?? 'auto';
  if (!BACKENDS.includes(backend)) {
    throw new GpuError(
      'INVALID_OPTIONS',
      `Unknown backend '${String(backend)}'; expected one of ${BACKENDS.join(', ')}.`,
      { details: { backend } },
    );
  }
  if (
    options.featureLevel !== undefined &&
    !['core', 'compatibility'].includes(options.featureLevel)
  ) {
    throw new GpuError(
      'INVALID_OPTIONS',
      `Unknown featureLevel '${String(options.featureLevel)}'.`,
    );
  }
  const found =
    options.webgpu !== undefined
      ? await findAdapterOn(options.webgpu, 'provided', options)
      : isNode()
        ? await findNodeAdapter(backend, options)
        : await findBrowserAdapter(options);
  return openDevice(found, options);
}

interface FoundAdapter {
  adapter: GPUAdapter;
  instance: GPU | undefined;
  backend: GpuBackend;
  requestedLevel: 'core' | 'compatibility';
}

function isNode(): boolean {
  const proc = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof proc?.versions?.node === 'string';
}

function nativeBackend(): Exclude<GpuBackendOption, 'auto' | 'opengles'> {
  const platform = (globalThis as { process?: { platform?: string } }).process?.platform;
  if (platform === 'darwin') return 'metal';
  if (platform === 'win32') return 'd3d12';
  return 'vulkan';
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function matchesName(adapter: GPUAdapter, name: string | undefined): boolean {
  if (name === undefined) return true;
  const info = adapter.info;
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`;
  return text.toLowerCase().includes(name.toLowerCase());
}

async function findNodeAdapter(
  backend: GpuBackendOption,
  options: CreateGpuOptions,
): Promise<FoundAdapter> {
  let webgpu: { create: (opts: string[]) => GPU };
  try {
    // A variable specifier keeps browser bundlers from trying to bundle Dawn's native addon.
    const specifier = 'webgpu';
    webgpu = (await import(/* @vite-ignore */ specifier)) as { create: (opts: string[]) => GPU };
  } catch (cause) {
    throw new GpuError(
      'NO_ADAPTER',
      `The npm package 'webgpu' (Dawn) could not be loaded on ${process.platform}-${process.arch}. ${NO_ADAPTER_HELP}`,
      { cause },
    );
  }
  const toggles = [...(options.dawnToggles ?? [])];
  if (!toggles.some((t) => t.startsWith('disable-dawn-features='))) {
    // Dawn quantizes timestamps by default, which makes short kernels read as 0 ms.
    toggles.push('disable-dawn-features=timestamp_quantization');
  }
  const timeoutMs = options.adapterTimeoutMs ?? 15_000;
  const order: Exclude<GpuBackendOption, 'auto'>[] =
    backend === 'auto' ? [nativeBackend(), 'opengles'] : [backend];
  const tried: string[] = [];
  for (const b of order) {
    const level = options.featureLevel ?? (b === 'opengles' ? 'compatibility' : 'core');
    if (b === 'opengles' && process.env.EGL_PLATFORM === undefined) {
      // Mesa's EGL needs to be told there is no window system, or it finds no display.
      process.env.EGL_PLATFORM = 'surfaceless';
    }
    let adapter: GPUAdapter | null = null;
    let instance: GPU;
    try {
      instance = webgpu.create([`backend=${b}`, ...toggles]);
      const request: GPURequestAdapterOptions = { featureLevel: level };
      if (options.powerPreference !== undefined) request.powerPreference = options.powerPreference;
      adapter = await withTimeout(instance.requestAdapter(request), timeoutMs);
    } catch (cause) {
      tried.push(`${b}: ${cause instanceof Error ? cause.message : String(cause)}`);
      continue;
    }
    if (adapter === null) {
      tried.push(`${b} (${level}): no adapter`);
      continue;
    }
    if (!matchesName(adapter, options.adapterName)) {
      tried.push(`${b}: adapter '${adapter.info.device}' does not match '${options.adapterName}'`);
      continue;
    }
    return { adapter, instance, backend: b, requestedLevel: level };
  }
  const egl = process.env.EGL_PLATFORM;
  const eglHint =
    order.includes('opengles') && egl !== undefined && egl !== 'surfaceless'
      ? ` EGL_PLATFORM is '${egl}': without a display, unset it or set it to 'surfaceless'.`
      : '';
  throw new GpuError(
    'NO_ADAPTER',
    `No WebGPU adapter found (tried ${tried.join('; ')}). ${NO_ADAPTER_HELP}${eglHint}`,
    {
      details: { tried },
    },
  );
}

async function findBrowserAdapter(options: CreateGpuOptions): Promise<FoundAdapter> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  if (gpu === undefined) {
    throw new GpuError(
      'NO_ADAPTER',
      'This browser does not expose navigator.gpu (WebGPU). Use a browser with WebGPU enabled.',
    );
  }
  return findAdapterOn(gpu, 'browser', options);
}

/**
 * An adapter from a given entry point (`navigator.gpu` or a caller's): core feature level
 * first, then compatibility, unless `options.featureLevel` names one.
 */
async function findAdapterOn(
  gpu: GPU,
  backend: 'browser' | 'provided',
  options: CreateGpuOptions,
): Promise<FoundAdapter> {
  const levels: ('core' | 'compatibility')[] =
    options.featureLevel !== undefined ? [options.featureLevel] : ['core', 'compatibility'];
  for (const level of levels) {
    const request: GPURequestAdapterOptions = { featureLevel: level };
    if (options.powerPreference !== undefined) request.powerPreference = options.powerPreference;
    const adapter = await withTimeout(
      gpu.requestAdapter(request),
      options.adapterTimeoutMs ?? 15_000,
    );
    if (adapter !== null && matchesName(adapter, options.adapterName)) {
      // The instance is kept with the device: Dawn aborts if it is collected first.
      return { adapter, instance: gpu, backend, requestedLevel: level };
    }
  }
  throw new GpuError(
    'NO_ADAPTER',
    `${backend === 'browser' ? 'navigator.gpu' : 'The provided WebGPU entry point'} offered no ${options.adapterName === undefined ? '' : `'${options.adapterName}' `}adapter.`,
  );
}

async function openDevice(found: FoundAdapter, options: CreateGpuOptions): Promise<Gpu> {
  const { adapter } = found;
  const requiredLimits: Record<string, number> = {};
  const limits = {} as GpuLimits;
  const adapterLimits = adapter.limits as unknown as Record<string, number | undefined>;
  for (const name of REQUESTED_LIMITS) {
    const value = adapterLimits[name];
    if (typeof value === 'number') {
      requiredLimits[name] = value;
      limits[name] = value;
    }
  }
  const requiredFeatures = OPTIONAL_FEATURES.filter((f) => adapter.features.has(f));
  let device: GPUDevice;
  try {
    const desc: GPUDeviceDescriptor = { requiredLimits, requiredFeatures };
    if (options.label !== undefined) desc.label = options.label;
    device = await adapter.requestDevice(desc);
  } catch (cause) {
    throw new GpuError(
      'DEVICE_REQUEST_FAILED',
      `The adapter refused to create a device: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause, details: { requiredLimits, requiredFeatures } },
    );
  }
  const info = adapter.info;
  const adapterInfo: GpuAdapterReport = {
    vendor: info.vendor ?? '',
    architecture: info.architecture ?? '',
    device: info.device ?? '',
    description: info.description ?? '',
  };
  const sg = info as { subgroupMinSize?: number; subgroupMaxSize?: number };
  if (device.features.has('subgroups' as GPUFeatureName)) {
    if (typeof sg.subgroupMinSize === 'number') adapterInfo.subgroupMinSize = sg.subgroupMinSize;
    if (typeof sg.subgroupMaxSize === 'number') adapterInfo.subgroupMaxSize = sg.subgroupMaxSize;
  }
  const text = `${adapterInfo.vendor} ${adapterInfo.architecture} ${adapterInfo.device} ${adapterInfo.description}`;
  const isFallback = (info as { isFallbackAdapter?: boolean }).isFallbackAdapter === true;
  // An adapter asked for at the compatibility level may still be a full core adapter.
  const featureLevel =
    found.requestedLevel === 'core' ||
    device.features.has('core-features-and-limits' as GPUFeatureName)
      ? 'core'
      : 'compatibility';
  const deviceLimits = device.limits as unknown as Record<string, number | undefined>;
  for (const name of REQUESTED_LIMITS) {
    const value = deviceLimits[name];
    if (typeof value === 'number') limits[name] = value;
  }
  return new Gpu(
    device,
    {
      adapterInfo,
      backend: found.backend,
      featureLevel,
      isSoftware: isFallback || SOFTWARE_ADAPTER.test(text),
      limits,
      features: new Set([...device.features].map(String)),
    },
    found.instance,
  );
}
