#!/usr/bin/env python3
"""dptrain's WordPiece encoding against the rules of google-research/bert tokenization.py,
written out here in Python (BasicTokenizer: clean, CJK split, lowercase, NFD without Mn,
punctuation split; WordpieceTokenizer: greedy longest match first, 100 characters), on 150
random strings over letters, accented letters, punctuation, CJK, control and format
characters, Unicode spaces and Hangul, with an uncased vocabulary of random pieces.
Python's lower() maps a final capital sigma to the final form, utf8proc's simple mapping does
not (docs/text.md): the alphabet leaves capital sigma out.
Usage: wordpiece_rules_test.py <dptrain> <scratch dir>
"""
import os
import random
import subprocess
import sys
import unicodedata


def is_ws(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def is_punct(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def is_cjk(cp):
    return any(a <= cp <= b for a, b in [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                         (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                                         (0x2B820, 0x2CEAF), (0xF900, 0xFAFF),
                                         (0x2F800, 0x2FA1F)])


def basic(text):
    text = "".join(" " if is_ws(c) else c for c in text
                   if not (ord(c) in (0, 0xFFFD) or is_control(c)))
    text = "".join(f" {c} " if is_cjk(ord(c)) else c for c in text)
    out = []
    for t in text.split():
        t = "".join(c for c in unicodedata.normalize("NFD", t.lower())
                    if unicodedata.category(c) != "Mn")
        word = ""
        for c in t:
            if is_punct(c):
                out += [word] if word else []
                out.append(c)
                word = ""
            else:
                word += c
        out += [word] if word else []
    return out


def wordpiece(word, vocab):
    if len(word) > 100:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and ("##" if start else "") + word[start:end] not in vocab:
            end -= 1
        if end == start:
            return ["[UNK]"]
        pieces.append(("##" if start else "") + word[start:end])
        start = end
    return pieces


def main():
    dptrain, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    alphabet = list(letters + letters.upper() + "éèüöçñÅØßÉ,.!?;:'\"-()[]$%&*中国人日本…σς")
    alphabet += [" ", "\t", "\n", "\u00a0", "\u3000", "\u2028", "\x01", "\x7f", "\u200b",
                 "\ufffd", "\u2014", "\u00bf", "İ", "ﬁ", "Ⅻ", "ǅ", "\u0301", "한"]
    pieces = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 4))) for _ in range(150)}
    vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted(pieces | {"##" + p for p in pieces} | set(letters) |
                    {"##" + c for c in letters})
    vocab += list(",.!?;:'\"-()[]$%&*中国人日本ßçñ…σς") + ["ﬁ", "ⅻ", "ǆ", "ᄒ", "##ᅡ", "##ᆫ"]
    vocab = list(dict.fromkeys(vocab))
    path = os.path.join(scratch, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(scratch, "corpus.txt"), "w") as f:
        f.write("text\n")
    ids = {v: i for i, v in enumerate(vocab)}
    bad = 0
    for trial in range(150):
        n = rng.choice([0, 5, 20, 60, 130])
        text = "".join(rng.choice(alphabet) for _ in range(n))
        if trial % 10 == 0:
            text += " " + "x" * rng.choice([100, 101])
        want = [ids[p] for w in basic(text) for p in wordpiece(w, ids)]
        r = subprocess.run([dptrain, "tokenize", "--data", os.path.join(scratch, "corpus.txt"),
                            "--vocab", path, "--encode", text], capture_output=True, text=True)
        line = [x for x in r.stdout.splitlines() if x.startswith("ids:")]
        got = [int(x) for x in line[0][4:].split()] if line else r.stderr
        if got != want:
            bad += 1
            if bad <= 5:
                print(f"{text!r}:\n  rules   {[vocab[i] for i in want]}\n  dptrain {got}")
    print(f"{150 - bad} of 150 strings encode as the rules say")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
