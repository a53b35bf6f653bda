// The Web Worker that runs the engine. A page does not import it: `createEngine` starts it with
// `new Worker(new URL('./worker.js', import.meta.url), { type: 'module' })`, which bundlers
// (Vite, webpack, Parcel) follow.
import { serveEngine, type WorkerScope } from './engine-host.js';

serveEngine(globalThis as unknown as WorkerScope);
