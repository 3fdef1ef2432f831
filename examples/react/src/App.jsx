import { useState } from 'react';
import { useModel } from './useModel.js';
import { Generate } from './Generate.jsx';

const MODEL_URL = '/models/tiny-gpt2-f16.gguf'; // put a GGUF file in public/models/

function ModelPanel() {
  const { model, status, progress, error } = useModel(MODEL_URL);
  if (status === 'error') return <p role="alert">Could not load the model: {error.code}: {error.message}</p>;
  if (status === 'loading') {
    const pct = progress?.total ? ` ${Math.round((100 * progress.loaded) / progress.total)} %` : '';
    return <p data-status="loading">Loading the model…{pct}</p>;
  }
  return (
    <div data-status="ready">
      <p>Loaded {model.info().arch}, {model.inWorker ? 'in a Web Worker' : 'on this thread'}.</p>
      <Generate model={model} />
    </div>
  );
}

export function App() {
  const [shown, setShown] = useState(true);
  return (
    <main>
      <h1>ggweb + React</h1>
      <button onClick={() => setShown((s) => !s)}>{shown ? 'Unmount' : 'Mount'} the model</button>
      {shown && <ModelPanel />}
    </main>
  );
}
