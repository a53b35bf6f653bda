import { afterAll } from 'vitest';
import { archFixtureSuite } from '../../testing/arch-fixture-suite.js';
import { releaseTestGpu } from '../../testing/model.js';

archFixtureSuite('webgpu', 1e-3);

afterAll(releaseTestGpu);
