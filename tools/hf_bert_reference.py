#!/usr/bin/env python3
"""BERT for masked-language modelling with the structure and tensor names of Hugging Face
transformers' BertForMaskedLM (models/bert/modeling_bert.py: BertEmbeddings, BertSelfAttention,
BertSelfOutput, BertIntermediate, BertOutput, BertLMPredictionHead), written here in plain
PyTorch, for checking what `dptrain checkpoint export --format hf` writes.

Usage: python3 tools/hf_bert_reference.py DIR --inputs IDS.safetensors
                                          [--compare LOGITS.safetensors] [--tol 1e-5]
                                          [--logits OUT.safetensors]
DIR holds config.json and model.safetensors; IDS an int32 tensor "inputs" or "val_inputs"
[N, seq_len] (dptrain tokenize --export writes val_inputs). The weights load with
load_state_dict(strict=True) (the decoder's bias is the head's bias, as in transformers). Prints
the logits' shape and, with --compare (dptrain predict's "logits" [N, seq_len, vocab]), the
largest absolute difference; exits 1 when it exceeds --tol. Keys [PAD] (id pad_token_id) are
masked, as transformers does with attention_mask = ids != pad. Needs python3-torch and numpy.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
from torch import nn


def read_safetensors(path):
    """The tensors of a safetensors file, by name (the format read directly)."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """float32 tensors to a safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"],
                                            padding_idx=c.get("pad_token_id", 0))
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c.get("type_vocab_size", 2), c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(c.get("hidden_dropout_prob", 0.1))

    def forward(self, ids):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        types = torch.zeros_like(ids)
        e = self.word_embeddings(ids) + self.token_type_embeddings(types)
        e = e + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(e))


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.head_size = h // self.heads
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dropout = nn.Dropout(c.get("attention_probs_dropout_prob", 0.1))

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size) + mask
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = (probs @ v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.shape[0], ctx.shape[1], -1)


class BertSelfOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(c.get("hidden_dropout_prob", 0.1))

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        return nn.functional.gelu(self.dense(x))  # hidden_act "gelu": the erf form


class BertOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["intermediate_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(c.get("hidden_dropout_prob", 0.1))

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c)

    def forward(self, x, mask):
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c["num_hidden_layers"]))

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertModel(nn.Module):
    """BertModel(add_pooling_layer=False), as BertForMaskedLM builds it."""

    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)

    def forward(self, ids, attention_mask):
        # transformers' extended mask: 0 where attended, the dtype's minimum where not.
        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        return self.encoder(self.embeddings(ids), mask)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))

    def forward(self, x):
        return self.LayerNorm(nn.functional.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transform = BertPredictionHeadTransform(c)
        self.decoder = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.decoder.bias = self.bias

    def forward(self, x):
        return self.decoder(self.transform(x))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.predictions = BertLMPredictionHead(c)

    def forward(self, x):
        return self.predictions(x)


class BertForMaskedLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = BertModel(c)
        self.cls = BertOnlyMLMHead(c)
        if c.get("tie_word_embeddings", True):
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, ids, attention_mask):
        return self.cls(self.bert(ids, attention_mask))


def load(directory):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
        sys.exit(f"{directory}/config.json: not a BERT with hidden_act gelu")
    model = BertForMaskedLM(config)
    state = read_safetensors(os.path.join(directory, "model.safetensors"))
    state.setdefault("cls.predictions.decoder.bias", state.get("cls.predictions.bias"))
    tied = state["cls.predictions.decoder.weight"]
    if not torch.equal(tied, state["bert.embeddings.word_embeddings.weight"]):
        sys.exit(f"{directory}: the decoder's weight is not the word embeddings")
    model.load_state_dict(state, strict=True)
    return config, model.eval()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--inputs", required=True)
    p.add_argument("--compare", help="dptrain predict's logits to compare with")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--logits", help="write the logits here (safetensors)")
    a = p.parse_args()
    torch.set_num_threads(1)
    config, model = load(a.dir)
    t = read_safetensors(a.inputs)
    ids = (t["inputs"] if "inputs" in t else t["val_inputs"]).long()
    with torch.no_grad():
        logits = model(ids, ids != config.get("pad_token_id", 0))
    print(f"logits {list(logits.shape)} from {a.dir}")
    if a.logits:
        write_safetensors(a.logits, {"logits": logits})
    if a.compare:
        theirs = read_safetensors(a.compare)["logits"]
        if theirs.shape != logits.shape:
            sys.exit(f"FAIL: dptrain's logits are {list(theirs.shape)}, ours {list(logits.shape)}")
        diff = (theirs - logits).abs().max().item()
        scale = logits.abs().max().item()
        print(f"largest |dptrain - reference| = {diff:.3g} (largest |logit| {scale:.3g}, "
              f"tolerance {a.tol:g})")
        if not diff <= a.tol:
            sys.exit(1)


if __name__ == "__main__":
    main()
