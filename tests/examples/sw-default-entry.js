// A service worker that imports the default 'ggweb' entry, which picks its wasm build with
// import(): the load must fail with a GgwebError that names 'ggweb/sw' (tests/examples).
import { Model } from '/node_modules/ggweb/web/ggweb.js';

self.addEventListener('message', (event) => {
  event.waitUntil((async () => {
    try {
      const m = await Model.load(event.data.model);
      await m.dispose();
      event.ports[0].postMessage({ loaded: true });
    } catch (e) {
      event.ports[0].postMessage({ name: e.name, code: e.code, message: e.message });
    }
  })());
});
