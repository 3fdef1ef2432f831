import { useEffect, useState } from 'react';
import { Model } from 'ggweb';

/**
 * Loads a model when the component mounts and disposes of it when it unmounts.
 *
 *   const { model, status, progress, error } = useModel('/models/gpt2.Q8_0.gguf', { nCtx: 512 });
 *
 * status: 'loading' | 'ready' | 'error'. `options` are Model.load's options except `signal` and
 * `onProgress` (the hook sets them); they are compared by value (JSON), so an inline object
 * does not reload the model on every render.
 *
 * React StrictMode (development) mounts, unmounts and mounts again: the first load is aborted
 * (its worker ends) and a model that loaded anyway is disposed, so one model stays alive.
 */
export function useModel(url, options) {
  const key = JSON.stringify(options ?? null);
  const [state, setState] = useState({ model: null, status: 'loading', progress: null, error: null });

  useEffect(() => {
    const ctl = new AbortController();
    let model = null;
    console.debug(`useModel: loading ${url}`);
    setState({ model: null, status: 'loading', progress: null, error: null });
    Model.load(url, {
      ...JSON.parse(key),
      signal: ctl.signal,
      onProgress: (progress) => {
        if (!ctl.signal.aborted) setState((s) => ({ ...s, progress }));
      },
    }).then(
      (m) => {
        // Unmounted while the last bytes were read: nobody will use this one.
        if (ctl.signal.aborted) return void m.dispose();
        model = m;
        setState({ model: m, status: 'ready', progress: null, error: null });
      },
      (error) => {
        if (ctl.signal.aborted) return; // our own abort (error.code 'aborted')
        setState({ model: null, status: 'error', progress: null, error });
      },
    );
    return () => {
      console.debug(`useModel: unmounted: ${model ? 'disposing the model' : 'aborting the load'}`);
      ctl.abort();
      model?.dispose();
    };
  }, [url, key]);

  return state;
}
