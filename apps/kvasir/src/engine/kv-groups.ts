import { kvGroupLayout } from '@kvasir/kv-allocator';
import { type KvGroups, layerWindow, type ModelConfig } from '@kvasir/model';
import type { EngineConfig } from '../config.js';

/** Whether the model's sliding-window layers get KV cache groups, and why not when they do not. */
export interface KvGroupsChoice {
  /** The groups to load the model with (absent: whole-context KV on every layer). */
  readonly groups?: KvGroups;
  /** For a model with sliding-window layers kept whole: what keeps them whole. */
  readonly wholeBecause?: string;
}

/**
 * KV cache groups for a model with sliding-window layers (`@kvasir/kv-allocator`'s
 * `kvGroupLayout` of its layers' windows), so that those layers hold only their window: the
 * default. Kept whole (one group) with `--swa-full` and where the groups are not wired: WebGPU,
 * a model split over devices, swap preemption, and a default `--kv-compression` (each moves or
 * drops blocks of one table).
 */
export function kvGroupsFor(
  config: Pick<EngineConfig, 'swaFull' | 'preemptionMode' | 'kvCompression'>,
  c: ModelConfig,
  where: { readonly webgpu: boolean; readonly placed: boolean },
): KvGroupsChoice {
  if (!c.slidingWindowLayers?.length || c.slidingWindow === null) return {};
  const why = config.swaFull
    ? '--swa-full'
    : where.webgpu
      ? 'the webgpu backend'
      : where.placed
        ? 'a model split over devices'
        : config.preemptionMode === 'swap'
          ? '--preemption-mode swap'
          : config.kvCompression !== undefined
            ? '--kv-compression'
            : undefined;
  if (why !== undefined) return { wholeBecause: why };
  const layout = kvGroupLayout(Array.from({ length: c.numLayers }, (_, l) => layerWindow(c, l)));
  return {
    groups: {
      layersPerGroup: layout.layersPerGroup,
      layerGroup: layout.layerGroup,
      layerSlot: layout.layerSlot,
      windows: layout.groups.map((g) => g.window ?? null),
    },
  };
}

/** One KV cache group as `kvasir info` reports it. */
export interface KvGroupReport {
  readonly window: number | null;
  readonly layers: number;
  /** Blocks of this group one sequence at the full context holds during a decode. */
  readonly blocks_per_full_context: number;
}

/**
 * Each group's window, layers and the blocks a full-context sequence holds in it (a sliding
 * group: the blocks its window reaches, `ceil((window - 1) / blockSize) + 1` at most).
 */
export function kvGroupsReport(
  groups: KvGroups,
  maxModelLen: number,
  blockSize: number,
): KvGroupReport[] {
  const full = Math.ceil(maxModelLen / blockSize);
  return groups.windows.map((window, g) => ({
    window,
    layers: groups.layerGroup.filter((x) => x === g).length,
    blocks_per_full_context:
      window === null ? full : Math.min(full, Math.ceil((window - 1) / blockSize) + 1),
  }));
}
