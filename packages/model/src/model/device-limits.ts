import type { Gpu } from '@kvasir/gpu';
import { defaultThreadCount } from '../backends/wasm/thread-count.js';
import { WASM_ACTIVATION_RESERVE, wasmMemoryLimit } from '../backends/wasm/wasm-arena.js';
import { ModelError } from '../errors.js';
import type { LayerSlice } from '../execution/executor.js';
import { shardHoldsTensor } from '../execution/weights.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { type BackendName, type BackendProbe, probeBackends } from './backend-select.js';
import { type DevicePlacement, resolvePlacement } from './placement.js';

/**
 * What one device running a model can hold: a model runs whole on one device, or split by
 * layer over several, each holding the KV cache of its own layers (a block id names the same
 * logical block on every one, so each holds the same number of blocks).
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
  /** Bytes of the weights it holds (its layers, and the embedding or head where it runs them). */
  readonly weightBytes: number;
  /**
   * Its own memory, when the backend bounds it: one WebAssembly memory (wasm32's 4 GiB, or
   * `wasmMemoryBytes`), which holds its weights, its layers' cache and
   * {@link reservedBytes}. `null` for WebGPU, which does not report its memory, and the CPU,
   * whose memory is the host's: a memory plan brings those figures.
   */
  readonly memoryBytes: number | null;
  /** Bytes of {@link memoryBytes} kept for the step's activations and scratch (0 when null). */
  readonly reservedBytes: number;
}

/** Where a model runs, and what it can hold there. */
export interface ModelLimits {
  readonly backend: BackendName;
  /** The devices in layer order, covering every layer once. */
  readonly devices: readonly DeviceLimits[];
}

/** Options of {@link modelLimits}. */
export interface ModelLimitsOptions {
  /** The backend the model will run on (see `selectBackend`); ignored with `devices`. */
  readonly backend: BackendName;
  /** The device the WebGPU backend will run on: required for it. */
  readonly gpu?: Gpu;
  /**
   * The devices of a model split by layer, as `loadModel` takes them; each WebGPU one with its
   * `gpu` (a `@kvasir/gpu` `Gpu`).
   */
  readonly devices?: readonly DevicePlacement[];
  /** Threads of the wasm backend, the calling thread included (default: physical cores). */
  readonly threads?: number;
  /** What {@link probeBackends} found, when the caller has it (else the wasm part is probed here). */
  readonly probe?: BackendProbe;
  /**
   * Bytes one WebAssembly memory may hold (default and most: wasm32's 4 GiB). Lower, for a
   * browser that grants less, or to exercise a split by layer with a small model.
   */
  readonly wasmMemoryBytes?: number;
}

// A CPU layer's cache is one typed array.
const CPU_MAX_LAYER_BYTES = 2 ** 31 - 1;

/**
 * What a checkpoint's KV cache may take on a backend, before it is loaded: the input of a
 * memory plan, which then picks a block count within the memory it is given. WebGPU bounds
 * each layer's cache by the device's storage binding size; the wasm backend keeps a device's
 * weights and its layers' cache in one wasm32 memory of 4 GiB, so the cache gets what its
 * weights (at their stored size) and 256 MiB of activations leave; the CPU keeps one typed
 * array per layer. With `devices`, one entry per device, over its own layers and weights.
 * @throws {ModelError} `INVALID_ARGUMENT` for the WebGPU backend without its `gpu`, or a bad
 *   placement (see `resolvePlacement`).
 */
export async function modelLimits(
  reader: CheckpointReader,
  options: ModelLimitsOptions,
): Promise<ModelLimits> {
  const total = reader.config.numLayers;
  if (options.devices === undefined) {
    const device = await deviceLimits(reader, options, options.backend, options.gpu, {
      firstLayer: 0,
      numLayers: total,
    });
    return { backend: options.backend, devices: [device] };
  }
  const placement = options.devices;
  const slices = resolvePlacement(placement, total);
  const devices: DeviceLimits[] = [];
  for (const [i, d] of placement.entries()) {
    devices.push(
      await deviceLimits(
        reader,
        { ...options, threads: d.threads ?? options.threads },
        d.backend,
        d.gpu as Gpu | undefined,
        slices[i] as LayerSlice,
      ),
    );
  }
  return { backend: placement[0]?.backend as BackendName, devices };
}

async function deviceLimits(
  reader: CheckpointReader,
  options: ModelLimitsOptions,
  backend: BackendName,
  gpu: Gpu | undefined,
  slice: LayerSlice,
): Promise<DeviceLimits> {
  const layers = slice.numLayers;
  // Stored at their file size (f32 stays f32, GGUF blocks stay blocks, 16-bit stays 16-bit).
  const weightBytes =
    layers === reader.config.numLayers
      ? reader.totalBytes
      : [...reader.tensors]
          .filter(([name]) => shardHoldsTensor(reader.config, slice, name))
          .reduce((a, [, t]) => a + t.byteLength, 0);
  const device = (
    description: string,
    hostMemory: boolean,
    maxLayerKvBytes: number,
    maxKvBytes = maxLayerKvBytes * layers,
    memoryBytes: number | null = null,
    reservedBytes = 0,
  ): DeviceLimits => ({
    backend,
    description,
    hostMemory,
    firstLayer: slice.firstLayer,
    numLayers: layers,
    maxKvBytes,
    maxLayerKvBytes,
    weightBytes,
    memoryBytes,
    reservedBytes,
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
    const memory = wasmMemoryLimit(options.wasmMemoryBytes);
    const kvBytes = Math.max(0, memory - weightBytes - WASM_ACTIVATION_RESERVE);
    return device(
      `wasm (${threads} threads, simd128${wasm.relaxedSimd ? ', relaxed simd available' : ''})`,
      true,
      Math.floor(kvBytes / layers),
      kvBytes,
      memory,
      WASM_ACTIVATION_RESERVE,
    );
  }
  return device('cpu (@kvasir/model reference kernels)', true, CPU_MAX_LAYER_BYTES);
}
