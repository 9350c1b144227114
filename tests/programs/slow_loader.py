"""A DataLoader that decodes on the training thread (``num_workers=0``): each item takes 2 ms of
the host's CPU (spun, so a busy machine slows it as it slows the rest), 4 a batch, for a tiny
model on the GPU. Most of the run is the loader's."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.thread_time() + 0.002  # decoding an image, on the training thread
        while time.thread_time() < end:
            pass
        return torch.full((8,), float(i))


device = "cuda:0" if torch.cuda.is_available() else "cpu"
model = nn.Linear(8, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Decoded(), batch_size=4)  # 12 batches

for x in loader:  # @wait
    loss = model(x.to(device)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
