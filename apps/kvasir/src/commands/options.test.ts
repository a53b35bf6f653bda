import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addEngineOptions, resolveEngineConfig } from './options.js';

async function configOf(args: readonly string[]) {
  const cmd = addEngineOptions(new Command('serve').exitOverride(), { server: true });
  cmd.parse(['node', 'kvasir', ...args]);
  return resolveEngineConfig(cmd);
}

describe('engine flags', () => {
  it('jump-forward decoding is on unless --no-jump-forward', async () => {
    expect((await configOf([])).jumpForward).toBe(true);
    expect((await configOf(['--no-jump-forward'])).jumpForward).toBe(false);
  });
});
