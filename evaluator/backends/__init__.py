"""Backends: what a candidate is written in (`cuda`: inline CUDA C++; `triton`: Triton kernels; `cpp`: CPU C++)."""
