"""kernelharness: generate CUDA kernels with a language model and judge them honestly."""

__version__ = "0.1.0"
