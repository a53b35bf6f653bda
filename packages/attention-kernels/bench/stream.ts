// stream_read_gbps: a trivial kernel that reads a large buffer once, the bandwidth ceiling that
// attention kernels are compared against in the same run.
import type { BenchContext, BenchSection } from './harness.js';
import { medianMs } from './harness.js';

const WG = 256;

export const streamSection: BenchSection = async (ctx: BenchContext) => {
  const { gpu } = ctx;
  const cap = Math.min(gpu.limits.maxStorageBufferBindingSize, gpu.limits.maxBufferSize);
  const want = gpu.isSoftware || ctx.quick ? 64 << 20 : 1 << 30;
  const bytes = Math.floor(Math.min(want, cap) / (16 * WG)) * 16 * WG;
  const vec4s = bytes / 16;
  const threads = Math.min(vec4s, WG * (gpu.isSoftware ? 256 : 4096));
  const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> sink: array<u32>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var acc = vec4<u32>(0u);
  for (var i = g.x; i < ${vec4s}u; i += ${threads}u) { acc ^= src[i]; }
  // Written only when impossible, so the loads are live but the sink costs nothing.
  if (acc.x == 0xdeadbeefu && acc.y == 0x12345678u) { sink[g.x] = acc.z ^ acc.w; }
}`;
  const pipeline = await gpu.pipeline({ code, label: 'stream-read' });
  const src = gpu.storageBuffer(bytes, 'stream-src');
  const fill = new Uint32Array(1 << 20);
  for (let i = 0; i < fill.length; i++) fill[i] = (i * 2654435761) >>> 0;
  for (let off = 0; off < bytes; off += fill.byteLength) {
    gpu.upload(src, fill.subarray(0, Math.min(fill.length, (bytes - off) / 4)), off);
  }
  const sink = gpu.storageBuffer(threads * 4, 'stream-sink');
  const bind = gpu.bindGroup(pipeline, [src, sink]);
  const t = await medianMs(gpu, (e) => gpu.dispatch(e, pipeline, bind, threads / WG), {
    samples: ctx.quick ? 3 : 7,
    repeat: gpu.hasTimestamps ? 1 : 4,
  });
  const gbps = bytes / (t.ms / 1000) / 1e9;
  ctx.streamReadGbps = gbps;
  ctx.log(
    `stream read: ${(bytes / 2 ** 20).toFixed(0)} MiB in ${t.ms.toFixed(2)} ms → ${gbps.toFixed(2)} GB/s (${t.source})`,
  );
  gpu.releaseBuffer(src);
  gpu.releaseBuffer(sink);
  return { stream_read_gbps: round(gbps), stream_bytes: bytes, timing_source: t.source };
};

export function round(x: number, digits = 3): number {
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}
