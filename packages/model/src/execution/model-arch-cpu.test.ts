import { archFixtureSuite } from '../testing/arch-fixture-suite.js';

archFixtureSuite('cpu', 2e-3);
