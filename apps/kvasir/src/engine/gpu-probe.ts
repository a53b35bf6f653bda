import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

/** The adapter a WebGPU device would be opened on, as a child process found it. */
export interface GpuProbe {
  /** @kvasir/gpu's backend name (`vulkan`, `metal`, `d3d12`, `opengles`). */
  readonly backend: string;
  readonly isSoftware: boolean;
  readonly adapter: string;
}

/** What {@link probeGpu} found: an adapter, or why there is none, and Dawn's own log lines. */
export type GpuProbeResult =
  | { readonly ok: true; readonly probe: GpuProbe; readonly log: string }
  | { readonly ok: false; readonly message: string; readonly log: string };

// Runs in the child: the module URL of @kvasir/gpu comes as its one argument.
const CHILD = `
const { createGpu } = await import(process.argv[1]);
let out;
try {
  const gpu = await createGpu({ label: 'kvasir-probe' });
  const info = gpu.adapterInfo;
  out = { ok: true, probe: { backend: gpu.backend, isSoftware: gpu.isSoftware,
    adapter: [info.vendor, info.device || info.description].filter(Boolean).join(' ') } };
  gpu.destroy();
} catch (error) {
  out = { ok: false, message: error instanceof Error ? error.message : String(error) };
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
`;

function gpuModuleUrl(): string {
  const resolveEsm = (import.meta as { resolve?: (specifier: string) => string }).resolve;
  if (typeof resolveEsm === 'function') return resolveEsm('@kvasir/gpu');
  return pathToFileURL(createRequire(import.meta.url).resolve('@kvasir/gpu')).href;
}

/**
 * Finds the WebGPU adapter `createGpu` would take, in a child Node process. Dawn writes its
 * warnings (a Vulkan loader it cannot find, limits it lowers) from native code straight to the
 * process's stderr, where nothing in JavaScript can catch them; in the child they are captured
 * and returned as `log`, and this process opens an instance only when an adapter is there.
 */
export async function probeGpu(timeoutMs = 45_000): Promise<GpuProbeResult> {
  return new Promise((resolveResult) => {
    let stdout = '';
    let log = '';
    const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD, gpuModuleUrl()], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      log += chunk.toString();
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      resolveResult({ ok: false, message: `cannot start the GPU probe: ${error.message}`, log });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      try {
        resolveResult({ ...(JSON.parse(stdout) as { ok: true; probe: GpuProbe }), log });
      } catch {
        resolveResult({
          ok: false,
          message: `the GPU probe ended without an answer (${signal ? `signal ${signal}` : `exit code ${code}`})`,
          log,
        });
      }
    });
  });
}
