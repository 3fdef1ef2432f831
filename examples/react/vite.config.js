import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// Nothing ggweb-specific: Vite emits ggweb's worker and wasm builds by itself.
export default defineConfig({ plugins: [react()] });
