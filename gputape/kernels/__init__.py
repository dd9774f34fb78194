"""The fused CUDA kernels: their registry and their build (the .cu sources are the top-level kernels/)."""
