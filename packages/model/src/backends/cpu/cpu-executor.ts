import type { Executor, ExecutorContext } from '../../execution/executor.js';
import { cpuKvBlockIo } from '../../execution/kv-blocks.js';
import { hostAllocator, loadBlockWeights } from '../../execution/weights.js';
import { CpuForward } from './cpu-forward.js';

/** The CPU reference backend: {@link CpuForward} over a host-side cache; GGML block weights (Q4_K, ...) are multiplied straight from their blocks. */
export async function createCpuExecutor(ctx: ExecutorContext): Promise<Executor> {
  const weights = await loadBlockWeights(ctx.reader, hostAllocator(), ctx.weights);
  const cpu = new CpuForward(ctx.reader.config, weights, ctx.kv);
  return {
    forward: async (plan) => cpu.forward(plan),
    blocks: cpuKvBlockIo(ctx.kv, cpu.caches),
    destroy: async () => {},
  };
}
