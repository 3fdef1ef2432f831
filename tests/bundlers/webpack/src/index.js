// The app: ggweb imported by its package name, as any app would. The test drives it from the page.
import { Model, GgwebError } from 'ggweb';

window.ggweb = { Model, GgwebError };
document.title = 'ready';
