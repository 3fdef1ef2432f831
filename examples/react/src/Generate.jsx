import { useEffect, useRef, useState } from 'react';

/** A prompt box and the model's continuation, streamed into the page token by token. */
export function Generate({ model }) {
  const [prompt, setPrompt] = useState('Hello, my name is');
  const [text, setText] = useState('');
  const [state, setState] = useState('idle'); // idle | generating | done | error
  const ctl = useRef(null);

  // Stops a running generation when the component unmounts.
  useEffect(() => () => ctl.current?.abort(), []);

  async function run() {
    ctl.current?.abort();
    const c = (ctl.current = new AbortController());
    setText('');
    setState('generating');
    try {
      for await (const t of model.generate(prompt, { maxTokens: 20, temperature: 0, signal: c.signal })) {
        setText((s) => s + t.text);
      }
      setState('done');
    } catch (e) {
      if (c.signal.aborted) return; // stopped, or unmounted
      setText(`${e.code}: ${e.message}`);
      setState('error');
    }
  }

  return (
    <section>
      <input value={prompt} onChange={(e) => setPrompt(e.target.value)} size={40} aria-label="Prompt" />
      <button onClick={run} disabled={state === 'generating'}>Generate</button>
      <button onClick={() => ctl.current?.abort()} disabled={state !== 'generating'}>Stop</button>
      <p>
        <b>{prompt}</b>
        <output data-state={state}>{text}</output>
      </p>
    </section>
  );
}
