import { archFixtureSuite } from '../testing/arch-fixture-suite.js';

archFixtureSuite('wasm', 2e-3);
