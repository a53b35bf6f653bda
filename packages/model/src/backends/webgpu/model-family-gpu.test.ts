import { familySuite } from '../../testing/family-suite.js';

familySuite('webgpu');
