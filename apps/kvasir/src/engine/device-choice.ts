// Where a model runs: the backend @kvasir/model chooses for `--backend`, the WebGPU devices it
// opens, and the layer placement `--devices` / `--gpu-layers` ask for (or several wasm memories
// for a model one does not hold).

import { createGpu, type Gpu, type GpuBackendOption } from '@kvasir/gpu';
import { type KvLayout, kvBytesPerBlock } from '@kvasir/kv-allocator';
import {
  type BackendName,
  type BackendProbe,
  type CheckpointReader,
  type DevicePlacement,
  gpuLayersPlacement,
  ModelError,
  openWebGpuAdapter,
  parseDevices,
  probeBackends,
  resolvePlacement,
  selectBackend,
  wasmPlacement,
} from '@kvasir/model';
import type { EngineConfig } from '../config.js';
import { KvasirAppError } from '../errors.js';
import { probeGpu } from './gpu-probe.js';

const GPU_BACKENDS: readonly string[] = ['vulkan', 'metal', 'd3d12', 'opengles'];

/**
 * Opens a WebGPU device through @kvasir/gpu: on `backend` when given (the one a probe found, so
 * that Dawn does not try, and warn about, the others), else hardware first, then the software
 * adapter.
 */
export async function openGpu(backend?: string): Promise<Gpu> {
  try {
    return await createGpu({
      label: 'kvasir',
      ...(backend !== undefined && GPU_BACKENDS.includes(backend)
        ? { backend: backend as GpuBackendOption }
        : {}),
    });
  } catch (error) {
    throw new KvasirAppError('MODEL_LOAD', `no WebGPU device: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The app's error for a model or backend failure: a bad setting, or a model that cannot load. */
export function asAppError(error: unknown, what: string): KvasirAppError {
  if (error instanceof KvasirAppError) return error;
  const code =
    ModelError.isInstance(error) &&
    (error.code === 'INVALID_CONFIG' || error.code === 'INVALID_ARGUMENT')
      ? 'INVALID_CONFIG'
      : 'MODEL_LOAD';
  return new KvasirAppError(code, `${what}: ${(error as Error).message}`, { cause: error });
}

/**
 * The backend @kvasir/model chooses for `--backend` from a probe, with the WebGPU device opened
 * when it is WebGPU. The WebGPU part of the probe runs in a child process: Dawn is loaded into
 * this one only when there is an adapter to use, as its native warnings cannot be kept off
 * stderr here. When `auto`'s hardware adapter then fails to open, the choice is made again
 * without it.
 * @throws KvasirAppError `MODEL_LOAD` when the backend asked for is not there.
 */
export async function chooseBackend(
  choice: EngineConfig['backend'],
): Promise<{ backend: BackendName; gpu?: Gpu; probe: BackendProbe }> {
  let adapter: string | undefined;
  let webgpu: { isSoftware: boolean } | null = null;
  if (choice === 'auto' || choice === 'webgpu') {
    const found = await probeGpu();
    if (process.env.KVASIR_DEBUG && found.log) process.stderr.write(found.log);
    if (choice === 'webgpu' && !found.ok) {
      throw new KvasirAppError('MODEL_LOAD', `no WebGPU device: ${found.message}`);
    }
    if (found.ok) {
      adapter = found.probe.backend;
      webgpu = { isSoftware: found.probe.isSoftware };
    }
  }
  const probe = await probeBackends({ webgpu });
  try {
    const backend = selectBackend(choice, probe);
    if (backend !== 'webgpu') return { backend, probe };
    if (choice === 'webgpu') return { backend, gpu: await openGpu(adapter), probe };
    const gpu = await openGpu(adapter).catch(() => undefined);
    if (gpu) return { backend, gpu, probe };
    return { backend: selectBackend(choice, { ...probe, webgpu: null }), probe };
  } catch (error) {
    throw asAppError(error, `--backend ${choice}`);
  }
}

/**
 * The layer placement `--devices` or `--gpu-layers` ask for; without them, several wasm
 * memories when the model runs on the wasm backend and its weights plus a cache for one
 * full context do not fit one (wasm32's 4 GiB); else none (one device).
 * @throws KvasirAppError `INVALID_CONFIG` naming the flag for a placement that does not parse
 *   or does not cover the model's layers once.
 */
export async function placeDevices(
  config: EngineConfig,
  reader: CheckpointReader,
  threads: number | undefined,
  layout: KvLayout,
  maxModelLen: number,
  backend: BackendName,
): Promise<DevicePlacement[] | undefined> {
  const layers = reader.config.numLayers;
  const flag =
    config.devices !== undefined
      ? `--devices ${config.devices}`
      : config.gpuLayers !== undefined
        ? `--gpu-layers ${config.gpuLayers}`
        : undefined;
  let placement: DevicePlacement[] | undefined;
  try {
    if (config.devices !== undefined) placement = parseDevices(config.devices);
    else if (config.gpuLayers !== undefined) {
      placement = gpuLayersPlacement(config.gpuLayers, layers);
    } else if (backend === 'wasm') {
      const perLayerBlock = kvBytesPerBlock(layout) / layout.numLayers;
      const blocks = Math.ceil(maxModelLen / layout.blockSize);
      const split = wasmPlacement(reader, {
        kvBytesPerLayer: blocks * perLayerBlock,
        ...(config.wasmMemoryBytes === undefined
          ? {}
          : { wasmMemoryBytes: config.wasmMemoryBytes }),
      });
      if (split.length > 1) placement = split;
    }
    if (placement === undefined) return undefined;
    placement = placement.map((d) =>
      d.backend === 'wasm' && threads !== undefined ? { ...d, threads } : d,
    );
    resolvePlacement(placement, layers);
    return placement;
  } catch (error) {
    if (ModelError.isInstance(error)) {
      const what =
        flag ??
        (config.wasmMemoryBytes === undefined
          ? '--backend wasm'
          : `--wasm-memory-bytes ${config.wasmMemoryBytes}`);
      throw new KvasirAppError('INVALID_CONFIG', `${what}: ${error.message}`, {
        cause: error,
        details: { layers },
      });
    }
    throw error;
  }
}

/**
 * Opens one WebGPU device per `webgpu` entry of a placement, in order.
 * @throws KvasirAppError `INVALID_CONFIG` naming the entry whose adapter does not exist.
 */
export async function openPlacementGpus(placement: readonly DevicePlacement[]): Promise<Gpu[]> {
  const gpus: Gpu[] = [];
  try {
    for (const [i, d] of placement.entries()) {
      if (d.backend !== 'webgpu') continue;
      try {
        gpus.push(await openWebGpuAdapter(d.adapter));
      } catch (error) {
        throw new KvasirAppError(
          ModelError.isInstance(error) ? 'INVALID_CONFIG' : 'MODEL_LOAD',
          `--devices: device ${i} (webgpu${d.adapter === undefined ? '' : `:${d.adapter}`}): ${(error as Error).message}`,
          { cause: error },
        );
      }
    }
    return gpus;
  } catch (error) {
    for (const g of gpus) g.destroy();
    throw error;
  }
}
