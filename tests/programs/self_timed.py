"""A training loop that times itself, as a user's script would (``time.perf_counter``), for
the observer-effect check: ``python self_timed.py KIND`` writes its own per-step figures to
``$SELF_TIMED_OUT``. KIND: ``loader`` (a DataLoader of 64-row batches, no workers, a small MLP:
the loader is about half of a sub-millisecond step), ``sleepy`` (the same loader, whose collate
also sleeps 2 ms: a known duration), ``python`` (Python work between few ops),
``tiny`` (many small ops), ``large`` (few large ops)."""

import json
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

KIND = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ds = TensorDataset(torch.randn(64 * STEPS, 32), torch.randint(0, 10, (64 * STEPS,)))
big = torch.randn(512, 512)


def sleepy_collate(rows):
    batch = default_collate(rows)
    time.sleep(0.002)
    return batch


def batches():
    if KIND in ("loader", "sleepy"):
        collate = sleepy_collate if KIND == "sleepy" else None
        yield from DataLoader(ds, batch_size=64, shuffle=True, collate_fn=collate)
        return
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    for _ in range(STEPS):
        yield x, y


def step(x, y):
    if KIND == "python":
        total = 0
        for i in range(3000):  # the host's own Python between ops
            total += i * i
    elif KIND == "tiny":
        h = x
        for _ in range(40):
            h = h * 1.0001 + 0.0001
        x = h
    elif KIND == "large":
        for _ in range(4):
            big.matmul(big)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


for _epoch in range(2):  # the first epoch warms up
    it = iter(batches())
    input_s, steps, began = 0.0, 0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        input_s += time.perf_counter() - t0
        step(x, y)
        steps += 1
    wall_s = time.perf_counter() - began
with open(os.environ["SELF_TIMED_OUT"], "w") as f:
    json.dump({"step_ms": wall_s * 1e3 / steps, "input_ms": input_s * 1e3 / steps}, f)
