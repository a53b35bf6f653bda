import type { Executor, LayerSlice } from './executor.js';
import type { NormalizedPlan } from './forward-plan.js';
import type { KvBlockIo } from './kv-blocks.js';
import type { KvCacheSpec } from './kv-cache.js';

/** One shard of a model split by layer: an executor over a contiguous range of layers. */
export interface ExecutorShard {
  readonly executor: Executor;
  /** Its layers; the shards' slices follow each other and cover the model once. */
  readonly slice: LayerSlice;
  /** Its KV cache (the model's layout, `numLayers` of the slice). */
  readonly kv: KvCacheSpec;
}

/**
 * One executor over several shards, each running a contiguous range of layers on its own
 * device (pipeline parallelism by layer). A step runs the shards in layer order; the step's
 * hidden states cross each boundary once, through host memory (two WebGPU devices, or two
 * WebAssembly memories, share no buffers). A block id names the same logical block on every
 * shard, each holding that block's pages for its own layers, so block copies and key shifts in
 * a plan run on every shard as they are, attention mass is summed over the shards, and whole
 * blocks are gathered from and scattered to the shards in the single-device byte order (every
 * layer of a block in layer order).
 * @internal
 */
export function shardedExecutor(shards: readonly ExecutorShard[]): Executor {
  const blockBytes = shards.map((s) => s.kv.numLayers * s.kv.blockWords * 4);
  const perBlock = blockBytes.reduce((a, b) => a + b, 0);
  const blocks: KvBlockIo = {
    async read(blockIds) {
      const parts: Uint8Array[] = [];
      for (const s of shards) parts.push(await s.executor.blocks.read(blockIds));
      const out = new Uint8Array(blockIds.length * perBlock);
      for (let i = 0; i < blockIds.length; i++) {
        let o = i * perBlock;
        for (const [k, part] of parts.entries()) {
          const n = blockBytes[k] as number;
          out.set(part.subarray(i * n, (i + 1) * n), o);
          o += n;
        }
      }
      return out;
    },
    async write(blockIds, bytes) {
      let first = 0;
      for (const [k, s] of shards.entries()) {
        const n = blockBytes[k] as number;
        const part = new Uint8Array(blockIds.length * n);
        for (let i = 0; i < blockIds.length; i++) {
          const at = bytes.byteOffset + i * perBlock + first;
          part.set(new Uint8Array(bytes.buffer, at, n), i * n);
        }
        await s.executor.blocks.write(blockIds, part);
        first += n;
      }
    },
    async copy(copies) {
      for (const s of shards) await s.executor.blocks.copy(copies);
    },
  };
  return {
    async forward(plan) {
      const wantsMass = plan.massOut.some((m) => m !== undefined);
      const total = wantsMass
        ? plan.massOut.map((m) => (m === undefined ? undefined : new Float64Array(m.length)))
        : [];
      let hidden: Float32Array | undefined;
      for (const s of shards) {
        // Each shard writes the mass of its own layers; the model's is their sum.
        const shardPlan: NormalizedPlan = wantsMass
          ? {
              ...plan,
              massOut: plan.massOut.map((m) =>
                m === undefined ? undefined : new Float32Array(m.length),
              ),
            }
          : plan;
        hidden = await s.executor.forward(shardPlan, hidden);
        if (!wantsMass) continue;
        for (const [r, m] of shardPlan.massOut.entries()) {
          const acc = total[r];
          if (m === undefined || acc === undefined) continue;
          for (let b = 0; b < m.length; b++) acc[b] = (acc[b] as number) + (m[b] as number);
        }
      }
      for (const [r, acc] of total.entries()) if (acc) plan.massOut[r]?.set(acc);
      return hidden as Float32Array;
    },
    blocks,
    async destroy() {
      const results = await Promise.allSettled(shards.map((s) => s.executor.destroy()));
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    },
  };
}
