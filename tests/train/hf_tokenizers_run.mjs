// hf_tokenizers_run.mjs: the reference side of test_hf_tokenizers.py: @huggingface/tokenizers (the npm
// package: a pure JavaScript implementation of tokenizer.json) encodes and decodes texts.
// usage: node hf_tokenizers_run.mjs PACKAGE_DIR TOKENIZER_JSON TEXTS_JSON
// TEXTS_JSON: a JSON array of strings. Prints a JSON array, one object per text: ids (no special tokens),
// ids_special (add_special_tokens), decoded and decoded_skip (decode(ids_special) keeping / skipping the
// special tokens).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [pkg, tokPath, textsPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(`${pkg}/dist/tokenizers.mjs`).href);
const tok = new Tokenizer(JSON.parse(readFileSync(tokPath, "utf8")), { clean_up_tokenization_spaces: false });
const out = JSON.parse(readFileSync(textsPath, "utf8")).map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const ids_special = tok.encode(text, { add_special_tokens: true }).ids;
  return {
    ids,
    ids_special,
    decoded: tok.decode(ids_special, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
    decoded_skip: tok.decode(ids_special, { skip_special_tokens: true, clean_up_tokenization_spaces: false }),
  };
});
process.stdout.write(JSON.stringify(out));
