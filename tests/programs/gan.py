"""A small GAN trained the usual way: per batch, the discriminator's optimizer steps, then the
generator's (``alternate``: one of them per batch, in turn). One batch is one step either way."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda:0" if torch.cuda.is_available() else "cpu"
alternate = "alternate" in sys.argv[1:]
gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8)).to(device)
disc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
bce = nn.BCEWithLogitsLoss()
loader = DataLoader(TensorDataset(torch.randn(48, 8)), batch_size=8)  # 6 batches

for i, (real,) in enumerate(loader):
    real = real.to(device)  # @batch
    ones = torch.ones(8, 1, device=device)
    zeros = torch.zeros(8, 1, device=device)
    fake = gen(torch.randn(8, 4, device=device))
    if not alternate or i % 2 == 0:
        loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        print(f"d {loss_d.item():.3f}")  # @sync_d
    if not alternate or i % 2 == 1:
        loss_g = bce(disc(fake), ones)
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        print(f"g {loss_g.item():.3f}")  # @sync_g
