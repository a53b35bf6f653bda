import { deviceMemory, WEBGPU_DEFAULT_MEMORY_BYTES } from '@kvasir/engine';
import { describe, expect, it } from 'vitest';
import { hostAvailableBytes } from './host-memory.js';

describe('the memory a plan splits', () => {
  const host = () => 23 * 1024 ** 3;

  it('is host memory on the CPU backend, where weights and KV cache live', () => {
    expect(deviceMemory(undefined, 'cpu', host)).toEqual({
      bytes: 23 * 1024 ** 3,
      source: 'host-available',
    });
  });

  it("is WebGPU's fixed default on a device that cannot report its memory", () => {
    expect(deviceMemory(undefined, 'webgpu', host)).toEqual({
      bytes: WEBGPU_DEFAULT_MEMORY_BYTES,
      source: 'webgpu-default',
    });
  });

  it('is what the user configured, on either backend', () => {
    for (const device of ['cpu', 'webgpu'] as const) {
      expect(deviceMemory(64 * 1024 ** 2, device, host)).toEqual({
        bytes: 64 * 1024 ** 2,
        source: 'configured',
      });
    }
  });

  it('reads a positive amount of available host memory', () => {
    expect(hostAvailableBytes()).toBeGreaterThan(0);
  });
});
