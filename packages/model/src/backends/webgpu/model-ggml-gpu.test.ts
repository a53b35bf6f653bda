import { afterAll } from 'vitest';
import { ggmlFixtureSuite } from '../../testing/ggml-fixture-suite.js';
import { releaseTestGpu } from '../../testing/model.js';

// Q4_K_M mixes Q4_K and Q6_K (210-byte blocks, most of them unaligned); Q4_0's 18-byte
// blocks are unaligned too. Two fixtures: the software adapter is slow.
ggmlFixtureSuite('webgpu', ['Q4_K_M', 'Q4_0'], 2e-3);

afterAll(releaseTestGpu);
