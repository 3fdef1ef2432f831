// ggweb for service workers, and other scopes where `import()` is forbidden.
//
//   // sw.js, registered with navigator.serviceWorker.register('/sw.js', { type: 'module' })
//   import { Model } from 'ggweb/sw';
//   const model = await Model.load('/models/gpt2.Q8_0.gguf', { cache: true });
//
// The same API as 'ggweb' (ggweb.js). The default entry imports its wasm build with `import()`
// once it knows which one fits (threads, relaxed SIMD); a service worker refuses any `import()`.
// This entry imports the two single-thread builds statically instead (their glue modules only:
// a build's .wasm is fetched when it is first used) and runs the model in the service worker
// itself: no Web Worker (a service worker cannot start one), one CPU thread, relaxed SIMD where
// the engine has it (`relaxedSimd: false` for the plain build).
import * as pkg from './pkg/ggweb_core.js';
import * as pkgRelaxed from './pkg-relaxed/ggweb_core.js';
import { provideCore } from './builds.js';

provideCore('pkg', pkg);
provideCore('pkg-relaxed', pkgRelaxed);

export * from './ggweb.js';
export { default } from './ggweb.js';
