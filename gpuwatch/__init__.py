"""gpuwatch: why is my GPU idle? A live NVML monitor and a PyTorch profiler of device copies,
synchronisations and kernel time."""

__version__ = "0.1.0"


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext gpuwatch`` in Jupyter/IPython: see gpuwatch/profile/notebook.py."""
    from gpuwatch.profile.notebook import load_ipython_extension as load

    load(ipython)
