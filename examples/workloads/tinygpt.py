"""A small GPT (decoder-only transformer) and a deterministic character corpus.

Shared by train_gpt.py (training) and infer_service.py (inference). Plain PyTorch 1.13+.
"""
import math

import torch
import torch.nn as nn

# A corpus with structure a small model learns within a few hundred steps.
CORPUS = (
    "Tianshu places every rank of every job with the compute, the network and the storage "
    "of the cluster in view at once. It enforces that decision on each node, tunes "
    "collective communication for the placement it chose, and keeps the cluster busy with "
    "gang admission, preemption, backfill, elastic scaling and checkpoint-based migration. "
    "A job that is preempted writes a checkpoint, stops, and later resumes from it on "
    "whichever nodes are free; the step count continues where it left off. "
) * 8
VOCAB = sorted(set(CORPUS))
STOI = {c: i for i, c in enumerate(VOCAB)}
DATA = torch.tensor([STOI[c] for c in CORPUS], dtype=torch.long)


class Block(nn.Module):
    def __init__(self, d_model, heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=len(VOCAB), d_model=64, layers=2, heads=4, seq=64):
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = self.mask[:t, :t]
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))

    def parameters_count(self):
        return sum(p.numel() for p in self.parameters())


def batch(generator, batch_size, seq, device):
    """Random windows of the corpus: inputs and next-character targets."""
    starts = torch.randint(0, len(DATA) - seq - 1, (batch_size,), generator=generator)
    x = torch.stack([DATA[s:s + seq] for s in starts.tolist()])
    y = torch.stack([DATA[s + 1:s + seq + 1] for s in starts.tolist()])
    return x.to(device), y.to(device)


def uniform_loss():
    return math.log(len(VOCAB))
