import {
  type CompiledConstraint,
  type ConstraintCompiler,
  type TokenMatcher,
  type TokenVocabulary,
  XGrammarCompiler,
} from '@kvasir/model';
import { vi } from 'vitest';

/**
 * Makes the next `XGrammarCompiler` created (the engine's, on its first constrained request)
 * hand out `wrap(matcher, vocabulary)` instead of each matcher it creates. Restore with
 * `vi.restoreAllMocks()`.
 */
export function wrapNextMatchers(
  wrap: (matcher: TokenMatcher, vocabulary: TokenVocabulary) => TokenMatcher,
): void {
  const create = XGrammarCompiler.create.bind(XGrammarCompiler);
  vi.spyOn(XGrammarCompiler, 'create').mockImplementationOnce(
    async (vocabulary: TokenVocabulary) => {
      const compiler = await create(vocabulary);
      const wrapped: ConstraintCompiler = {
        vocabSize: compiler.vocabSize,
        dispose: () => compiler.dispose(),
        compile: async (constraint): Promise<CompiledConstraint> => {
          const compiled = await compiler.compile(constraint);
          return {
            key: compiled.key,
            createMatcher: async () => wrap(await compiled.createMatcher(), vocabulary),
          };
        },
      };
      return wrapped as XGrammarCompiler;
    },
  );
}
