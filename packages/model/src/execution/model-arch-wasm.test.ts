import { archFixtureSuite } from '../testing/arch-fixture-suite.js';

archFixtureSuite('wasm', 1e-3);
