// llama.cpp's model loader on each GGUF, through node-llama-cpp's addon (its internal
// AddonModel, vocab-only: llama_model_loader's constructor, which runs gguf_init_from_file
// and the per-tensor bounds check, then the hyperparameter and vocabulary loads; no tensor
// data is read). One JSON line per file: {"file", "loads", "error"} where error is the
// loader's first error line ("" when it loads).
// Usage: node loader.cjs BINS_DIR FILE.gguf...   (BINS_DIR holds llama-addon.node)
'use strict';
const path = require('path');

const [binsDir, ...files] = process.argv.slice(2);
const addon = require(path.join(binsDir, 'llama-addon.node'));
const errors = [];
addon.setLogger((level, message) => {
  if (/error/i.test(message)) errors.push(String(message).trim());
});
addon.setLoggerLogLevel(5);
addon.loadBackends(binsDir);

// The logger is called from the loader's thread through the event loop: give it a turn
// after each load so that a file's messages are read before the next file starts.
const drain = () => new Promise((resolve) => setTimeout(resolve, 20));

(async () => {
  await addon.init();
  for (const file of files) {
    errors.length = 0;
    let loads = false;
    let thrown = '';
    try {
      const model = new addon.AddonModel(file, { addonExports: addon, vocabOnly: true, gpuLayers: 0 });
      loads = Boolean(await model.init());
      if (loads) await model.dispose();
    } catch (e) {
      thrown = String(e && e.message ? e.message : e);
    }
    await drain();
    const error = loads ? '' : (errors.find((l) => /error loading model:/.test(l)) || errors[0] || thrown || 'load failed');
    console.log(JSON.stringify({ file, loads, error }));
  }
  await addon.dispose();
})().catch((e) => {
  console.error(String(e));
  process.exit(2);
});
