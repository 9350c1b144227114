"""``--fake-cuda``: a simulated GPU for machines with none (harness.py puts it on and takes it
off; the rest are its parts). NB: importing this package imports nothing (no torch)."""
