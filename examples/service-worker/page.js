// The page: registers sw.js and streams a generation from it into #out.
const $ = (id) => document.getElementById(id);

/** Streams { token, text } items from the service worker for `prompt`. */
async function* generate(prompt, options) {
  const reg = await navigator.serviceWorker.ready;
  const { port1, port2 } = new MessageChannel();
  const queue = [];
  let wake = null;
  port1.onmessage = (e) => { queue.push(e.data); wake?.(); };
  reg.active.postMessage({ type: 'generate', model: $('model').value, prompt, options }, [port2]);
  for (;;) {
    while (!queue.length) await new Promise((r) => { wake = r; });
    const m = queue.shift();
    if (m.type === 'token') yield m;
    else if (m.type === 'error') throw Object.assign(new Error(m.message), { code: m.code });
    else return m; // 'done': which build ran, and where
  }
}

$('go').onclick = async () => {
  $('go').disabled = true;
  $('out').textContent = '';
  $('ids').textContent = '';
  document.body.dataset.state = 'generating';
  try {
    const ids = [];
    const it = generate($('prompt').value, { maxTokens: 20, temperature: 0 });
    let r;
    while (!(r = await it.next()).done) {
      $('out').textContent += r.value.text;
      ids.push(r.value.token);
    }
    $('ids').textContent = ids.join(' ');
    $('where').textContent = `${r.value.scope}, ${r.value.threads.build}, ${r.value.threads.n} thread (${r.value.threads.reason})`;
    document.body.dataset.state = 'done';
  } catch (e) {
    $('out').textContent = `${e.code ?? e.name}: ${e.message}`;
    document.body.dataset.state = 'error';
  } finally {
    $('go').disabled = false;
  }
};

await navigator.serviceWorker.register('./sw.js', { type: 'module' });
await navigator.serviceWorker.ready;
$('go').disabled = false;
document.body.dataset.state = 'ready';
