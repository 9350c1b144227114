"""The published JSON Schemas of gpuwatch's documents (package data)."""
