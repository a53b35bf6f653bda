import { archFixtureSuite } from '../../testing/arch-fixture-suite.js';

archFixtureSuite('cpu', 1e-3);
