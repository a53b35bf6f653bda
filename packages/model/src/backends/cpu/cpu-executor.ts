import type { Executor, ExecutorContext } from '../../execution/executor.js';
import { cpuKvBlockIo } from '../../execution/kv-blocks.js';
import { hostAllocator, loadWeights } from '../../execution/weights.js';
import { CpuForward } from './cpu-forward.js';

/** The CPU reference backend: {@link CpuForward} over a host-side cache. */
export async function createCpuExecutor(ctx: ExecutorContext): Promise<Executor> {
  const weights = await loadWeights(ctx.reader, hostAllocator(), ctx.weights);
  const cpu = new CpuForward(ctx.reader.config, weights, ctx.kv);
  return {
    forward: async (plan) => cpu.forward(plan),
    blocks: cpuKvBlockIo(ctx.kv, cpu.caches),
    destroy: async () => {},
  };
}
