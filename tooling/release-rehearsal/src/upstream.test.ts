import { describe, expect, it } from 'vitest';
import { RehearsalError } from './errors.js';
import { isUpstreamFailure } from './rehearsal.js';

const npmFailure = (stderr: string) =>
  new RehearsalError('COMMAND_FAILED', `npm install x: exited with 1\n--- stderr\n${stderr}`);

describe('isUpstreamFailure', () => {
  it('retries a third-party package the uplink could not fetch, and network errors', () => {
    expect(
      isUpstreamFailure(
        npmFailure(
          'npm error 404 Not Found - GET http://127.0.0.1:44387/cli-progress - no such package available',
        ),
      ),
    ).toBe(true);
    expect(
      isUpstreamFailure(
        npmFailure(
          'npm error 404 Not Found - GET http://127.0.0.1:44387/@webgpu%2ftypes - no such package available',
        ),
      ),
    ).toBe(true);
    expect(isUpstreamFailure(npmFailure('npm error code ECONNRESET'))).toBe(true);
    expect(isUpstreamFailure(npmFailure('npm error code EAI_AGAIN'))).toBe(true);
  });

  it('never retries what the rehearsed packages themselves got wrong', () => {
    expect(
      isUpstreamFailure(
        npmFailure(
          'npm error 404 Not Found - GET http://127.0.0.1:44387/@kvasir%2ferrors - no such package available',
        ),
      ),
    ).toBe(false);
    expect(
      isUpstreamFailure(
        npmFailure(
          'npm error 404 Not Found - GET http://127.0.0.1:44387/kvasir - no such package available',
        ),
      ),
    ).toBe(false);
    expect(isUpstreamFailure(npmFailure('npm error code ETARGET'))).toBe(false);
  });
});
