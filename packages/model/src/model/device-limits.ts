import type { Gpu } from '@kvasir/gpu';
import { defaultThreadCount } from '../backends/wasm/thread-count.js';
import { WASM32_MAX_BYTES } from '../backends/wasm/wasm-arena.js';
import { ModelError } from '../errors.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { type BackendName, type BackendProbe, probeBackends } from './backend-select.js';

/**
 * What one device running a model can hold: today a model runs whole on one device; a model
 * sharded by layer runs on several, each holding the KV cache of its own layers (a block id
 * names the same logical block on every one, so each holds the same number of blocks).
 */
export interface DeviceLimits {
  /** The backend running on it. */
  readonly backend: BackendName;
  /** The device in words, for banners: the adapter, or the threads and SIMD it runs. */
  readonly description: string;
  /**
   * Whether its memory is the host's (cpu, wasm), which the operating system can report, or a
   * GPU's, which WebGPU does not report.
   */
  readonly hostMemory: boolean;
  /** The first of the layers it runs. */
  readonly firstLayer: number;
  /** How many layers it runs, from {@link firstLayer}. */
  readonly numLayers: number;
  /** Most bytes of KV cache it can hold, all its layers together. */
  readonly maxKvBytes: number;
  /** Most bytes of KV cache one of its layers may take (one buffer or array holds a layer's blocks). */
  readonly maxLayerKvBytes: number;
}

/** Where a model runs, and what it can hold there. */
export interface ModelLimits {
  readonly backend: BackendName;
  /** The devices in layer order, covering every layer once (one device today). */
  readonly devices: readonly DeviceLimits[];
}

/** Options of {@link modelLimits}. */
export interface ModelLimitsOptions {
  /** The backend the model will run on (see `selectBackend`). */
  readonly backend: BackendName;
  /** The device the WebGPU backend will run on: required for it. */
  readonly gpu?: Gpu;
  /** Threads of the wasm backend, the calling thread included (default: physical cores). */
  readonly threads?: number;
  /** What {@link probeBackends} found, when the caller has it (else the wasm part is probed here). */
  readonly probe?: BackendProbe;
}

// The wasm backend's activations, RoPE tables and thread scratch, kept out of the KV budget.
const WASM_ACTIVATION_RESERVE = 256 * 2 ** 20;
// A CPU layer's cache is one typed array.
const CPU_MAX_LAYER_BYTES = 2 ** 31 - 1;

/**
 * What a checkpoint's KV cache may take on a backend, before it is loaded: the input of a
 * memory plan, which then picks a block count within the memory it is given. WebGPU bounds
 * each layer's cache by the device's storage binding size; the wasm backend keeps weights and
 * every layer's cache in one wasm32 memory of 4 GiB, so the cache gets what the weights (at
 * their file size) and 256 MiB of activations leave; the CPU keeps one typed array per layer.
 * @throws {ModelError} `INVALID_ARGUMENT` for the WebGPU backend without its `gpu`.
 */
export async function modelLimits(
  reader: CheckpointReader,
  options: ModelLimitsOptions,
): Promise<ModelLimits> {
  const { backend, gpu } = options;
  const layers = reader.config.numLayers;
  const device = (
    description: string,
    hostMemory: boolean,
    maxLayerKvBytes: number,
    maxKvBytes = maxLayerKvBytes * layers,
  ): ModelLimits => ({
    backend,
    devices: [
      {
        backend,
        description,
        hostMemory,
        firstLayer: 0,
        numLayers: layers,
        maxKvBytes,
        maxLayerKvBytes,
      },
    ],
  });
  if (backend === 'webgpu') {
    if (gpu === undefined) {
      throw new ModelError('INVALID_ARGUMENT', "modelLimits: the 'webgpu' backend needs its gpu");
    }
    const info = gpu.adapterInfo;
    const adapter = [info.vendor, info.device || info.description].filter(Boolean).join(' ');
    return device(
      `webgpu (${adapter}, ${gpu.backend}${gpu.isSoftware ? ', software adapter' : ''})`,
      false,
      gpu.limits.maxStorageBufferBindingSize,
    );
  }
  if (backend === 'wasm') {
    const threads = options.threads ?? defaultThreadCount();
    const { wasm } = options.probe ?? (await probeBackends({ webgpu: null }));
    const kvBytes = Math.max(0, WASM32_MAX_BYTES - reader.totalBytes - WASM_ACTIVATION_RESERVE);
    return device(
      `wasm (${threads} threads, simd128${wasm.relaxedSimd ? ', relaxed simd available' : ''})`,
      true,
      Math.floor(kvBytes / layers),
      kvBytes,
    );
  }
  return device('cpu (@kvasir/model reference kernels)', true, CPU_MAX_LAYER_BYTES);
}
