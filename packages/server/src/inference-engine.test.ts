import { describe, expect, it } from 'vitest';
import { EngineError } from './errors.js';
import {
  defineInferenceEngine,
  type InferenceEngineMethods,
  validateInferenceEngine,
} from './inference-engine.js';
import { createServer } from './server.js';

const methods: InferenceEngineMethods = {
  listModels: () => [{ id: 'm', created: 0, ownedBy: 't', maxModelLen: 8 }],
  tokenize: () => [1],
  applyChatTemplate: () => [1],
  async generate() {
    return (async function* () {})();
  },
  stats: () => ({
    kvCacheUsage: 0,
    blocks: { total: 0, used: 0, cached: 0, free: 0 },
    prefixCache: { queries: 0, hits: 0 },
    requests: { running: 0, waiting: 0, preempted: 0 },
    preemptions: {},
    offloadHits: {},
  }),
  health: () => ({ status: 'ok' }),
};

function refusal(value: unknown): string {
  try {
    validateInferenceEngine(value);
  } catch (error) {
    expect(EngineError.isInstance(error) && error.code).toBe('INVALID_ENGINE');
    return (error as Error).message;
  }
  throw new Error('accepted');
}

describe('the InferenceEngine contract (v1)', () => {
  it('defineInferenceEngine stamps the version; a class declares it', () => {
    expect(defineInferenceEngine(methods).specificationVersion).toBe('v1');
    class Engine {
      readonly specificationVersion = 'v1';
      listModels = methods.listModels;
      tokenize = methods.tokenize;
      applyChatTemplate = methods.applyChatTemplate;
      generate = methods.generate;
      stats = methods.stats;
      health() {
        return { status: 'ok' as const };
      }
    }
    const engine = new Engine();
    expect(validateInferenceEngine(engine)).toBe(engine);
  });

  it('names what is wrong: no object, no or another version, a missing method', () => {
    expect(refusal(null)).toMatch(/must be an object/);
    expect(refusal(methods)).toMatch(/no specificationVersion: make it with defineInferenceEngine/);
    expect(refusal({ ...methods, specificationVersion: 'v2' })).toMatch(/"v2" is not supported/);
    const { health: _, ...noHealth } = methods;
    expect(refusal({ ...noHealth, specificationVersion: 'v1' })).toMatch(
      /missing the method "health"/,
    );
    expect(() => defineInferenceEngine(noHealth as InferenceEngineMethods)).toThrow(/"health"/);
  });

  it('is checked where createServer accepts an engine', () => {
    expect(() => createServer({ engine: methods as never })).toThrow(/specificationVersion/);
    expect(createServer({ engine: defineInferenceEngine(methods) }).inFlight).toBe(0);
  });
});
