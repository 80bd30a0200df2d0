"""fsdp-train --tokenizer DIR: GPT-2 byte-level BPE (Hugging Face vocab.json + merges.txt) on text data.
- The test builds its own small tokenizer (the 256 byte symbols in GPT-2's order, then ~300 merges learned
  by a plain BPE training loop on a few KB of text) and a reference encoder written from OpenAI's
  encoder.py (regex.findall of GPT-2's pattern, bytes_to_unicode, bpe() by merge rank, vocab lookup).
- --data TEXT: the printed line names the llm.c token file FILE.<16 hex>.bin; its header (magic 20240520,
  version 1, count) and tokens equal the reference encoding of varied text exactly (contractions, 'S,
  runs of spaces, tabs, blank lines, trailing spaces, punctuation, digits, non-ASCII letters, combining
  marks, multi-codepoint emoji, Unicode spaces, bytes never seen in training: single-byte tokens).
- A second run reuses the cache ("(cached PATH)", same path); after appending to the text it is encoded
  again and equals the reference of the new text.
- vocab.json written with \\uXXXX escapes (ensure_ascii) encodes the same; --val-data TEXT is tokenized too; without --vocab the model's vocabulary is max id + 1 (--save).
- --max-new-tokens with --prompt: a non-empty sample of valid UTF-8 (\\xHH for other bytes) that is 20
  tokens of the vocabulary, decoded.
- Bad tokenizer input: exit 2, one stderr line naming the file, no training and no token file."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--threads", "1",
         "--warmup", "0", "--lr-schedule", "constant", "--lr", "3e-3", "--steps", "1"]
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
N_MERGES = 300
SAMPLE_N = 20


# ---- the published algorithm (OpenAI gpt-2 src/encoder.py) -------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]  # byte values in GPT-2's id order, and their symbols


BYTE_ORDER, SYMBOLS = bytes_to_unicode()
BYTE_ENCODER = dict(zip(BYTE_ORDER, SYMBOLS))
BYTE_DECODER = {v: k for k, v in BYTE_ENCODER.items()}


def get_pairs(word):
    return set(zip(word, word[1:]))


def bpe(token, ranks, cache):
    if token in cache:
        return cache[token]
    word = tuple(token)
    pairs = get_pairs(word)
    while pairs:
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    cache[token] = word
    return word


class RefTokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        self.decoder = {v: k for k, v in vocab.items()}
        self.cache = {}

    def encode(self, text):
        out = []
        for piece in regex.findall(PATTERN, text):
            sym = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            out.extend(self.vocab[s] for s in bpe(sym, self.ranks, self.cache))
        return out

    def token_bytes(self, t):
        return bytes(BYTE_DECODER[c] for c in self.decoder[t])

    def decode(self, tokens):
        return b"".join(self.token_bytes(t) for t in tokens)


# ---- a small tokenizer, trained here ---------------------------------------------------------------

TRAIN_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "It's a truth universally acknowledged, isn't it?",
    "We're going to the market; they've already left, and I'm late.", "You'll see what he'd do with 42 apples.",
    "Numbers like 1234, 56.78 and 2024-05-20 appear in the data.", "She said: \"Hello, world!\" -- and laughed...",
    "The café on the corner serves naïve tourists crème brûlée.", "In the morning, the train was on time.",
    "Training a model takes data, patience and a little luck.", "What's the weather like in the mountains?",
    "Large language models predict the next token from the previous ones.", "A (small) test: [brackets], {braces}.",
    "Shards of the parameters live on every rank; gradients are reduced and scattered.",
    "Don't panic!  There are    several spaces here.", "\tTabs\tand\nnewlines\n\nand blank lines.\n",
    "Émile wrote to Zoë about the Straße in the old town.", "Email: someone@example.com, web: https://example.org/a?b=c",
    "This sentence, like the others, is here to be counted and merged.", "the THE The tHe; there, their, they're.",
]


def training_text():
    rng = __import__("random").Random(0)
    parts = []
    for _ in range(12):
        s = TRAIN_SENTENCES[:]
        rng.shuffle(s)
        parts.append(" ".join(s))
    return "\n".join(parts)


def train_bpe(text, n_merges):
    """Plain BPE over the pre-tokenized pieces: merge the most frequent adjacent pair (ties: the smallest
    pair), repeat. Returns (vocab, merges); ids 0..255 the byte symbols in GPT-2's order, each merge's
    concatenation the next id (a concatenation already in the vocabulary keeps its id)."""
    vocab = {s: i for i, s in enumerate(SYMBOLS)}
    words = {}
    for piece in regex.findall(PATTERN, text):
        w = tuple(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + c
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        vocab.setdefault(joined, len(vocab))
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return vocab, merges


def write_tokenizer(d, vocab, merges, ensure_ascii=False, merges_text=None, vocab_text=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        f.write(vocab_text if vocab_text is not None else json.dumps(vocab, ensure_ascii=ensure_ascii))
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges_text if merges_text is not None else
                "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges) + "\n")
    return d


# ---- the text to encode ----------------------------------------------------------------------------

TEST_TEXT = (
    "Hello world! It's John's book; you're sure they've done it? I'm here, we'll go, he'd say.\n"
    "IT'S LOUD and DON'T SHOUT: 'S is not a contraction, nor is ’s (curly).  'quoted' words ' s 't\n"
    "Multiple   spaces    here,\ttabs\t\tand\ttext.\n\n\n\nAfter blank lines.   \n"
    "Trailing spaces at the end of this line     \n"
    "Punctuation runs: !!! ??? ... --- ((())) [[]] {} <<>> @#$%^&*_+=|\\/~`\n"
    "Digits 0123456789, 3.14159, 1,000,000, abc123def, 42nd, v2.0, x² ½ ٣٤٥.\n"
    "Non-ASCII: café, naïve, Straße, Ærøskøbing, Москва и Россия, Ελληνικά γράμματα, 中文字符测试, 日本語のテキスト, "
    "العربية, 한국어.\n"
    "Combining: e\u0301 cafe\u0301 n\u0303 a\u0308\u0304.\n"
    "Emoji: 👍 👍🏽 👨\u200d👩\u200d👧 🇫🇷🇯🇵 ❤️ 🎉🎉.\n"
    "Spaces: a\u00a0b, c\u2003d, e\u3000f, g \u00a0 h, \u00a0\u00a0lead and trail\u2003\n"
    "Windows line\r\nend. Rare bytes: \u0001\u007f ÿ ¤ Ω ∑ € 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd.\n"
    "   leading spaces and a final line without newline   "
)


def read_token_file(path):
    """(header ints, tokens) of an llm.c token file; None when the file is short or malformed."""
    if not os.path.isfile(path):
        return None
    data = open(path, "rb").read()
    if len(data) < 1024:
        return None
    header = struct.unpack("<256i", data[:1024])
    n = header[2]
    if n < 0 or len(data) != 1024 + 2 * n:
        return header, None
    return header, list(struct.unpack(f"<{n}H", data[1024:]))


LINE = re.compile(r"^fsdp-train: tokenized (.+) with (.+): (\d+) tokens (?:-> (.+)|\(cached (.+)\))$")


def tokenized_lines(stdout):
    """[(file, dir, n, path, cached)] of the 'tokenized' lines."""
    out = []
    for line in stdout.splitlines():
        m = LINE.match(line)
        if m:
            cached = m.group(5) is not None
            out.append((m.group(1), m.group(2), int(m.group(3)), m.group(5) if cached else m.group(4), cached))
    return out


def first_difference(ours, ref, tok):
    n = min(len(ours), len(ref))
    i = next((k for k in range(n) if ours[k] != ref[k]), n)
    lo = max(0, i - 5)

    def show(ts):
        return " ".join(f"{t}:{tok.token_bytes(t)!r}" if t in tok.decoder else f"{t}:?" for t in ts)
    return (f"lengths {len(ours)} vs reference {len(ref)}; first difference at token {i}: "
            f"ours [{show(ours[lo:i + 6])}] reference [{show(ref[lo:i + 6])}]")


def check_encoding(chk, label, stdout, text_path, tok_dir, ref, want_cached=None):
    """The one 'tokenized' line for text_path, its token file and the reference tokens; returns the path."""
    text = open(text_path, encoding="utf-8", newline="").read()
    want = ref.encode(text)
    lines = [x for x in tokenized_lines(stdout) if x[0] == text_path]
    if len(lines) != 1:
        chk.fail(label, f"expected one line 'fsdp-train: tokenized {text_path} with {tok_dir}: N tokens ...', got "
                        f"{lines}; stdout: {stdout[-800:]}")
        return None
    f, d, n, path, cached = lines[0]
    chk.true(f"{label}: the line names the directory and the token file FILE.<16 hex>.bin",
             d == tok_dir and re.fullmatch(re.escape(text_path) + r"\.[0-9a-f]{16}\.bin", path) is not None,
             f"dir {d!r}, path {path!r}")
    if want_cached is not None:
        chk.true(f"{label}: {'(cached PATH)' if want_cached else '-> PATH (encoded)'}", cached == want_cached,
                 f"cached={cached}: {lines[0]}")
    got = read_token_file(path)
    if got is None or got[1] is None:
        chk.fail(label, f"{path}: not a token file of 256 int32 header + count uint16 ({got and got[0][:3]})")
        return path
    header, tokens = got
    chk.true(f"{label}: header magic 20240520, version 1, count = the printed N = {len(want)}",
             header[0] == 20240520 and header[1] == 1 and header[2] == n == len(want) and len(want) > 0,
             f"header {header[:3]}, printed {n}, reference {len(want)}")
    chk.true(f"{label}: the {len(want)} tokens equal the reference GPT-2 BPE encoding",
             len(tokens) > 0 and tokens == want, first_difference(tokens, want, ref))
    return path


def stderr_lines(err):
    """stderr lines, less blank ones and those Open MPI itself prints."""
    mpi = re.compile(r"^(-{10,}|\[[^\]]*\] |.*(Open MPI|OpenMPI|PMIx|pmix|MCA |mca_|btl_|orte|prte))")
    return [x for x in err.splitlines() if x.strip() and not mpi.match(x)]


def segmentations(data, tok_bytes, n):
    """Whether data is exactly n tokens' bytes."""
    maxlen = max(len(b) for b in tok_bytes)
    reach = [set() for _ in range(len(data) + 1)]
    reach[0].add(0)
    for i in range(len(data)):
        if not reach[i]:
            continue
        for k in range(1, min(maxlen, len(data) - i) + 1):
            if data[i:i + k] in tok_bytes:
                reach[i + k].update(c + 1 for c in reach[i] if c + 1 <= n)
    return n in reach[len(data)]


def check_sample(chk, train, tok_dir, text_path, ref):
    cmd = [train, "--tokenizer", tok_dir, "--data", text_path] + MODEL + \
          ["--max-new-tokens", str(SAMPLE_N), "--prompt", "Hello world"]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    r = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
    if r.returncode != 0:
        chk.fail("--max-new-tokens with --tokenizer and --prompt", f"exit {r.returncode}: "
                 f"{r.stderr.decode(errors='replace')[-800:]}")
        return
    m = re.search(rb"--- sample \(%d tokens\) ---\n(.*?)\n--- end of sample ---\n" % SAMPLE_N, r.stdout, re.S)
    chk.true("--max-new-tokens 20 --prompt 'Hello world': the sample block is printed, non-empty",
             m is not None and len(m.group(1)) > 0, r.stdout.decode(errors="replace")[-800:])
    if m is None:
        return
    sample = m.group(1)
    try:
        sample.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError as e:
        utf8 = f"{e}"
    chk.true("... the sample is valid UTF-8 (\\xHH for other bytes)", utf8 is True, f"{utf8}: {sample!r}")
    raw = re.sub(rb"\\x([0-9A-Fa-f]{2})", lambda x: bytes([int(x.group(1), 16)]), sample)
    toks = {ref.token_bytes(t) for t in ref.decoder}
    ok = any(segmentations(raw + tail, toks, SAMPLE_N) for tail in (b"", b"\n"))
    chk.true(f"... it is {SAMPLE_N} tokens of the vocabulary decoded to bytes (not ids, not one byte per token: "
             f"{len(raw)} bytes)", ok and len(raw) > SAMPLE_N, repr(sample))


def check_bad_inputs(chk, train, tmp, vocab, merges, text_path):
    def refused(label, tok_dir, names):
        before = set(os.listdir(os.path.dirname(text_path)))
        r = proc([train, "--tokenizer", tok_dir, "--data", text_path] + MODEL, expect_ok=False)
        lines = stderr_lines(r.stderr)
        new = sorted(set(os.listdir(os.path.dirname(text_path))) - before)
        chk.true(f"{label}: exit 2, one stderr line naming {' or '.join(names)}, no training, no token file",
                 r.returncode == 2 and len(lines) == 1 and any(n in lines[0] for n in names)
                 and "step " not in r.stdout and not new,
                 f"rc {r.returncode}, stderr {r.stderr[-600:]!r}, new files {new}, stdout {r.stdout[-300:]!r}")

    def variant(name, **kw):
        return write_tokenizer(os.path.join(tmp, "bad", name), vocab, merges, **kw)

    refused("--tokenizer of a missing directory", os.path.join(tmp, "bad", "no_such_tokenizer"),
            ["no_such_tokenizer"])
    d = variant("no_vocab")
    os.remove(os.path.join(d, "vocab.json"))
    refused("vocab.json missing", d, ["vocab.json"])
    d = variant("no_merges")
    os.remove(os.path.join(d, "merges.txt"))
    refused("merges.txt missing", d, ["merges.txt"])
    good = json.dumps(vocab, ensure_ascii=False)
    for name, text in (("truncated", good[:len(good) // 2]), ("empty", ""), ("array", "[1, 2, 3]"),
                       ("negative", good[:-1] + ', "<neg>": -1}'), ("string_id", good[:-1] + ', "<s>": "7"}'),
                       ("fraction", good[:-1] + ', "<f>": 1.5}'), ("trailing", good + " x")):
        refused(f"vocab.json not an object of string -> non-negative integer ({name})",
                variant(f"vocab_{name}", vocab_text=text), ["vocab.json"])
    head = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges[:10])
    a, b = merges[0]
    refused("a merges.txt line of three symbols", variant("three", merges_text=head + f"{a} {b} {a}\n"),
            ["merges.txt"])
    refused("a merges.txt line of one symbol", variant("one", merges_text=head + f"{a}{b}\n"), ["merges.txt"])
    # parts in the vocabulary, their concatenation not; a part not in the vocabulary
    x, y = next((p, q) for p in SYMBOLS for q in SYMBOLS if p + q not in vocab)
    refused("a merge whose concatenation is not in vocab.json", variant("concat", merges_text=head + f"{x} {y}\n"),
            ["merges.txt", "vocab.json"])
    refused("a merge whose part is not in vocab.json", variant("part", merges_text=head + "NOT_A_TOKEN " + a + "\n"),
            ["merges.txt", "vocab.json"])
    # no merges at all, and one of the 256 byte symbols missing
    partial = {s: i for i, s in enumerate(SYMBOLS) if s != BYTE_ENCODER[0xF0]}
    d = write_tokenizer(os.path.join(tmp, "bad", "missing_byte"), partial, [])
    refused("vocab.json lacking the symbol of byte 0xF0", d, ["vocab.json"])
    # a token with a character outside GPT-2's byte alphabet (its bytes are unknowable)
    outside = dict(vocab)
    outside["\U0001F600tok"] = len(outside)
    d = write_tokenizer(os.path.join(tmp, "bad", "outside_alphabet"), outside, merges)
    refused("a vocab.json token outside GPT-2's byte alphabet", d, ["vocab.json"])


def main():
    args = parse_args()
    chk = Checker("tokenizer")
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()

    train_text = training_text()
    vocab, merges = train_bpe(train_text, N_MERGES)
    ref = RefTokenizer(vocab, merges)
    chk.true(f"the test's tokenizer: 256 byte symbols + {len(merges)} merges (vocab {len(vocab)})",
             len(merges) == N_MERGES and len(vocab) > 256 + N_MERGES // 2 and max(vocab.values()) == len(vocab) - 1)
    text = TEST_TEXT * 3
    want = ref.encode(text)
    chk.true("the reference encoder round-trips the text and uses merges and unseen-byte tokens",
             ref.decode(want) == text.encode("utf-8") and len(want) > 16 + 1 and any(t >= 256 for t in want)
             and set(text.encode("utf-8")) - set(train_text.encode("utf-8"))
             and any(len(ref.token_bytes(t)) == 1 and ref.token_bytes(t)[0] not in train_text.encode("utf-8")
                     for t in want), f"{len(want)} tokens")

    tok_dir = write_tokenizer(os.path.join(tmp, "tok"), vocab, merges)
    os.makedirs(os.path.join(tmp, "data"))
    text_path = os.path.join(tmp, "data", "corpus.txt")
    with open(text_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)

    base = [train, "--tokenizer", tok_dir, "--data", text_path] + MODEL
    r = proc(base)
    path = check_encoding(chk, "--data TEXT --tokenizer DIR", r.stdout, text_path, tok_dir, ref, want_cached=False)
    chk.true("... and it trains on them (a step line)", "step " in r.stdout, r.stdout[-400:])

    r = proc(base)
    again = check_encoding(chk, "second run", r.stdout, text_path, tok_dir, ref, want_cached=True)
    chk.true("second run: the same token file", path is not None and again == path, f"{again} vs {path}")

    with open(text_path, "a", encoding="utf-8", newline="") as f:
        f.write("\nAppended: más texto, ещё текст, 更多文字 🚀 and it's new.\n")
    st = os.stat(text_path)
    os.utime(text_path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # newer than the cache, surely
    r = proc(base)
    check_encoding(chk, "after appending to the text", r.stdout, text_path, tok_dir, ref, want_cached=False)

    # vocab.json with \uXXXX escapes (every non-ASCII symbol of the byte alphabet, and tokens no merge
    # makes: <|endoftext|> and the bytes of "\U0001F600tok"), --val-data TEXT, and the model's vocabulary
    # = max id + 1 without --vocab
    extra = dict(vocab)
    extra["<|endoftext|>"] = len(extra)
    extra["".join(BYTE_ENCODER[b] for b in "\U0001F600tok".encode("utf-8"))] = len(extra)
    asc_dir = write_tokenizer(os.path.join(tmp, "tok_ascii"), extra, merges, ensure_ascii=True)
    raw = open(os.path.join(asc_dir, "vocab.json"), encoding="ascii").read()
    chk.true("the ensure_ascii vocab.json holds \\uXXXX escapes", "\\u0120" in raw and "\\u00f0" in raw)
    asc_text, val_text = os.path.join(tmp, "data", "ascii.txt"), os.path.join(tmp, "data", "val.txt")
    with open(asc_text, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(val_text, "w", encoding="utf-8", newline="") as f:
        f.write(TEST_TEXT[::-1] * 2)
    saved = os.path.join(tmp, "w.safetensors")
    r = proc([train, "--tokenizer", asc_dir, "--data", asc_text, "--val-data", val_text, "--eval-every", "1",
              "--eval-batches", "1", "--save", saved] + MODEL)
    ref_asc = RefTokenizer(extra, merges)
    check_encoding(chk, "vocab.json with \\u escapes", r.stdout, asc_text, asc_dir, ref_asc, want_cached=False)
    check_encoding(chk, "--val-data TEXT", r.stdout, val_text, asc_dir, ref_asc, want_cached=False)
    from fsdp_testlib import st_read
    try:
        wte = st_read(saved)[0].get("wte.weight", {}).get("shape")
    except (OSError, ValueError, struct.error) as e:
        wte = f"{e}"
    chk.true(f"without --vocab the model's vocabulary is the tokenizer's max id + 1 ({len(extra)})",
             wte == [len(extra), 32], f"wte.weight shape {wte}")

    check_sample(chk, train, tok_dir, text_path, ref)
    check_bad_inputs(chk, train, tmp, vocab, merges, text_path)
    if not chk.failures:  # kept for a look when something failed
        shutil.rmtree(tmp, ignore_errors=True)
    chk.report()


if __name__ == "__main__":
    main()
