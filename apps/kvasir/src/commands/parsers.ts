import { InvalidArgumentError } from 'commander';

/**
 * Commander argument parsers of every `kvasir` command: one set, so that a flag's bounds are
 * checked where the flag is read and the message names them (commander adds the flag's name).
 */

/** An integer; `min` (inclusive) when given. */
export function int(min?: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n)) {
      throw new InvalidArgumentError(
        min === undefined ? 'expected an integer' : `expected an integer ≥ ${min}`,
      );
    }
    if (min !== undefined && n < min)
      throw new InvalidArgumentError(`expected an integer ≥ ${min}`);
    return n;
  };
}

/** A finite number; with `positive`, greater than 0. */
export function num(options: { readonly positive?: boolean } = {}): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n))
      throw new InvalidArgumentError('expected a number');
    if (options.positive && !(n > 0)) throw new InvalidArgumentError('expected a number > 0');
    return n;
  };
}

/** Bytes as a plain integer or with a binary unit: `268435456`, `256MiB`, `2GiB`, `512k`. */
export function bytes(value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?$/i.exec(value.trim());
  if (!m) throw new InvalidArgumentError('expected bytes, e.g. 268435456, 256MiB or 2GiB');
  const unit = (m[2] ?? '').toLowerCase().replace(/i?b$/, '');
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[unit] ?? 1;
  return Math.round(Number(m[1]) * scale);
}

/** Repeatable string flag: each use appends. */
export const collect = (value: string, previous: string[]): string[] => [...previous, value];
