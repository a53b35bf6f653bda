import { expectedTensors, type ModelConfig } from '../src/config.js';
import type { CheckpointReader, TensorInfo } from '../src/formats/checkpoint-reader.js';

/** A checkpoint that generates seeded uniform weights on the fly (nothing on disk). */
export function syntheticReader(config: ModelConfig): CheckpointReader {
  const tensors = new Map<string, TensorInfo>();
  for (const t of expectedTensors(config)) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    tensors.set(t.name, { name: t.name, dtype: 'F32', shape: t.shape, byteLength: n * 4 });
  }
  const values = (name: string, start: number, count: number): Float32Array => {
    const info = tensors.get(name) as TensorInfo;
    const out = new Float32Array(count);
    if (info.shape.length === 1) return out.fill(1);
    const a = Math.sqrt(3 / (info.shape[1] as number));
    let s = (start * 2654435761 + name.length * 97) >>> 0;
    for (let i = 0; i < count; i++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      out[i] = (s / 2 ** 32 - 0.5) * 2 * a;
    }
    return out;
  };
  const bytes = (name: string, start: number, count: number) =>
    new Uint8Array(values(name, start, count).buffer);
  return {
    format: 'safetensors',
    path: '<synthetic>',
    config,
    tensors,
    totalBytes: [...tensors.values()].reduce((a, t) => a + t.byteLength, 0),
    metadata: new Map(),
    tensor: (name) => tensors.get(name) as TensorInfo,
    async *readChunks(name) {
      const total = (tensors.get(name) as TensorInfo).byteLength / 4;
      const step = 2 * 1024 * 1024;
      for (let i = 0; i < total; i += step) yield bytes(name, i, Math.min(step, total - i));
    },
    async readInto(name, target, off = 0) {
      target.set(bytes(name, 0, (tensors.get(name) as TensorInfo).byteLength / 4), off);
    },
    readTensorBytes: async (name) =>
      bytes(name, 0, (tensors.get(name) as TensorInfo).byteLength / 4),
    readTensorF32: async (name) =>
      values(name, 0, (tensors.get(name) as TensorInfo).byteLength / 4),
    close: async () => {},
  };
}
