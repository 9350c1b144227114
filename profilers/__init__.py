"""The dispatch-mode profiler of device copies, synchronisations and kernel time."""
