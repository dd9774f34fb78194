"""The backward: the one sweep, its compiled form and the CUDA-graph replay of that."""
