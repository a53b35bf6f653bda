import { spawn } from 'node:child_process';
import { RehearsalError } from './errors.js';

/** What a finished command printed. */
export interface CommandOutput {
  stdout: string;
  stderr: string;
}

/** Options of {@link runCommand}. */
export interface RunOptions {
  cwd: string;
  /** The child's whole environment (nothing is inherited unless passed here). */
  env: NodeJS.ProcessEnv;
  /** Wall-clock limit; the command's whole process group is killed when it is reached. */
  timeoutMs: number;
}

// Enough of a failed command's output to see why, without flooding the test report.
const TAIL_CHARS = 6000;

function tail(text: string): string {
  return text.length > TAIL_CHARS ? `…${text.slice(-TAIL_CHARS)}` : text;
}

/**
 * Runs `command args` to completion and returns its output.
 *
 * The child gets its own process group so a timeout ends everything it started (npm's scripts,
 * a server an example forgot to close), not only the direct child.
 *
 * @throws {RehearsalError} COMMAND_FAILED when it exits non-zero or is killed by a signal,
 *   COMMAND_TIMEOUT when it outlives `timeoutMs`; both carry the output's tail in the message.
 */
export function runCommand(
  command: string,
  args: readonly string[],
  options: RunOptions,
): Promise<CommandOutput> {
  const shown = [command, ...args].join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child.pid);
    }, options.timeoutMs);
    child.on('error', (cause) => {
      clearTimeout(timer);
      reject(
        new RehearsalError('COMMAND_FAILED', `${shown}: could not start (${cause.message})`, {
          cause,
          details: { command: shown, cwd: options.cwd },
        }),
      );
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const details = { command: shown, cwd: options.cwd, code, signal };
      const output = `\n--- stdout\n${tail(stdout)}\n--- stderr\n${tail(stderr)}`;
      if (timedOut) {
        reject(
          new RehearsalError(
            'COMMAND_TIMEOUT',
            `${shown}: still running after ${options.timeoutMs} ms, killed${output}`,
            { details },
          ),
        );
      } else if (code !== 0) {
        reject(
          new RehearsalError(
            'COMMAND_FAILED',
            `${shown}: exited with ${code ?? signal} in ${options.cwd}${output}`,
            { details },
          ),
        );
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

/**
 * This process's environment without what a parent `pnpm test` or `npx` exports for its own
 * children (`npm_config_*` and the like would override the rehearsal's `.npmrc`). The rest is
 * kept on purpose: a CI machine reaches its registry through proxies and CA bundles
 * (`HTTPS_PROXY`, `NODE_EXTRA_CA_CERTS`) that the registry's uplink and npm need too.
 */
export function inheritedEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(npm_|pnpm_|vitest|turbo_)|^node_options$|^init_cwd$/i.test(key)) env[key] = value;
  }
  return env;
}

/** Ends a detached child and everything it started; a group already gone is not an error. */
export function killGroup(pid: number | undefined, signal: NodeJS.Signals = 'SIGKILL'): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group has exited.
  }
}
