// The model in a service worker. Registered by page.js as a module service worker; the page
// sends { type: 'generate', model, prompt, options } with a MessagePort and gets the tokens
// back on that port as they come.
//
// 'ggweb/sw' is ggweb's entry for scopes where `import()` is forbidden: it imports its wasm
// builds statically and runs the model here, in the service worker (no Web Worker, one thread).
// Service workers have no import maps: without a bundler, import the installed file by path.
import { Model } from './node_modules/ggweb/web/ggweb-sw.js';

/** url → Promise<Model>. The browser stops an idle service worker (after ~30 s in Chromium):
 *  this map is then gone and the next message loads the model again (add `{ cache: true }` to
 *  Model.load to keep the file in the Cache API, so that costs no download). */
const models = new Map();

function model(url) {
  let p = models.get(url);
  if (!p) {
    p = Model.load(new URL(url, self.location.href).href);
    models.set(url, p);
    p.catch(() => models.delete(url));
  }
  return p;
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('message', (event) => {
  const port = event.ports[0];
  if (!port || event.data?.type !== 'generate') return;
  // waitUntil keeps the service worker alive until the generation is over.
  event.waitUntil(generate(event.data, port));
});

async function generate({ model: url, prompt, options }, port) {
  try {
    const m = await model(url);
    for await (const t of m.generate(prompt, options)) port.postMessage({ type: 'token', token: t.token, text: t.text });
    const { threads, load } = m.info();
    port.postMessage({ type: 'done', threads, inWorker: load.worker, scope: self.constructor.name });
  } catch (e) {
    port.postMessage({ type: 'error', code: e.code, message: e.message });
  } finally {
    port.close();
  }
}
