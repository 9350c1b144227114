"""Published specifications of the GPUs users have: the model's only inputs.

Every figure comes from the vendor's datasheet or architecture whitepaper named beside it, never
from a measurement: the model is checked against published measurements it was not tuned on.
Conventions:

* FLOP/s are **dense** peaks at the boost clock (datasheets print tensor-core figures "with
  sparsity": those are halved here);
* ``cuda`` is the rate on the CUDA cores, ``tensor`` on the tensor cores (None: none for that
  type). NB: where a card has no fast half precision (Kepler, Maxwell, consumer Pascal), the
  ``float16``/``bfloat16`` rate is its float32 rate: cuBLAS multiplies half matrices with float32
  arithmetic there (``CUBLAS_COMPUTE_32F``) and elementwise half ops are bound by memory anyway;
* GeForce cards multiply half precision on tensor cores with float32 accumulation (what PyTorch
  asks) at half the rate of float16 accumulation: the float32-accumulate figure is used;
* memory sizes are the datasheet's "GB", which for GPU memory means GiB (chips come in powers of
  two); bandwidths are decimal bytes per second, as printed;
* NVLink is the bandwidth per direction (datasheets print both directions summed);
* a K80 board holds two GPUs: figures are per GPU, what one CUDA device is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GIB = 1 << 30
T = 1e12
G = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU's published figures.

    Attributes:
        name: the canonical name (``H100-SXM``).
        aliases: other names it goes by (NVML's among them), matched forgivingly.
        source: the document the figures come from.
        sms: streaming multiprocessors.
        memory_bytes: device memory.
        memory_bytes_per_s: peak memory bandwidth.
        pcie_gen: PCIe generation of its host link.
        pcie_lanes: PCIe lanes.
        nvlink_bytes_per_s: NVLink bandwidth per direction, None without NVLink.
        cuda_flops: dtype -> peak FLOP/s on the CUDA cores.
        tensor_flops: dtype -> dense peak FLOP/s on the tensor cores (absent: none).
    """

    name: str
    aliases: tuple[str, ...]
    source: str
    sms: int
    memory_bytes: int
    memory_bytes_per_s: float
    pcie_gen: int
    pcie_lanes: int
    nvlink_bytes_per_s: float | None
    cuda_flops: dict[str, float] = field(default_factory=dict)
    tensor_flops: dict[str, float] = field(default_factory=dict)

    def peak_flops(self, dtype: str, tensor_cores: bool) -> float:
        """Peak FLOP/s for ``dtype`` (``float64``, ``float32``, ``tf32``: float32 matmuls on
        tensor cores, ``float16``, ``bfloat16``, ``float8``), on the tensor cores when asked
        and the GPU has them for that type, else on the CUDA cores."""
        if tensor_cores and dtype in self.tensor_flops:
            return self.tensor_flops[dtype]
        if dtype == "tf32":
            dtype = "float32"
        if dtype == "float8":  # no float8 arithmetic off the tensor cores: upcast to half
            dtype = "float16"
        return self.cuda_flops[dtype]


def _cuda(fp64: float, fp32: float, fp16: float, bf16: float | None = None) -> dict[str, float]:
    """CUDA-core rates in TFLOP/s (``bf16``: the float16 rate when not given)."""
    return {
        "float64": fp64 * T,
        "float32": fp32 * T,
        "float16": fp16 * T,
        "bfloat16": (fp16 if bf16 is None else bf16) * T,
    }


def _tensor(**tflops: float) -> dict[str, float]:
    return {k: v * T for k, v in tflops.items()}


SPECS: tuple[GpuSpec, ...] = (
    # NVIDIA H200 datasheet (H200 SXM): compute as H100 SXM; 141 GB HBM3e, 4.8 TB/s.
    GpuSpec(
        "H200", ("H200-SXM", "H200 SXM", "NVIDIA H200"), "NVIDIA H200 datasheet (SXM)",
        132, 141 * GIB, 4.8e12, 5, 16, 450 * G,
        _cuda(33.5, 66.9, 133.8),
        _tensor(float64=66.9, tf32=494.7, float16=989.4, bfloat16=989.4, float8=1978.9),
    ),
    # NVIDIA H100 Tensor Core GPU datasheet and Hopper whitepaper (SXM5, 80 GB HBM3).
    GpuSpec(
        "H100-SXM", ("H100", "H100 SXM5", "H100 80GB HBM3"), "NVIDIA H100 datasheet (SXM)",
        132, 80 * GIB, 3.35e12, 5, 16, 450 * G,
        _cuda(33.5, 66.9, 133.8),
        _tensor(float64=66.9, tf32=494.7, float16=989.4, bfloat16=989.4, float8=1978.9),
    ),
    # NVIDIA H100 datasheet (PCIe, 80 GB HBM2e) and Hopper whitepaper.
    GpuSpec(
        "H100-PCIe", ("H100 PCIe",), "NVIDIA H100 datasheet (PCIe)",
        114, 80 * GIB, 2.0e12, 5, 16, 300 * G,
        _cuda(25.6, 51.2, 102.4),
        _tensor(float64=51.2, tf32=378.0, float16=756.0, bfloat16=756.0, float8=1513.0),
    ),
    # NVIDIA H100 datasheet (H100 NVL: 94 GB HBM3, 3.9 TB/s, NVLink bridge 600 GB/s both
    # directions; 132 SMs: 60 TFLOP/s float32 = 16,896 cores x 1.785 GHz x 2).
    GpuSpec(
        "H100-NVL", ("H100 NVL",), "NVIDIA H100 datasheet (NVL)",
        132, 94 * GIB, 3.9e12, 5, 16, 300 * G,
        _cuda(30.0, 60.0, 120.0),
        _tensor(float64=60.0, tf32=417.5, float16=835.5, bfloat16=835.5, float8=1670.5),
    ),
    # NVIDIA H200 datasheet (H200 NVL: compute as H100 NVL; 141 GB HBM3e, 4.8 TB/s, NVLink
    # bridge 900 GB/s both directions).
    GpuSpec(
        "H200-NVL", ("H200 NVL",), "NVIDIA H200 datasheet (NVL)",
        132, 141 * GIB, 4.8e12, 5, 16, 450 * G,
        _cuda(30.0, 60.0, 120.0),
        _tensor(float64=60.0, tf32=417.5, float16=835.5, bfloat16=835.5, float8=1670.5),
    ),
    # NVIDIA A100 datasheet (SXM4 80 GB, HBM2e 2,039 GB/s) and Ampere GA100 whitepaper.
    GpuSpec(
        "A100-80GB", ("A100", "A100-SXM4-80GB", "A100 80GB", "A100 SXM"),
        "NVIDIA A100 datasheet (SXM4 80GB)",
        108, 80 * GIB, 2.039e12, 4, 16, 300 * G,
        _cuda(9.7, 19.5, 78.0, 39.0),
        _tensor(float64=19.5, tf32=156.0, float16=312.0, bfloat16=312.0),
    ),
    # NVIDIA A100 datasheet (SXM4 40 GB, HBM2 1,555 GB/s).
    GpuSpec(
        "A100-40GB", ("A100-SXM4-40GB", "A100 40GB"), "NVIDIA A100 datasheet (SXM4 40GB)",
        108, 40 * GIB, 1.555e12, 4, 16, 300 * G,
        _cuda(9.7, 19.5, 78.0, 39.0),
        _tensor(float64=19.5, tf32=156.0, float16=312.0, bfloat16=312.0),
    ),
    # NVIDIA L40S datasheet (48 GB GDDR6, 864 GB/s; Ada: half rate = float32 rate on CUDA cores).
    GpuSpec(
        "L40S", ("L40-S",), "NVIDIA L40S datasheet",
        142, 48 * GIB, 864 * G, 4, 16, None,
        _cuda(1.4, 91.6, 91.6),
        _tensor(tf32=183.0, float16=362.05, bfloat16=362.05, float8=733.0),
    ),
    # NVIDIA L4 datasheet (24 GB GDDR6, 300 GB/s).
    GpuSpec(
        "L4", (), "NVIDIA L4 datasheet",
        58, 24 * GIB, 300 * G, 4, 16, None,
        _cuda(0.47, 30.3, 30.3),
        _tensor(tf32=60.0, float16=121.0, bfloat16=121.0, float8=242.5),
    ),
    # NVIDIA A10 datasheet (24 GB GDDR6, 600 GB/s; GA102).
    GpuSpec(
        "A10", (), "NVIDIA A10 datasheet",
        72, 24 * GIB, 600 * G, 4, 16, None,
        _cuda(0.49, 31.2, 31.2),
        _tensor(tf32=62.5, float16=125.0, bfloat16=125.0),
    ),
    # NVIDIA T4 datasheet (16 GB GDDR6, 320 GB/s, PCIe Gen3; Turing: no bfloat16, no TF32).
    GpuSpec(
        "T4", ("Tesla T4",), "NVIDIA T4 datasheet",
        40, 16 * GIB, 320 * G, 3, 16, None,
        _cuda(0.25, 8.1, 16.2, 8.1),
        _tensor(float16=65.0),
    ),
    # NVIDIA V100 datasheet (SXM2 16 GB HBM2, 900 GB/s, NVLink 300 GB/s both directions).
    GpuSpec(
        "V100", ("V100-SXM2", "V100-SXM2-16GB", "Tesla V100"), "NVIDIA V100 datasheet (SXM2)",
        80, 16 * GIB, 900 * G, 3, 16, 150 * G,
        _cuda(7.8, 15.7, 31.4, 15.7),
        _tensor(float16=125.0),
    ),
    # NVIDIA Ada Lovelace whitepaper, GeForce RTX 4090 (24 GB GDDR6X, 1,008 GB/s).
    GpuSpec(
        "RTX-4090", ("GeForce RTX 4090", "4090"), "NVIDIA Ada Lovelace GPU architecture whitepaper",
        128, 24 * GIB, 1008 * G, 4, 16, None,
        _cuda(1.29, 82.6, 82.6),
        _tensor(tf32=82.6, float16=165.2, bfloat16=165.2, float8=330.3),
    ),
    # NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090 (24 GB GDDR6X, 936 GB/s; NVLink bridge
    # 112.5 GB/s both directions).
    GpuSpec(
        "RTX-3090", ("GeForce RTX 3090", "3090"), "NVIDIA Ampere GA102 GPU architecture whitepaper",
        82, 24 * GIB, 936 * G, 4, 16, 56.25 * G,
        _cuda(0.56, 35.6, 35.6),
        _tensor(tf32=35.6, float16=71.0, bfloat16=71.0),
    ),
    # NVIDIA Tesla P100 datasheet (PCIe 16 GB HBM2, 732 GB/s; no tensor cores).
    GpuSpec(
        "P100", ("Tesla P100", "P100-PCIE-16GB", "Tesla P100-PCIE-16GB"),
        "NVIDIA Tesla P100 datasheet (PCIe 16GB)",
        56, 16 * GIB, 732 * G, 3, 16, None,
        _cuda(4.7, 9.3, 18.7, 9.3),
    ),
    # NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s float32, 24 GB, 480 GB/s per board of two GK210.
    GpuSpec(
        "K80", ("Tesla K80",), "NVIDIA Tesla K80 datasheet (per GPU: half a board)",
        13, 12 * GIB, 240 * G, 3, 16, None,
        _cuda(1.455, 4.365, 4.365),
    ),
    # GeForce GTX 1080 specifications: 2560 cores x 1733 MHz x 2 = 8.87 TFLOP/s; 8 GB GDDR5X at
    # 10 Gbps on 256 bits = 320 GB/s. Half precision arithmetic is 1/64 rate on GP104: see above.
    GpuSpec(
        "GTX-1080", ("GeForce GTX 1080", "1080"), "NVIDIA GeForce GTX 1080 specifications",
        20, 8 * GIB, 320 * G, 3, 16, None,
        _cuda(0.277, 8.87, 8.87),
    ),
    # GeForce GTX 980 specifications: 2048 cores x 1216 MHz x 2 = 4.98 TFLOP/s; 4 GB GDDR5 at
    # 7 Gbps on 256 bits = 224 GB/s.
    GpuSpec(
        "GTX-980", ("GeForce GTX 980", "980"), "NVIDIA GeForce GTX 980 specifications",
        16, 4 * GIB, 224 * G, 3, 16, None,
        _cuda(0.156, 4.98, 4.98),
    ),
)  # fmt: skip


class UnknownGpuError(LookupError):
    """A GPU name the table does not know; the message lists the known ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.known = tuple(s.name for s in SPECS)
        super().__init__(f"unknown GPU {name!r}; known: {', '.join(self.known)}")


_NOISE = re.compile(r"nvidia|tesla|geforce|[^a-z0-9]")
_MEMORY_WORDS = re.compile(r"\b\d+\s*gb\b|\bhbm\w*|\bgddr\w*")


def _key(name: str) -> str:
    return _NOISE.sub("", name.lower())


_BY_KEY: dict[str, GpuSpec] = {}
for _spec in SPECS:
    for _name in (_spec.name, *_spec.aliases):
        _found = _BY_KEY.setdefault(_key(_name), _spec)
        assert _found is _spec, f"two GPUs answer to {_name!r}"


def gpu_spec(name: str) -> GpuSpec:
    """The spec of ``name``, matched forgivingly: case, spaces, dashes and the words NVIDIA,
    Tesla and GeForce do not matter (``h100``, ``H100-SXM``, ``rtx4090``, ``A100-80GB``, and
    NVML's names such as ``NVIDIA A100-SXM4-40GB``).

    Raises:
        UnknownGpuError: no GPU in the table goes by that name.
    """
    key = _key(name)
    found = _BY_KEY.get(key)
    if found is None and key.startswith(("rtx", "gtx")):
        found = _BY_KEY.get(key[3:])
    if found is None:
        found = _without_memory(name)
    if found is None:
        raise UnknownGpuError(name)
    return found


def _without_memory(name: str) -> GpuSpec | None:
    """The GPU ``name`` names once its memory words are dropped, if its size is that GPU's.

    NB: NVML and ``torch.cuda.get_device_name()`` add the memory to some names ("NVIDIA H100
    80GB HBM3", "NVIDIA H100 SXM5 80GB"). Dropped only when the whole name matched nothing and
    the size it gives is the table's for that GPU: a "V100-SXM2-32GB" is not the 16 GB V100 the
    table has (its memory check would be wrong), so it stays unknown."""
    lowered = name.lower()
    found = _BY_KEY.get(_key(_MEMORY_WORDS.sub(" ", lowered)))
    if found is None:
        return None
    sizes = {int(gb) for gb in re.findall(r"\b(\d+)\s*gb\b", lowered)}
    return found if sizes <= {round(found.memory_bytes / GIB)} else None


def known_gpus() -> tuple[str, ...]:
    return tuple(s.name for s in SPECS)
