"""When the run breaks, and where the GPU's memory goes: tensor provenance (which line made or
last moved each storage), GPU bytes per line now and at the run's peak, the lines holding the
memory at an out-of-memory error, and the explanation of a device mismatch.
"""
