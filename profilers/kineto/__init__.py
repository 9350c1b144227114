"""torch.profiler traces (Kineto's Chrome-trace JSON) read and analysed without torch: the GPU
half of "why is my GPU idle" from what every PyTorch user can already record.

``read.py`` turns a trace file (or a folder of ranks) into typed events (``events.py``),
``analyse.py`` charges each step's GPU idle time to a cause and a line (``result.py`` holds the
answer). Nothing here imports torch, prints, or names a command-line flag.
"""
