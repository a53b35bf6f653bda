interface NodeModules {
  os: { availableParallelism(): number };
  fs: { readdirSync(p: string): string[]; readFileSync(p: string, e: 'utf8'): string };
}

/** `node:os` and `node:fs` in Node, undefined elsewhere (no static import, for browsers). */
function nodeModules(): NodeModules | undefined {
  const get = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process
    ?.getBuiltinModule;
  if (!get) return undefined;
  return { os: get('node:os') as NodeModules['os'], fs: get('node:fs') as NodeModules['fs'] };
}

/**
 * The default thread count: the machine's physical cores (decode is bound by memory
 * bandwidth, which a core's second hardware thread does not add to), never more than the
 * CPUs this process may use. Linux reads the core topology from sysfs; elsewhere it is the
 * available parallelism (a browser's `navigator.hardwareConcurrency`).
 */
export function defaultThreadCount(): number {
  const node = nodeModules();
  if (!node) {
    const nav = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator;
    return Math.max(1, nav?.hardwareConcurrency ?? 1);
  }
  const { readdirSync, readFileSync } = node.fs;
  const logical = node.os.availableParallelism();
  try {
    const cores = new Set<string>();
    for (const cpu of readdirSync('/sys/devices/system/cpu')) {
      if (!/^cpu\d+$/.test(cpu)) continue;
      try {
        const base = `/sys/devices/system/cpu/${cpu}/topology`;
        const pkg = readFileSync(`${base}/physical_package_id`, 'utf8').trim();
        const core = readFileSync(`${base}/core_id`, 'utf8').trim();
        cores.add(`${pkg}:${core}`);
      } catch {
        // an offline CPU has no topology
      }
    }
    if (cores.size > 0) return Math.max(1, Math.min(cores.size, logical));
  } catch {
    // no sysfs
  }
  return Math.max(1, logical);
}
