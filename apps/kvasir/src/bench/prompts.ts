import { Rng } from '@kvasir/scheduler/sim';

const WORDS = (
  'the of and a to in is you that it he was for on are as with his they I at be this have from ' +
  'or one had by word but not what all were we when your can said there use an each which she do ' +
  'how their if will up other about out many then them these so some her would make like him into ' +
  'time has look two more write go see number no way could people my than first water been call ' +
  'who oil its now find long down day did get come made may part cache block token kernel model'
).split(' ');

/**
 * A seeded generator of floats in [0, 1): the simulator's `Rng` (mulberry32), so the same seed
 * gives the same prompts everywhere.
 */
export function seededRandom(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

/**
 * `count` synthetic prompts of about `words` words each, from a fixed vocabulary; deterministic
 * for a seed. A shared `prefixWords`-word opening models a common system prompt.
 */
export function syntheticPrompts(
  count: number,
  words: number,
  seed: number,
  prefixWords = 0,
): string[] {
  const rand = seededRandom(seed);
  const pick = () => WORDS[Math.floor(rand() * WORDS.length)]!;
  const prefix = Array.from({ length: prefixWords }, pick).join(' ');
  return Array.from({ length: count }, () => {
    const body = Array.from({ length: words }, pick).join(' ');
    return prefix ? `${prefix} ${body}` : body;
  });
}
