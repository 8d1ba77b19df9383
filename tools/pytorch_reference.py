#!/usr/bin/env python3
"""The recipes of `dptrain train` in PyTorch, for comparing accuracies, and a reader of
dptrain's weights files.

Usage: python3 tools/pytorch_reference.py [--model mlp|resnet] [--depth 20] [--hidden 512,256]
                                          [--seed S] [--schedule constant|cosine] [--data DIR]
       python3 tools/pytorch_reference.py --model resnet --depth 20 --load-weights FILE
                                          [--limit N] [--json] [--logits out.csv]
       python3 tools/pytorch_reference.py --model bert --text-data SEQS.safetensors
                                          [--layers 4] [--hidden 256] [--heads 4] [--ffn 1024]
                                          [--global-batch 32] [--epochs E | --max-steps S]
                                          [--lr 5e-4] [--warmup N] [--save-weights FILE]
       python3 tools/pytorch_reference.py --model bert --text-data SEQS.safetensors
                                          --load-weights FILE [--json]
Needs Debian's python3-torch and python3-numpy (not dependencies of dptrain).

Training: the model (mlp: Flatten-Linear/ReLU...-Linear, 784-512-256-10 by default; resnet: the
CIFAR-style ResNet of dpt_model_spec_resnet, depth 6n+2) with PyTorch's default initialization,
SGD lr 0.05 momentum 0.9, batches of 256 from a fresh permutation each epoch (last partial batch
dropped), inputs x/255, 10 epochs; prints the test accuracy after each epoch. One thread, like a
dptrain rank.

--load-weights: no training; reads a safetensors file written by dptrain (`dptrain train
--save-weights`) into the same model with load_state_dict(strict=True) (every tensor and
buffer, batch norm's running statistics and counters included) and prints the eval-mode test
accuracy over the first --limit test images; --json prints {"samples", "correct", "loss",
"accuracy"} instead, --logits FILE writes the logits as `dptrain predict --logits` does.
The safetensors package is used when present, else a reader of the format's three parts
(8-byte little-endian header length, JSON header, raw little-endian data).

DLRM (no command line): the module of dpt_model_spec_dlrm with DLRM_Net's state_dict names, for
tests/scripts/pytorch_dlrm_test.sh.

--model bert: BertMLM, the masked-language-model encoder of dpt_model_spec_bert (post-LN BERT,
state_dict names as dptrain's), on the sequences `dptrain tokenize --export` writes (--text-data:
int32 "train" [N, S] unmasked, "val_inputs"/"val_labels" [M, S] masked by dptrain with its seed
at epoch 0; the vocabulary size and seq_len come from its metadata). The recipe (BERT's, with
dptrain's AdamW defaults): weights normal(0, 0.02), biases 0; AdamW betas (0.9, 0.999), eps 1e-8
(dptrain's dpt_optim_config_default; BERT's paper used 1e-6), weight decay 0.01 on the tensors
of two or more dimensions (embeddings, in_proj_weight, linear weights) and none on biases and
layer norm parameters (dptrain: --no-decay '*bias,*norm*'); the learning rate warms up linearly
over --warmup steps (lr * (s + 1) / warmup at step s, as dpt_optim_lr_at) then decays linearly
to 0 at the last step (--schedule linear) or stays (constant); gradients clipped to global norm
--clip-norm 1.0; batches of --global-batch from a fresh permutation each epoch (last partial
batch dropped). Every epoch masks the training sequences anew in torch, as BERT does: 15 % of the
positions holding ids >= 4 (not [PAD] [CLS] [SEP] [MASK]), of which 80 % become [MASK] (3), 10 %
a token uniform in [4, V) and 10 % stay; labels -100 elsewhere (torch's generator, so not
dptrain's masks). The loss is cross-entropy over the labelled positions, mean over the batch's
targets. After each epoch it prints the validation loss (mean over the masked targets),
perplexity exp(loss) and masked-token accuracy on val_inputs/val_labels, and the unigram
baseline perplexity (training token frequencies of ids >= 4, add-one smoothed, on the same
targets). --load-weights evaluates a dptrain (or --save-weights) file, loaded strictly.
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
from torch import nn


def idx(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn, plus the input or its projection (1x1 strided conv + bn where
    the shape changes), then relu; names as dptrain gives them."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """dpt_model_spec_resnet: conv3x3(16)-bn-relu, three stages of n basic blocks (16, 32, 64
    channels; the first block of stages 2 and 3 has stride 2), global average pool, fc."""

    def __init__(self, depth, channels=1, classes=10):
        super().__init__()
        assert depth >= 8 and (depth - 2) % 6 == 0, "depth must be 6n+2"
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        width = 16
        for stage in (1, 2, 3):
            out = 16 << (stage - 1)
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(width, out, 2 if stage > 1 and b == 0 else 1))
                width = out
            setattr(self, f"layer{stage}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def mlp(hidden, features=784, classes=10):
    """dpt_model_spec_mlp: flatten (layer 0), then Linear/ReLU per hidden size, then Linear."""
    layers, width = [nn.Flatten()], features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes))


def read_safetensors(path):
    """The tensors of a safetensors file, by name."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors


def read_safetensors_metadata(path):
    """The "__metadata__" strings of a safetensors file (read from its header)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header.get("__metadata__", {})


def write_safetensors(path, tensors, metadata=None):
    """Writes tensors (name -> tensor, in that order) as safetensors through "<path>.tmp": with
    the safetensors package when present, else by hand (header padded with spaces to 8 bytes)."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    tmp = path + ".tmp"
    try:
        from safetensors.torch import save_file
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
        return
    except ImportError:
        pass
    names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
             torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


# ---- DLRM ---------------------------------------------------------------------------------------


def dlrm_mlp(sizes, last_relu):
    """Linear/ReLU pairs over sizes [in, h1, ..., out] as DLRM_Net's create_mlp (Linear at even
    indices, ReLU at odd); without last_relu the last Linear has none (the loss takes logits)."""
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """dpt_model_spec_dlrm: facebookresearch/dlrm's DLRM_Net with its state_dict names (emb_l.T,
    bot_l.N, top_l.N). Bottom MLP num_dense -> bottom... -> dim with ReLU after every Linear; one
    nn.EmbeddingBag(rows, dim, mode) per table; interaction "dot" (the bottom output, then the
    dot products of the K = 1 + tables vectors below the diagonal, torch.tril_indices(K, K, -1)
    order) or "cat" (the K vectors side by side); top MLP -> top... -> 1 without a last ReLU:
    one logit per sample, for BCEWithLogitsLoss. Tables normal(0, sqrt(1/(3 rows))) (the
    variance of DLRM_Net's uniform(+-sqrt(1/rows))) and Linear kaiming-uniform, as
    dpt_model_spec_dlrm initializes them."""

    def __init__(self, num_dense, table_rows, dim, bottom=(), top=(), interaction="dot",
                 mode="sum"):
        super().__init__()
        self.interaction = interaction
        self.emb_l = nn.ModuleList(nn.EmbeddingBag(n, dim, mode=mode) for n in table_rows)
        for table, n in zip(self.emb_l, table_rows):
            nn.init.normal_(table.weight, 0.0, math.sqrt(1.0 / (3.0 * n)))
        self.bot_l = dlrm_mlp([num_dense, *bottom, dim], last_relu=True)
        k = 1 + len(table_rows)
        width = dim + k * (k - 1) // 2 if interaction == "dot" else k * dim
        self.top_l = dlrm_mlp([width, *top, 1], last_relu=False)

    @staticmethod
    def bag(table, ids):
        """table over ids [B, bag], an id < 0 an empty slot (an empty bag gives zeros)."""
        valid = ids >= 0
        counts = valid.sum(1)
        offsets = torch.cumsum(counts, 0) - counts
        return table(ids[valid].long(), offsets.long())

    def forward(self, dense, ids):
        """dense [B, num_dense] floats, ids [B, tables, bag] int: logits [B]."""
        x = self.bot_l(dense)
        ly = [self.bag(t, ids[:, j]) for j, t in enumerate(self.emb_l)]
        if self.interaction == "dot":
            t = torch.stack([x] + ly, dim=1)
            z = torch.bmm(t, t.transpose(1, 2))
            li, lj = torch.tril_indices(t.shape[1], t.shape[1], offset=-1)
            r = torch.cat([x, z[:, li, lj]], dim=1)
        else:
            r = torch.cat([x] + ly, dim=1)
        return self.top_l(r).squeeze(1)


def dlrm_from_options(opts):
    """A DLRM from dlrm_dump's options (the "dlrm" metadata: num_dense, table_rows, dim, bag,
    mode, bottom, top, interaction)."""
    return DLRM(opts["num_dense"], opts["table_rows"], opts["dim"], opts.get("bottom", ()),
                opts.get("top", ()), opts.get("interaction", "dot"), opts.get("mode", "sum"))


# ---- BERT ---------------------------------------------------------------------------------------

PAD, CLS, SEP, MASK, FIRST_TOKEN = 0, 1, 2, 3, 4
IGNORE = -100
LN_EPS = 1e-12


class BertEmbeddings(nn.Module):
    """embed.tok (token table), embed.pos (position table over arange(S)), embed.norm."""

    def __init__(self, vocab, positions, hidden):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(positions, hidden)
        self.norm = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.tok(ids) + self.pos(positions))


class BertBlock(nn.Module):
    """Post-LN: x = norm1(x + drop(attn(x))); x = norm2(x + drop(ffn2(gelu(ffn1(x)))))."""

    def __init__(self, hidden, heads, ffn, dropout, attn_dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(hidden, heads, dropout=attn_dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.ffn1 = nn.Linear(hidden, ffn)
        self.ffn2 = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, x, pad):
        a, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.norm1(x + self.drop(a))
        h = self.ffn2(nn.functional.gelu(self.ffn1(x)))
        return self.norm2(x + self.drop(h))


class TiedDecoder(nn.Module):
    """mlm.decoder: logits = x @ embed.tok.weight^T + bias; only the bias is its own."""

    def __init__(self, vocab):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, x, weight):
        return nn.functional.linear(x, weight, self.bias)


class MlmHead(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=LN_EPS)
        self.decoder = TiedDecoder(vocab)


class BertMLM(nn.Module):
    """dpt_model_spec_bert: embeddings, dropout, `layers` post-LN blocks, the MLM head (dense,
    gelu, norm, decoder tied to embed.tok). Input ids [B, S]; keys holding [PAD] (0) are masked in
    attention; logits [B, S, vocab]."""

    def __init__(self, vocab, seq_len, layers=4, hidden=256, heads=4, ffn=1024, dropout=0.1,
                 attn_dropout=0.1, max_positions=0):
        super().__init__()
        self.embed = BertEmbeddings(vocab, max_positions or seq_len, hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(BertBlock(hidden, heads, ffn, dropout, attn_dropout)
                                    for _ in range(layers))
        self.mlm = MlmHead(vocab, hidden)
        self.init_bert(0.02)

    def init_bert(self, std):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.MultiheadAttention):
                nn.init.normal_(m.in_proj_weight, 0.0, std)
                nn.init.zeros_(m.in_proj_bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.zeros_(self.mlm.decoder.bias)

    def forward(self, ids):
        pad = ids == PAD
        x = self.drop(self.embed(ids))
        for block in self.blocks:
            x = block(x, pad)
        x = self.mlm.norm(nn.functional.gelu(self.mlm.dense(x)))
        return self.mlm.decoder(x, self.embed.tok.weight)


def mlm_mask(ids, vocab, gen):
    """BERT's masking in torch: 15 % of the positions holding ids >= 4; of those 80 % [MASK],
    10 % a token uniform in [4, vocab), 10 % unchanged. Returns (inputs, labels)."""
    chosen = (ids >= FIRST_TOKEN) & (torch.rand(ids.shape, generator=gen) < 0.15)
    r = torch.rand(ids.shape, generator=gen)
    random_ids = torch.randint(FIRST_TOKEN, vocab, ids.shape, generator=gen, dtype=ids.dtype)
    inputs = torch.where(chosen & (r < 0.8), torch.full_like(ids, MASK), ids)
    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, labels


def read_text_data(path):
    """The export of `dptrain tokenize --export`: tensors as int64, and the metadata."""
    tensors = read_safetensors(path)
    meta = read_safetensors_metadata(path)
    for name in ("train", "val_inputs", "val_labels"):
        if name not in tensors:
            raise SystemExit(f"{path}: no tensor {name!r} (not a `dptrain tokenize --export` file)")
    return {k: v.long() for k, v in tensors.items()}, meta


def unigram_perplexity(train, labels, vocab):
    """exp of the mean negative log-probability of the targets under the training sequences'
    token frequencies (ids >= 4 only, add-one smoothed over the vocab - 4 ordinary tokens)."""
    counts = torch.bincount(train[train >= FIRST_TOKEN].flatten(), minlength=vocab).double()
    counts = counts[FIRST_TOKEN:] + 1.0
    logp = torch.log(counts / counts.sum())
    targets = labels[labels != IGNORE]
    if targets.numel() == 0:
        return float("nan")
    return math.exp(-logp[targets - FIRST_TOKEN].mean().item())


def bert_evaluate(model, inputs, labels, batch=64):
    """Eval mode over the validation set: (loss = mean over the targets, accuracy, targets)."""
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for i in range(0, len(inputs), batch):
            x, y = inputs[i:i + batch], labels[i:i + batch]
            logits = model(x)
            keep = y != IGNORE
            if not keep.any():
                continue
            z, t = logits[keep].double(), y[keep]
            total += nn.functional.cross_entropy(z, t, reduction="sum").item()
            correct += int((z.argmax(1) == t).sum().item())
            count += int(keep.sum().item())
    if count == 0:
        return float("nan"), float("nan"), 0
    return total / count, correct / count, count


def bert_report(tag, loss, acc, count, baseline):
    ppl = math.exp(loss) if loss == loss and loss < 700 else float("inf")
    print(f"{tag}: validation loss {loss:.4f}, perplexity {ppl:.2f}, masked accuracy {acc:.4f} "
          f"({count} targets; unigram perplexity {baseline:.2f})", flush=True)


def bert_model(a, vocab, seq_len):
    return BertMLM(vocab, seq_len, layers=a.layers, hidden=a.hidden_size, heads=a.heads, ffn=a.ffn,
                   dropout=a.dropout, attn_dropout=a.attn_dropout)


def bert_main(a):
    data, meta = read_text_data(a.text_data)
    train, vin, vlab = data["train"], data["val_inputs"], data["val_labels"]
    seq_len = train.shape[1] if train.dim() == 2 and train.shape[0] else vin.shape[1]
    if "seq_len" in meta:
        seq_len = int(meta["seq_len"])
    if a.seq_len and a.seq_len != seq_len:
        raise SystemExit(f"--seq-len {a.seq_len} but {a.text_data} holds sequences of {seq_len}")
    vocab = a.vocab_size or int(meta.get("vocab_size", 0)) or int(train.max().item()) + 1
    top = max([int(t.max().item()) for t in (train, vin) if t.numel()], default=0)
    if top >= vocab:
        raise SystemExit(f"{a.text_data} holds token {top}, outside a vocabulary of {vocab}")
    baseline = unigram_perplexity(train, vlab, vocab)
    torch.manual_seed(a.seed)
    model = bert_model(a, vocab, seq_len)
    if a.load_weights:
        model.load_state_dict(read_safetensors(a.load_weights), strict=True)
        loss, acc, count = bert_evaluate(model, vin, vlab)
        if a.json:
            print(json.dumps({"samples": len(vin), "targets": count, "loss": loss,
                              "accuracy": acc, "perplexity": math.exp(loss) if count else None,
                              "unigram_perplexity": baseline}))
        else:
            bert_report(a.load_weights, loss, acc, count, baseline)
        return
    n = len(train)
    if n == 0:
        raise SystemExit(f"{a.text_data} holds no training sequences")
    batch = min(a.global_batch, n)
    steps_per_epoch = n // batch
    total = a.epochs * steps_per_epoch
    if a.max_steps:
        total = min(total, a.max_steps) if a.epochs_given else a.max_steps
    warmup = a.warmup if a.warmup >= 0 else total // 10
    decay_steps = max(total - warmup, 1)

    def lr_factor(step):  # dpt_optim_lr_at / lr
        if step < warmup:
            return (step + 1) / warmup
        if a.schedule == "linear":
            return 1.0 - min(step - warmup, decay_steps) / decay_steps
        return 1.0

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    gen = torch.Generator().manual_seed(a.seed)
    print(f"bert: vocab {vocab}, seq_len {seq_len}, {a.layers} layers, hidden {a.hidden_size}, "
          f"{a.heads} heads, ffn {a.ffn}, {sum(p.numel() for p in model.parameters())} "
          f"parameters; {n} training and {len(vin)} validation sequences; {total} steps of "
          f"{batch} (warmup {warmup}, {a.schedule}), lr {a.lr}", flush=True)
    bert_report("init", *bert_evaluate(model, vin, vlab), baseline)
    step, epoch, t0 = 0, 0, time.time()
    while step < total:
        model.train()
        inputs, labels = mlm_mask(train, vocab, gen)
        perm = torch.randperm(n, generator=gen)
        run_loss, run_steps = 0.0, 0
        for k in range(steps_per_epoch):
            if step == total:
                break
            i = perm[k * batch:(k + 1) * batch]
            logits = model(inputs[i])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels[i].flatten(),
                                               ignore_index=IGNORE)
            lr = opt.param_groups[0]["lr"]
            opt.zero_grad()
            loss.backward()
            if a.clip_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item()
            run_steps += 1
            if a.log_every and step % a.log_every == 0:
                print(f"step {step}: loss {loss.item():.4f}, lr {lr:.3g}, "
                      f"{time.time() - t0:.1f} s", flush=True)
        epoch += 1
        print(f"epoch {epoch}: {step} steps, training loss {run_loss / max(run_steps, 1):.4f}, "
              f"{time.time() - t0:.1f} s", flush=True)
        bert_report(f"epoch {epoch}", *bert_evaluate(model, vin, vlab), baseline)
    if a.save_weights:
        write_safetensors(a.save_weights, model.state_dict(),
                          {"format": "pt", "pytorch_reference.bert": json.dumps(
                              {"vocab": vocab, "seq_len": seq_len, "layers": a.layers,
                               "hidden": a.hidden_size, "heads": a.heads, "ffn": a.ffn})})
        print(f"saved {a.save_weights}")


def build(a, shape):
    if a.model == "resnet":
        return ResNet(a.depth, channels=1)
    return mlp(a.hidden, features=shape[0] * shape[1])


def evaluate_weights(a, model, xte, yte):
    model.load_state_dict(read_safetensors(a.load_weights), strict=True)
    model.eval()
    n = min(a.limit, len(xte)) if a.limit else len(xte)
    with torch.no_grad():
        logits = torch.cat([model(xte[i:i + 256]) for i in range(0, n, 256)])[:n]
    labels = yte[:n]
    loss = nn.functional.cross_entropy(logits.double(), labels, reduction="mean").item()
    correct = int((logits.argmax(1) == labels).sum().item())
    if a.logits:
        with open(a.logits, "w") as f:
            f.write("index," + ",".join(f"logit{j}" for j in range(logits.shape[1])) + "\n")
            for i, row in enumerate(logits.tolist()):
                f.write(f"{i}," + ",".join(f"{v:.9g}" for v in row) + "\n")
    if a.json:
        print(json.dumps({"samples": n, "correct": correct, "loss": loss, "accuracy": correct / n}))
    else:
        print(f"{a.load_weights}: {n} test images, loss {loss:.4f}, test accuracy {correct / n:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "resnet", "bert"], default="mlp")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--hidden", default=None,
                   help="mlp: hidden sizes (default 512,256); bert: the hidden size (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["constant", "cosine", "linear"], default=None,
                   help="default cosine (mlp, resnet), linear (bert, after the warmup)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=None, help="default 10")
    p.add_argument("--load-weights", metavar="FILE")
    p.add_argument("--limit", type=int, default=0, help="only the first N test images")
    p.add_argument("--json", action="store_true")
    p.add_argument("--logits", metavar="FILE")
    b = p.add_argument_group("bert")
    b.add_argument("--text-data", metavar="FILE",
                   help="the sequences of `dptrain tokenize --export FILE`")
    b.add_argument("--vocab-size", type=int, default=0, help="default: the export's")
    b.add_argument("--seq-len", type=int, default=0, help="default: the export's")
    b.add_argument("--layers", type=int, default=4)
    b.add_argument("--hidden-size", type=int, default=None, help="same as --hidden for bert")
    b.add_argument("--heads", type=int, default=4)
    b.add_argument("--ffn", type=int, default=1024)
    b.add_argument("--dropout", type=float, default=0.1)
    b.add_argument("--attn-dropout", type=float, default=0.1)
    b.add_argument("--global-batch", type=int, default=32)
    b.add_argument("--max-steps", type=int, default=0, help="stop after S steps")
    b.add_argument("--lr", type=float, default=5e-4)
    b.add_argument("--warmup", type=int, default=-1, help="default: 10%% of the steps")
    b.add_argument("--weight-decay", type=float, default=0.01)
    b.add_argument("--clip-norm", type=float, default=1.0)
    b.add_argument("--save-weights", metavar="FILE")
    b.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    b.add_argument("--log-every", type=int, default=100, help="training loss every N steps")
    a = p.parse_args()
    a.epochs_given = a.epochs is not None
    if a.epochs is None:
        a.epochs = 10 if a.model != "bert" or not a.max_steps else 1 << 40
    if a.model == "bert":
        if not a.text_data:
            p.error("--model bert needs --text-data (dptrain tokenize --export)")
        if a.hidden_size is None:
            a.hidden_size = int(a.hidden) if a.hidden else 256
        a.schedule = a.schedule or "linear"
        if a.schedule == "cosine":
            p.error("--model bert: --schedule linear or constant")
        torch.set_num_threads(a.threads)
        bert_main(a)
        return
    a.schedule = a.schedule or "cosine"
    if a.schedule == "linear":
        p.error("--schedule linear is for --model bert")
    a.hidden = [int(h) for h in (a.hidden or "512,256").split(",") if h]
    torch.set_num_threads(1)
    images = idx(a.data, "t10k-images-idx3-ubyte")
    shape = images.shape[1:]
    xte = torch.tensor(images.reshape(-1, 1, *shape), dtype=torch.float32) / 255
    yte = torch.tensor(idx(a.data, "t10k-labels-idx1-ubyte").astype(np.int64))
    torch.manual_seed(a.seed)
    model = build(a, shape)
    if a.load_weights:
        evaluate_weights(a, model, xte, yte)
        return
    xtr = torch.tensor(idx(a.data, "train-images-idx3-ubyte").reshape(-1, 1, *shape),
                       dtype=torch.float32) / 255
    ytr = torch.tensor(idx(a.data, "train-labels-idx1-ubyte").astype(np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch, steps = 256, len(xtr) // 256
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * steps)
             if a.schedule == "cosine" else None)
    gen = torch.Generator().manual_seed(a.seed)
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        for k in range(steps):
            i = perm[k * batch:(k + 1) * batch]
            loss = nn.functional.cross_entropy(model(xtr[i]), ytr[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched:
                sched.step()
        model.eval()
        with torch.no_grad():
            acc = torch.cat([model(xte[j:j + 1000]).argmax(1) for j in range(0, len(xte), 1000)])
            acc = (acc == yte).float().mean().item()
        print(f"epoch {epoch + 1} test accuracy {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
