"""A nanoGPT-like training script, tiny: a character-level transformer learns a synthetic text.

It does what a real training script does with values read back from the GPU: it logs its losses,
evaluates now and then and saves a checkpoint when the validation loss improves, stops early
when it stops improving, and skips a step whose loss is not finite. Run it as it is (on a GPU if
there is one, else the CPU) or under ``gpuwatch profile --fake-cuda``: with real values
(``--fake-values real``) it takes the same path either way.

    python demos/tiny_gpt.py [--steps 60] [--eval-every 10] [--out ckpt.pt] [--layers 2] ...
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1)
        )
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.attn(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, block: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.tok.weight = self.head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def corpus(n: int, vocab: int, seed: int) -> torch.Tensor:
    """A text with structure to learn: counting up modulo ``vocab``, with a little noise."""
    g = torch.Generator().manual_seed(seed)
    text = torch.arange(n) % vocab
    noise = torch.rand(n, generator=g) < 0.05
    return torch.where(noise, torch.randint(0, vocab, (n,), generator=g), text)


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-iters", type=int, default=4)
    p.add_argument("--patience", type=int, default=3, help="evals without improvement")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--out", default="", help="save a checkpoint here when val loss improves")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    torch.manual_seed(1337)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = corpus(20_000, args.vocab, seed=1)
    train, val = data[:18_000], data[18_000:]

    def batch(split: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(split) - args.block - 1, (args.batch,))
        x = torch.stack([split[i : i + args.block] for i in ix])
        y = torch.stack([split[i + 1 : i + 1 + args.block] for i in ix])
        return x.to(device), y.to(device)

    model = TinyGPT(args.vocab, args.block, args.width, args.heads, args.layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device == "cuda")

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        model.eval()
        out = {}
        for name, split in (("train", train), ("val", val)):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                losses[k] = model(*batch(split)).item()
            out[name] = losses.mean().item()
        model.train()
        return out

    best_val, bad_evals, logged = math.inf, 0, []
    for step in range(args.steps + 1):
        if step % args.eval_every == 0:
            losses = estimate_loss()
            logged.append(losses["val"])
            if not args.quiet:
                print(
                    f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}"
                )
            if losses["val"] < best_val:
                best_val, bad_evals = losses["val"], 0
                if args.out:
                    torch.save({"model": model.state_dict(), "step": step}, args.out)
                    if not args.quiet:
                        print(f"saved checkpoint at step {step}")
            else:
                bad_evals += 1
                if bad_evals >= args.patience:
                    if not args.quiet:
                        print(f"early stop at step {step}")
                    break
        if step == args.steps:
            break
        loss = model(*batch(train))
        if not torch.isfinite(loss):  # a NaN check: one sync a step, as on a GPU
            if not args.quiet:
                print(f"step {step}: loss is not finite, skipped")
            continue
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    if args.out and not Path(args.out).exists() and not args.quiet:
        print("no checkpoint saved")
    return logged


if __name__ == "__main__":
    main()
