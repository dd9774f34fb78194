"""Devices: the backend (the only cupy importer), placement, memory, cuBLAS."""
