"""``gpuwatch top`` and ``gpuwatch export``: NVML (nvml/, the only pynvml importer), the top app,
the Prometheus exporter and py-spy stacks."""
