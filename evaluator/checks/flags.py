"""The flags the static checks raise: each one's policy and description.

The policies here are the defaults; `static_flags(policies=...)` overrides them per flag name.
"""

from __future__ import annotations

from evaluator.wire.records import FlagPolicy

DEFAULT_POLICIES: dict[str, FlagPolicy] = {
    # PyTorch (or torch.compile) does the problem's heavy work (for gemm_scale_bn the GEMM or the
    # BatchNorm): the result may be correct and even fast, but it is not the candidate's kernel.
    "torch_fallback": FlagPolicy.flag,
    # Side streams and events: legitimate uses exist; timing synchronizes the whole device.
    "cuda_stream": FlagPolicy.flag,
    # Work running outside the timed call, or racing with the comparison.
    "concurrency": FlagPolicy.reject,
    # Changing torch, the evaluator or any imported module changes what the candidate is
    # compared with (allclose, assert_close, Event.elapsed_time, ...).
    "monkeypatch": FlagPolicy.reject,
    # Looking at or reaching into the evaluator's frames, objects or process.
    "introspection": FlagPolicy.reject,
    # Files, sockets, subprocesses, environment writes: a candidate computes, nothing else.
    "io_or_network": FlagPolicy.reject,
    # reject, not flag: the baselines (eager and compiled reference) run in the same process
    # after the candidate is imported, so a global TF32 / matmul-precision / default-dtype
    # switch silently changes the baseline the candidate is measured and checked against.
    "precision_flags": FlagPolicy.reject,
    # Results reused across calls: a hint only, since the dynamic checks (fresh inputs per
    # trial) decide correctness; shown beside the result.
    "output_caching": FlagPolicy.flag,
    # exec/eval/compile, dynamic imports or getattr on modules with computed names: code the
    # static checks cannot read, so every other rule could be bypassed through it.
    "dynamic_code": FlagPolicy.reject,
    # C++/CUDA source that runs Python (pybind11's exec/eval/import/attr/globals, the C API's PyRun_,
    # PyImport_, PyObject_, PyEval_ calls): Python the static checks never see, so every other rule
    # (torch_fallback, introspection, io_or_network) could be bypassed through it.
    "python_from_cpp": FlagPolicy.reject,
    # Triton's timing and runtime machinery (python_names.TRITON_REFUSED): self-timing, the driver, the cache.
    "triton_escape": FlagPolicy.reject,
    # Under the triton backend: no @triton.jit kernel at all (the referee also asks that one runs).
    "no_custom_kernel": FlagPolicy.flag,
}

FLAG_DESCRIPTIONS: dict[str, str] = {
    "torch_fallback": "PyTorch does the problem's heavy work in ModelNew.forward (a function, tensor method, "
    "aten or C++ op or nn module the problem's rules name as heavy, or torch.compile) instead of the candidate's kernel.",
    "cuda_stream": "The candidate creates CUDA streams, events or graphs (in Python or in its C++/CUDA source).",
    "concurrency": "The candidate uses threads, processes or asyncio (threading, multiprocessing, "
    "concurrent.futures, os.fork, detached processes, sys.setswitchinterval, std::thread, at::launch, "
    "pthread_create), so work may finish outside the timed call; or chooses its own OpenMP thread count "
    "(num_threads, omp_set_num_threads), where every call, eager's too, runs on the threads the harness sets.",
    "monkeypatch": "The candidate modifies torch, the evaluator or another imported module (attribute "
    "assignment, setattr, __dict__ or sys.modules writes, classes patched through type(x), global module hooks, "
    "aten overrides, torch-function tensor subclasses) or how the evaluator loads and reads ModelNew's state "
    "(load_state_dict and state_dict overrides or hooks, replaced module registries).",
    "introspection": "The candidate inspects or controls the process around it (gc, inspect, frames and "
    "tracebacks, ctypes, __builtins__, sys.modules, evaluator imports, signals, dlopen).",
    "io_or_network": "The candidate touches files, sockets, subprocesses or the environment (open, socket, "
    "subprocess, os.system, urllib, shutil, os.environ writes, torch.load/save).",
    "precision_flags": "The candidate changes global numeric settings (TF32, float32 matmul precision, "
    "reduced-precision reductions, default dtype, deterministic algorithms) that also govern the baseline.",
    "output_caching": "The candidate may reuse results across calls (lru_cache on functions taking inputs, "
    "outputs kept on self or in module globals and returned, data_ptr()/id() keys).",
    "dynamic_code": "The candidate builds code at run time (exec, eval, compile, code and runpy, computed "
    "imports or attribute names, the builtins' or a module's namespace read as a mapping, importlib, module "
    "loaders), which static checks cannot read.",
    "python_from_cpp": "The candidate's C++/CUDA source drives Python (pybind11 exec, eval, module imports, "
    "attribute access, globals or an embedded interpreter; the Python C API's PyRun_, PyImport_, PyObject_, "
    "PyEval_ calls), code the static checks cannot read.",
    "triton_escape": "The candidate uses Triton's timing or runtime machinery (triton.testing, triton.runtime.driver, "
    "triton.runtime.cache, triton.knobs, triton.compiler, triton.tools): it could time itself, load kernels out of "
    "sight, or reach the compile cache and the hooks the executor watches compiles with.",
    "no_custom_kernel": "Under the triton backend, the source holds no @triton.jit kernel of its own.",
}
