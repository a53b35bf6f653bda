import { expect } from 'vitest';
import { ModelError } from '../errors.js';

/** Awaits `p` and asserts it rejects with a {@link ModelError} of `code` whose message contains `mention`. */
export async function expectModelError(
  p: Promise<unknown>,
  code: string,
  mention?: string,
): Promise<void> {
  try {
    await p;
  } catch (e) {
    expect(ModelError.isInstance(e)).toBe(true);
    expect((e as ModelError).code).toBe(code);
    if (mention) expect((e as Error).message).toContain(mention);
    return;
  }
  throw new Error(`expected ModelError ${code}`);
}
