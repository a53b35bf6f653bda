import { describe, expect, it } from 'vitest';
import { KvasirError } from './index.js';

class WidgetError extends KvasirError<'BROKEN' | 'MISSING'> {}
class OtherError extends KvasirError<'OTHER'> {}

describe('KvasirError', () => {
  it('carries a code, message, cause and details', () => {
    const cause = new Error('root');
    const e = new WidgetError('BROKEN', 'widget 3 is broken', { cause, details: { id: 3 } });
    expect(e.code).toBe('BROKEN');
    expect(e.message).toBe('widget 3 is broken');
    expect(e.cause).toBe(cause);
    expect(e.details).toEqual({ id: 3 });
    expect(e.name).toBe('WidgetError');
    expect(e).toBeInstanceOf(Error);
  });

  it('recognises instances by class, including copies from another install', () => {
    const e = new WidgetError('MISSING', 'x');
    expect(WidgetError.isInstance(e)).toBe(true);
    expect(KvasirError.isInstance(e)).toBe(true);
    expect(OtherError.isInstance(e)).toBe(false);
    expect(WidgetError.isInstance(new Error('x'))).toBe(false);
    expect(WidgetError.isInstance(null)).toBe(false);

    // Simulate a second copy of the package: a structurally separate class with the same name.
    const marker = Symbol.for('@kvasir/error');
    class WidgetErrorCopy extends Error {}
    Object.defineProperty(WidgetErrorCopy, 'name', { value: 'WidgetError' });
    const foreign = new WidgetErrorCopy('y');
    Object.defineProperty(foreign, marker, { value: 'WidgetError' });
    expect(foreign instanceof WidgetError).toBe(false);
    expect(WidgetError.isInstance(foreign)).toBe(true);
    expect(KvasirError.isInstance(foreign)).toBe(true);
    expect(OtherError.isInstance(foreign)).toBe(false);
  });
});
