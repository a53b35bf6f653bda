import { KvasirError } from '@kvasir/errors';
import { describe, expect, it } from 'vitest';
import { EngineError, ERROR_TABLE, errorAnswer } from './errors.js';

describe('errorAnswer', () => {
  it('maps every code through the one table', () => {
    for (const [code, mapping] of Object.entries(ERROR_TABLE)) {
      const answer = errorAnswer(new EngineError(code as keyof typeof ERROR_TABLE, 'm'));
      expect(answer.status).toBe(mapping.status);
      expect(answer.body.error.type).toBe(mapping.type);
    }
  });

  it('honours codes of other Kvasir packages that share a name, and the param detail', () => {
    class SchedulerError extends KvasirError<'PROMPT_TOO_LONG' | 'OTHER'> {}
    const a = errorAnswer(
      new SchedulerError('PROMPT_TOO_LONG', 'prompt: too long', { details: { param: 'prompt' } }),
    );
    expect(a.status).toBe(413);
    expect(a.body.error).toEqual({
      message: 'prompt: too long',
      type: 'invalid_request_error',
      param: 'prompt',
      code: 'context_length_exceeded',
    });
    expect(errorAnswer(new SchedulerError('OTHER', 'x')).status).toBe(500);
  });

  it('sets Retry-After on a full queue and hides internal messages', () => {
    const full = errorAnswer(
      new EngineError('QUEUE_FULL', 'full', { details: { retryAfterSeconds: 2.2 } }),
    );
    expect(full.status).toBe(429);
    expect(full.headers['retry-after']).toBe('3');
    const internal = errorAnswer(new Error('/secret/path exploded'));
    expect(internal.status).toBe(500);
    expect(internal.body.error.message).not.toContain('/secret');
  });
});
