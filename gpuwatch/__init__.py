"""gpuwatch: why is my GPU idle? A live NVML monitor and a PyTorch profiler of device copies,
synchronisations and kernel time."""

__version__ = "0.1.0"
