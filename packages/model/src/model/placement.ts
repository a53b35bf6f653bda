import type { Gpu } from '@kvasir/gpu';
import { WASM_ACTIVATION_RESERVE, wasmMemoryLimit } from '../backends/wasm/wasm-arena.js';
import { ModelError } from '../errors.js';
import type { LayerSlice } from '../execution/executor.js';
import { shardHoldsTensor } from '../execution/weights.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { BACKENDS, type BackendName } from './backend-select.js';

/**
 * One device of a model split by layer (pipeline parallelism): a backend, optionally the
 * layers it runs. Devices are listed in layer order; the first embeds the tokens, the last
 * computes the logits.
 */
export interface DevicePlacement {
  readonly backend: BackendName;
  /**
   * Which WebGPU adapter (`webgpu` only), numbered over the backends that offer one: the
   * platform's native backend first (Vulkan on Linux, which Mesa's lavapipe provides without a
   * GPU), then Dawn's OpenGL ES backend (llvmpipe). Default: the adapter `createGpu` picks.
   */
  readonly adapter?: number;
  /** Its layers; omitted, it shares the layers no device names evenly with the other such devices. */
  readonly layers?: LayerSlice;
  /** An already-created `@kvasir/gpu` `Gpu` to run on (`webgpu` only); else one is opened. */
  readonly gpu?: unknown;
  /** Threads of a wasm device, the calling thread included (default: physical cores). */
  readonly threads?: number;
}

function bad(message: string, details?: Record<string, unknown>): never {
  throw new ModelError('INVALID_ARGUMENT', message, details ? { details } : undefined);
}

/**
 * Parses a device list such as `wasm,wasm`, `webgpu:0:layers=0-19,wasm` or `webgpu:0,webgpu:1`:
 * comma-separated devices in layer order, each `backend[:adapter][:layers=A-B]` (layers A to B
 * inclusive).
 * @throws {ModelError} `INVALID_ARGUMENT` naming the device that does not parse.
 */
export function parseDevices(text: string): DevicePlacement[] {
  const items = text.split(',').map((s) => s.trim());
  if (items.length === 0 || items.some((s) => s === '')) {
    bad(`'${text}' is not a device list (e.g. 'wasm,wasm' or 'webgpu:0:layers=0-19,wasm')`);
  }
  return items.map((item, i) => {
    const [name, ...rest] = item.split(':');
    if (!(BACKENDS as readonly string[]).includes(name as string)) {
      bad(`device ${i} '${item}': unknown backend '${name}' (${BACKENDS.join(', ')})`, {
        device: i,
      });
    }
    const backend = name as BackendName;
    let adapter: number | undefined;
    let layers: LayerSlice | undefined;
    for (const part of rest) {
      const range = /^layers=(\d+)-(\d+)$/.exec(part);
      if (range) {
        const first = Number(range[1]);
        const last = Number(range[2]);
        if (last < first) bad(`device ${i} '${item}': layers ${first}-${last} is an empty range`);
        if (layers !== undefined) bad(`device ${i} '${item}' names its layers twice`);
        layers = { firstLayer: first, numLayers: last - first + 1 };
      } else if (/^\d+$/.test(part) && backend === 'webgpu' && adapter === undefined) {
        adapter = Number(part);
      } else {
        bad(
          `device ${i} '${item}': '${part}' is neither an adapter index (webgpu:N) nor layers=A-B`,
          { device: i },
        );
      }
    }
    return {
      backend,
      ...(adapter === undefined ? {} : { adapter }),
      ...(layers ? { layers } : {}),
    };
  });
}

/**
 * llama.cpp's `-ngl N` as a placement: the first `gpuLayers` layers on WebGPU, the rest on the
 * wasm backend (a device with no layers is left out).
 * @throws {ModelError} `INVALID_ARGUMENT` for a count outside `[0, numLayers]`.
 */
export function gpuLayersPlacement(gpuLayers: number, numLayers: number): DevicePlacement[] {
  if (!(Number.isInteger(gpuLayers) && gpuLayers >= 0 && gpuLayers <= numLayers)) {
    bad(
      `gpu layers must be an integer in [0, ${numLayers}] (the model's layers), got ${gpuLayers}`,
    );
  }
  const out: DevicePlacement[] = [];
  if (gpuLayers > 0)
    out.push({ backend: 'webgpu', layers: { firstLayer: 0, numLayers: gpuLayers } });
  if (gpuLayers < numLayers) {
    out.push({
      backend: 'wasm',
      layers: { firstLayer: gpuLayers, numLayers: numLayers - gpuLayers },
    });
  }
  return out;
}

/** `n` layers from `first` split as evenly as possible over `k` devices, in order. */
function evenSlices(first: number, n: number, k: number): LayerSlice[] {
  const base = Math.floor(n / k);
  const extra = n % k;
  const out: LayerSlice[] = [];
  let at = first;
  for (let i = 0; i < k; i++) {
    const count = base + (i < extra ? 1 : 0);
    out.push({ firstLayer: at, numLayers: count });
    at += count;
  }
  return out;
}

const range = (s: LayerSlice) => `${s.firstLayer}-${s.firstLayer + s.numLayers - 1}`;

/**
 * The layers of each device: the named ranges as they are, the devices without one sharing
 * the layers between them evenly. The result follows the list's order and covers every layer
 * once.
 * @throws {ModelError} `INVALID_ARGUMENT` for no devices, a range past the model's layers,
 *   overlapping ranges, ranges out of list order, layers no device runs, or a device left
 *   with no layer; each message names the devices and the numbers.
 */
export function resolvePlacement(
  devices: readonly DevicePlacement[],
  numLayers: number,
): LayerSlice[] {
  if (devices.length === 0) bad('a placement needs at least one device');
  for (const [i, d] of devices.entries()) {
    const s = d.layers;
    if (s === undefined) continue;
    if (
      !(Number.isInteger(s.firstLayer) && Number.isInteger(s.numLayers) && s.firstLayer >= 0) ||
      s.numLayers < 1
    ) {
      bad(`device ${i} (${d.backend}): layers ${s.firstLayer}+${s.numLayers} is not a range`);
    }
    if (s.firstLayer + s.numLayers > numLayers) {
      bad(
        `device ${i} (${d.backend}): layers ${range(s)} reach past the model's ${numLayers} layers (0-${numLayers - 1})`,
        { device: i, numLayers },
      );
    }
    for (let j = 0; j < i; j++) {
      const o = devices[j]?.layers;
      if (o === undefined) continue;
      if (o.firstLayer > s.firstLayer + s.numLayers - 1) {
        bad(
          `device ${i} (${d.backend}) layers ${range(s)} come before device ${j}'s layers ${range(o)}: list devices in layer order`,
          { devices: [j, i] },
        );
      }
      const overlap =
        s.firstLayer < o.firstLayer + o.numLayers && o.firstLayer < s.firstLayer + s.numLayers;
      if (overlap) {
        bad(
          `device ${i} (${d.backend}) layers ${range(s)} overlap device ${j} (${devices[j]?.backend}) layers ${range(o)}`,
          { devices: [j, i] },
        );
      }
    }
  }
  const out: LayerSlice[] = new Array(devices.length);
  let cursor = 0;
  let pending: number[] = [];
  const settle = (end: number) => {
    if (pending.length === 0) {
      if (end > cursor) bad(`layers ${cursor}-${end - 1} are on no device`, { first: cursor });
      return;
    }
    if (end - cursor < pending.length) {
      const idle = pending[end - cursor] as number;
      bad(
        `device ${idle} (${devices[idle]?.backend}) gets no layer: ${end - cursor} layers (${cursor}-${end - 1}) for ${pending.length} devices`,
        { device: idle },
      );
    }
    for (const [k, s] of evenSlices(cursor, end - cursor, pending.length).entries()) {
      out[pending[k] as number] = s;
    }
    pending = [];
  };
  for (const [i, d] of devices.entries()) {
    const s = d.layers;
    if (s === undefined) {
      pending.push(i);
      continue;
    }
    if (s.firstLayer < cursor) {
      bad(
        `device ${i} (${d.backend}) layers ${range(s)} come before the layers of the device listed before it: list devices in layer order`,
        { device: i },
      );
    }
    settle(s.firstLayer);
    out[i] = s;
    cursor = s.firstLayer + s.numLayers;
  }
  settle(numLayers);
  return out;
}

/**
 * Opens the WebGPU device of a `webgpu:N` placement: adapter `index` numbered as
 * {@link DevicePlacement.adapter} says, or the adapter `createGpu` picks. The caller destroys
 * it after the model that runs on it.
 * @throws {ModelError} `INVALID_ARGUMENT` naming the adapters there are when `index` is past
 *   them; `@kvasir/gpu`'s errors when none opens.
 */
export async function openWebGpuAdapter(index?: number): Promise<Gpu> {
  // Imported on demand: a run without WebGPU never loads its native binding.
  const { openWebGpu } = await import('../backends/webgpu/gpu-executor.js');
  return openWebGpu(index);
}

/** What {@link wasmPlacement} packs into each WebAssembly memory. */
export interface WasmPlacementOptions {
  /** Bytes of one memory for weights and cache (default: `wasmMemoryBytes` less 256 MiB of activations). */
  readonly memoryBytes?: number;
  /** Bytes one memory holds in all, as `modelLimits` takes it (default and most: wasm32's 4 GiB). */
  readonly wasmMemoryBytes?: number;
  /** KV cache bytes each layer needs at the least (its share of a minimal cache). */
  readonly kvBytesPerLayer: number;
  /** Threads of each wasm device. */
  readonly threads?: number;
}

/**
 * The wasm devices a checkpoint needs: one when its weights and a minimal KV cache fit one
 * wasm32 memory, else consecutive layers packed into as few memories as hold them (the first
 * also holding the embedding, the last the final norm and head).
 * @throws {ModelError} `INVALID_CONFIG` when one layer alone does not fit a memory;
 *   `INVALID_ARGUMENT` for a `wasmMemoryBytes` past 4 GiB.
 */
export function wasmPlacement(
  reader: CheckpointReader,
  options: WasmPlacementOptions,
): DevicePlacement[] {
  const c = reader.config;
  const memory =
    options.memoryBytes ?? wasmMemoryLimit(options.wasmMemoryBytes) - WASM_ACTIVATION_RESERVE;
  const bytesOf = (slice: LayerSlice) =>
    [...reader.tensors]
      .filter(([name]) => shardHoldsTensor(c, slice, name))
      .reduce((a, [, t]) => a + t.byteLength, 0) +
    slice.numLayers * options.kvBytesPerLayer;
  const devices: DevicePlacement[] = [];
  let first = 0;
  while (first < c.numLayers) {
    let count = 1;
    if (bytesOf({ firstLayer: first, numLayers: 1 }) > memory) {
      throw new ModelError(
        'INVALID_CONFIG',
        `layer ${first} with its weights and a minimal KV cache (${bytesOf({ firstLayer: first, numLayers: 1 })} bytes) does not fit one WebAssembly memory of ${memory} bytes`,
        { details: { layer: first, memoryBytes: memory } },
      );
    }
    while (
      first + count < c.numLayers &&
      bytesOf({ firstLayer: first, numLayers: count + 1 }) <= memory
    ) {
      count++;
    }
    devices.push({
      backend: 'wasm',
      layers: { firstLayer: first, numLayers: count },
      ...(options.threads === undefined ? {} : { threads: options.threads }),
    });
    first += count;
  }
  return devices;
}
