// stream_read_gbps: trivial kernels that read a large buffer once, the bandwidth ceiling that
// attention kernels are compared against in the same run.
import { type BenchContext, type BenchSection, medianMs } from './harness.js';

const WG = 256;

/**
 * Two read patterns, the better one is the ceiling: GPUs stream fastest when neighbouring
 * invocations read neighbouring words (strided loop); CPU rasterizers such as llvmpipe, when
 * each invocation reads its own contiguous chunk.
 */
function streamShader(vec4s: number, threads: number, pattern: 'strided' | 'chunked'): string {
  const per = vec4s / threads;
  const loop =
    pattern === 'strided'
      ? `for (var i = g.x; i < ${vec4s}u; i += ${threads}u) { acc ^= src[i]; }`
      : `for (var i = g.x * ${per}u; i < (g.x + 1u) * ${per}u; i++) { acc ^= src[i]; }`;
  return /* wgsl */ `
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> sink: array<u32>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var acc = vec4<u32>(0u);
  ${loop}
  // Written only when impossible, so the loads are live but the sink costs nothing.
  if (acc.x == 0xdeadbeefu && acc.y == 0x12345678u) { sink[g.x] = acc.z ^ acc.w; }
}`;
}

export const streamSection: BenchSection = async (ctx: BenchContext) => {
  const { gpu } = ctx;
  const cap = Math.min(gpu.limits.maxStorageBufferBindingSize, gpu.limits.maxBufferSize);
  const want = gpu.isSoftware || ctx.quick ? 64 << 20 : 1 << 30;
  const bytes = Math.floor(Math.min(want, cap) / (16 * WG * 64)) * 16 * WG * 64;
  const vec4s = bytes / 16;
  const src = gpu.storageBuffer(bytes, 'stream-src');
  const fill = new Uint32Array(1 << 20);
  for (let i = 0; i < fill.length; i++) fill[i] = (i * 2654435761) >>> 0;
  for (let off = 0; off < bytes; off += fill.byteLength) {
    gpu.upload(src, fill.subarray(0, Math.min(fill.length, (bytes - off) / 4)), off);
  }
  const variants = [
    { pattern: 'strided' as const, groups: Math.min(vec4s / WG, gpu.isSoftware ? 4096 : 8192) },
    { pattern: 'chunked' as const, groups: gpu.isSoftware ? 16 : 1024 },
  ];
  const sink = gpu.storageBuffer(WG * 8192 * 4, 'stream-sink');
  let best = { gbps: 0, ms: 0, pattern: '', source: 'wall-clock' as 'timestamp' | 'wall-clock' };
  let bestRun: ((samples: number) => Promise<number>) | undefined;
  for (const v of variants) {
    const threads = WG * v.groups;
    const pipeline = await gpu.pipeline({
      code: streamShader(vec4s, threads, v.pattern),
      label: `stream-${v.pattern}`,
    });
    const bind = gpu.bindGroup(pipeline, [src, sink]);
    const time = (samples: number) =>
      medianMs(gpu, (e) => gpu.dispatch(e, pipeline, bind, v.groups), {
        samples,
        repeat: gpu.hasTimestamps ? 1 : 4,
      });
    const t = await time(ctx.quick ? 3 : 7);
    const gbps = bytes / (t.ms / 1000) / 1e9;
    ctx.log(
      `stream read (${v.pattern}): ${(bytes / 2 ** 20).toFixed(0)} MiB in ${t.ms.toFixed(2)} ms → ${gbps.toFixed(2)} GB/s (${t.source})`,
    );
    if (gbps > best.gbps) {
      best = { gbps, ms: t.ms, pattern: v.pattern, source: t.source };
      bestRun = async (samples) => bytes / ((await time(samples)).ms / 1000) / 1e9;
    }
  }
  ctx.streamReadGbps = best.gbps;
  // The buffers stay until the run ends (Gpu.destroy), for later sections' paired ceilings.
  const again = bestRun!;
  ctx.measureStream = () => again(1);
  return {
    stream_read_gbps: round(best.gbps),
    stream_bytes: bytes,
    stream_pattern: best.pattern,
    timing_source: best.source,
  };
};

export function round(x: number, digits = 3): number {
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}
