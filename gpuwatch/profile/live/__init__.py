"""``gpuwatch profile --live``: the profiled script runs in a child process that streams its
counters to the parent over a pipe; the parent shows them next to the GPU stats."""
