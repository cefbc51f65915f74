// golden.js regenerates ../golden.json: the ids the Hugging Face Rust
// library (npm "tokenizers", the Node binding of the Rust crate) gives each
// synthetic tokenizer for every string in ../inputs.json.
//
//   cd /tmp/oracle && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/oracle/node_modules node golden.js > ../golden.json
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const path = require('path');

const dir = path.join(__dirname, '..');
const inputs = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'));
const names = fs.readdirSync(dir)
  .filter(f => f.endsWith('.json') && f !== 'inputs.json' && f !== 'golden.json')
  .map(f => f.slice(0, -5)).sort();

(async () => {
  const out = {};
  for (const name of names) {
    const tok = Tokenizer.fromFile(path.join(dir, name + '.json'));
    const cases = [];
    for (const text of inputs) {
      const ws = await tok.encode(text, null, { addSpecialTokens: true });
      const ns = await tok.encode(text, null, { addSpecialTokens: false });
      cases.push({ text, with_special: Array.from(ws.getIds()), no_special: Array.from(ns.getIds()) });
    }
    out[name] = { cases };
  }
  process.stdout.write(JSON.stringify(out, null, 1) + '\n');
})();
