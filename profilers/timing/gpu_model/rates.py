"""Rates and fixed costs of a GPU from first principles (no torch: a saved report's what-ifs
use them): the achievable share of memory bandwidth, the shortest kernel, the bus's rates for
pinned and pageable copies, NVLink between GPUs, and whether a peak of memory fits."""

from __future__ import annotations

from profilers.timing.gpu_model.specs import GIB, GpuSpec

MEMORY_FRACTION = 0.9
"""Achievable share of peak DRAM bandwidth. Basis: DRAM stops for refresh (tRFC/tREFI, about
5%) and loses cycles turning the bus around between reads and writes (a few % for a stream
that reads its inputs and writes its output); no kernel-specific tuning."""

MIN_KERNEL_NS = 2_000
"""The shortest a kernel takes on the GPU. Basis: the GPU's front end fetches the launch from
host memory (one PCIe round trip, about 1 µs), hands the grid to the SMs and waits for them to
retire it (about as long again): a few µs, whatever the kernel does."""

HOST_LAUNCH_NS = 5_000
"""The host's time to queue one op on a GPU in eager PyTorch, past the user's Python (which is
measured): ATen's C++ dispatch and argument checks, the caching allocator, and the CUDA
driver's launch call (``cudaLaunchKernel`` alone is a few µs of host time: the driver builds
the launch packet and writes it to the GPU's command queue). Under ``--fake-cuda`` an op's run
is the simulation's work, so this figure stands in for it."""

PCIE_LANE_BYTES_PER_S = {
    3: 8e9 * 128 / 130 / 8,
    4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8,
}
"""Raw bytes/s per lane and direction: GT/s × 128b/130b encoding / 8 bits (PCI-SIG specs)."""

PCIE_PAYLOAD_EFFICIENCY = 256 / (256 + 24)
"""Payload share of a PCIe packet: 256-byte max payload per TLP, about 24 bytes of header,
sequence number, LCRC and framing around it."""

COPY_LATENCY_NS = 2_000
"""A DMA copy's fixed cost: the copy engine fetches its descriptor and the first bytes' read
request crosses the link and comes back (two PCIe round trips of about 1 µs)."""

HOST_MEMCPY_BYTES_PER_S = 12.8e9
"""A pageable copy's staging copy in host memory: one core's memcpy, bound by one DDR4-3200
channel (25.6 GB/s) read and written once."""


def pcie_bytes_per_s(spec: GpuSpec, pinned: bool = True) -> float:
    """Effective host<->device rate, one direction: the link's payload rate for pinned memory;
    for pageable memory the staging copy in host memory comes first (the two in series)."""
    link = PCIE_LANE_BYTES_PER_S[spec.pcie_gen] * spec.pcie_lanes * PCIE_PAYLOAD_EFFICIENCY
    if pinned:
        return link
    return 1.0 / (1.0 / link + 1.0 / HOST_MEMCPY_BYTES_PER_S)


def copy_ns(spec: GpuSpec, direction: str, nbytes: int, pinned: bool = True) -> int:
    """A copy's predicted time: ``h2d``/``d2h`` over PCIe (pinned or pageable), ``p2p`` over
    NVLink where the GPU has it (else PCIe), ``d2d`` read and written in device memory."""
    if direction == "d2d":
        return max(
            MIN_KERNEL_NS, round(2 * nbytes / (spec.memory_bytes_per_s * MEMORY_FRACTION) * 1e9)
        )
    if direction == "p2p" and spec.nvlink_bytes_per_s is not None:
        rate = spec.nvlink_bytes_per_s
    else:
        rate = pcie_bytes_per_s(spec, pinned or direction == "p2p")
    return COPY_LATENCY_NS + round(nbytes / rate * 1e9)


def fill_ns(spec: GpuSpec, nbytes: int) -> int:
    """A tensor of ``nbytes`` made on the device (a fill, ``arange``, ``randn``): written once."""
    return max(MIN_KERNEL_NS, round(nbytes / (spec.memory_bytes_per_s * MEMORY_FRACTION) * 1e9))


def _article(name: str) -> str:
    # NB: "an" before a letter said with a vowel sound (an H100, an L4, an RTX-4090, a T4).
    return "an" if name[:1].upper() in "AEFHILMNORSX" else "a"


def memory_check(spec: GpuSpec, peak_bytes: int, where: str | None = None) -> str | None:
    """None when ``peak_bytes`` fit in ``spec``'s memory, else the sentence that says they do
    not (``would not fit on an L4: 31.2 GiB at train.py:88 (the L4 has 24 GiB)``)."""
    if peak_bytes <= spec.memory_bytes:
        return None
    at = f" at {where}" if where else ""
    return (
        f"would not fit on {_article(spec.name)} {spec.name}: {peak_bytes / GIB:.1f} GiB{at} "
        f"(the {spec.name} has {spec.memory_bytes / GIB:g} GiB)"
    )
