const KVASIR_ERROR = Symbol.for('@kvasir/error');

/**
 * Base class of every error thrown by a Kvasir package.
 *
 * Each package subclasses it with its own string-literal union of codes (`KvAllocatorError`,
 * `GpuError`, ...). Codes are stable API: match on `code`, never on `message`.
 *
 * `KvasirError.isInstance(e)` works even when two copies of a package are installed (where
 * `instanceof` fails), through a `Symbol.for` marker.
 *
 * @example
 * ```ts
 * class ThingError extends KvasirError<'NOT_FOUND' | 'BAD_INPUT'> {}
 * try { ... } catch (e) { if (ThingError.isInstance(e) && e.code === 'NOT_FOUND') ... }
 * ```
 */
export class KvasirError<Code extends string = string> extends Error {
  /** Stable, machine-readable reason. */
  readonly code: Code;
  /** Extra structured facts about the failure (ids, sizes), for logs and tests. */
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: Code,
    message: string,
    options?: { cause?: unknown; details?: Record<string, unknown> },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options?.details;
    this.name = new.target.name;
    Object.defineProperty(this, KVASIR_ERROR, { value: new.target.name });
  }

  /**
   * True when `value` is an instance of this class (or a subclass), including instances
   * created by another copy of the package.
   */
  static isInstance<T extends KvasirError>(
    this: abstract new (
      ...args: never[]
    ) => T,
    value: unknown,
  ): value is T {
    if (value instanceof this) return true;
    if (typeof value !== 'object' || value === null || !(KVASIR_ERROR in value)) return false;
    if (this.name === 'KvasirError') return true;
    // Walk the other copy's prototype chain by class name.
    let proto = Object.getPrototypeOf(value);
    while (proto && proto !== Object.prototype) {
      if (proto.constructor?.name === this.name) return true;
      proto = Object.getPrototypeOf(proto);
    }
    return false;
  }
}
