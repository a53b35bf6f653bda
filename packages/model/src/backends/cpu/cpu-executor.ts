import type { Executor, ExecutorContext } from '../../execution/executor.js';
import { cpuKvBlockIo } from '../../execution/kv-blocks.js';
import { hostAllocator, loadShardWeights } from '../../execution/weights.js';
import { CpuForward } from './cpu-forward.js';

/** The CPU reference backend: {@link CpuForward} over a host-side cache; GGML block weights (Q4_K, ...) are multiplied straight from their blocks. */
export async function createCpuExecutor(ctx: ExecutorContext): Promise<Executor> {
  const weights = await loadShardWeights(ctx.reader, hostAllocator(), ctx.weights, ctx.layers);
  const cpu = new CpuForward(ctx.reader.config, weights, ctx.kv, ctx.layers);
  return {
    forward: async (plan, hidden) => cpu.forward(plan, hidden),
    blocks: cpuKvBlockIo(ctx.kv, cpu.caches),
    destroy: async () => {},
  };
}
