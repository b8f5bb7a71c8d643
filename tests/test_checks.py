"""Static checks on candidate source (evaluator/checks/): table-driven, pure AST, no torch."""

from __future__ import annotations

import ast
import glob
import re
import textwrap
from pathlib import Path

import pytest

from evaluator.wire.assets import golden_files
from evaluator.checks import DEFAULT_POLICIES, FLAG_DESCRIPTIONS, static_flags
from evaluator.wire.records import Flag, FlagPolicy

ROOT = Path(__file__).resolve().parent.parent

HEADER = "import torch\nimport torch.nn as nn\n"
D = textwrap.dedent


def model(forward: str, top: str = "", init: str = "", methods: str = "", header: str = HEADER) -> str:
    """A ModelNew with the problem's attributes; `forward` is the body of forward(self, x)."""
    ind = lambda s, n: textwrap.indent(textwrap.dedent(s).strip("\n"), " " * n) + "\n" if s.strip() else ""  # noqa: E731
    return (
        header
        + textwrap.dedent(top)
        + "\n\nclass ModelNew(nn.Module):\n"
        + "    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):\n"
        + "        super().__init__()\n"
        + "        self.gemm = nn.Linear(in_features, out_features)\n"
        + "        self.scale = nn.Parameter(torch.randn(scale_shape))\n"
        + "        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)\n"
        + ind(init, 8)
        + "\n    def forward(self, x):\n"
        + ind(forward, 8)
        + ind(methods, 4)
    )


EXT = '''
from torch.utils.cpp_extension import load_inline
_src = r"""
#include <torch/extension.h>
torch::Tensor fused(torch::Tensor x) { return x; }
"""
_ext = load_inline(name="e", cpp_sources=_src, functions=["fused"])
'''

# (id, source, expected flag names). Policies are checked against DEFAULT_POLICIES.
CASES: list[tuple[str, str, set[str]]] = [
    # ------------------------------------------------------------------ Triton's machinery (python_names.TRITON_REFUSED)
    ("triton_self_timing", model("return _ext.fused(x)", top=EXT + "import triton\nfrom triton.testing import do_bench\n"),
     {"triton_escape"}),
    ("triton_knobs_spelled", model("where = getattr(triton, 'knobs').cache.dir\nreturn _ext.fused(x)",
                                   top=EXT + "import triton\n"), {"triton_escape"}),
    ("triton_driver_reexported", model("triton.runtime.jit.driver.active.utils.load_binary\nreturn _ext.fused(x)",
                                       top=EXT + "import triton\n"), {"triton_escape"}),
    # ------------------------------------------------------------------ negatives: no flags
    ("clean_extension", model("return _ext.fused(x)", top=EXT), set()),
    ("elementwise_and_allocations", model("""
        y = torch.empty(x.shape[0], 512, device=x.device)
        z = torch.empty_like(y); w = x.new_zeros(3); v = torch.zeros(4, dtype=torch.float32)
        y = torch.relu(y) * self.scale + torch.exp(z) - x.sum(0).mean()
        y = torch.clamp(y, 0, 1).contiguous().view(-1, 512)
        self.bn.num_batches_tracked += 1
        self.bn.num_batches_tracked.add_(1)
        with torch.no_grad():
            self.bn.running_mean.mul_(0.9)
        return y
    """), set()),
    ("stream_word_in_cuda_comment", model("return _ext.fused(x)", top='''
        from torch.utils.cpp_extension import load_inline
        src = """
        // launched on the current stream, never a new stream; clone() is not fork
        void f(torch::Tensor x) { auto y = x.clone(); auto s = at::cuda::getCurrentCUDAStream();
          k<<<1, 1, 0, s>>>(); std::filesystem::path p; }
        """
        _ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=["fused"])
    '''), set()),
    ("python_current_stream_is_fine", model("""
        s = torch.cuda.current_stream(); torch.cuda.synchronize()
        return _ext.fused(x)
    """, top=EXT), set()),
    ("docstrings_are_not_scanned", '"""Uses no std::thread, no cudaStreamCreate, no open(, no fork()."""\n'
     + model('"""Does not call torch.matmul or cudaEventCreate."""\nreturn _ext.fused(x)', top=EXT), set()),
    ("extension_methods_named_like_torch", model("""
        a = _ext.matmul(x, self.gemm.weight)
        b = self.ext.mm(a, self.gemm.weight)
        return _get().addmm(b)
    """, top=EXT + "\n\ndef _get():\n    return _ext\n", init="self.ext = _ext"), set()),
    ("lru_cache_on_argless_loader", model("return _load().fused(x)", top='''
        import functools
        from torch.utils.cpp_extension import load_inline
        @functools.lru_cache(maxsize=None)
        def _load():
            return load_inline(name="e", cpp_sources="", functions=["fused"])
    '''), set()),
    ("extension_cache_dict", model("return _get().fused(x)", top='''
        from torch.utils.cpp_extension import load_inline
        _cache = {}
        def _get():
            if "ext" not in _cache:
                _cache["ext"] = load_inline(name="e", cpp_sources="", functions=["fused"])
            return _cache["ext"]
    '''), set()),
    ("heavy_ops_outside_forward_path", model("return _ext.fused(x)", top=EXT, init="""
        with torch.no_grad():
            self.gemm.weight.copy_(self.gemm.weight @ torch.eye(in_features))
        w = torch.matmul(self.gemm.weight, self.gemm.weight.t())
    """), set()),
    ("param_named_like_builtin", model("return _ext.fused(x)", top=EXT, methods="""
        def other(self, input, compile=False, open=None):
            return input + 1
    """), set()),
    ("reading_backend_flags_is_fine", model("""
        if torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() == "high":
            pass
        return _ext.fused(x)
    """, top=EXT), set()),
    ("custom_op_namespace", model("return torch.ops.mylib.fused(x)", top='''
        lib = torch.library.Library("mylib", "DEF")
    '''), set()),
    ("syntax_error_gives_nothing", "def broken(:\n    torch.allclose = 1\n", set()),
    ("constant_attribute_names_on_own_objects", model("""
        for n in ("weight", "bias"):
            t = getattr(self.gemm, n)
        w = getattr(self, "scale")
        return getattr(self, "f" + "used")(x) if hasattr(self, name) else _ext.fused(x)
    """, top=EXT + "\nname = 'x'\n", init="""
        for n in ["a", "b"]:
            setattr(self, n, None)
        type(self).calls = 0
    """), set()),
    ("writer_helper_on_own_module", model("return _ext.fused(x)", top=EXT + D("""
        def _set(m, v):
            m.momentum = v
    """), init="_set(self.bn, 0.1)"), set()),
    ("own_class_and_clone_in_cpp", model("return _ext.fused(x)", top=D('''
        src = "auto y = x.clone(); std::filesystem::path p; auto z = at::empty({1}); int openings = 0;"
    ''') + EXT), set()),
    # ------------------------------------------------------------------ torch_fallback
    ("F_linear_alias", model("return F.linear(x, self.gemm.weight)", header=HEADER + "import torch.nn.functional as F\n"),
     {"torch_fallback"}),
    ("functional_from_import", model("return functional.linear(x, self.gemm.weight)",
                                     header=HEADER + "from torch.nn import functional\n"), {"torch_fallback"}),
    ("from_torch_import_as", model("return mm(x, self.gemm.weight.t())",
                                   header=HEADER + "from torch import matmul as mm\n"), {"torch_fallback"}),
    ("from_functional_import_batch_norm", model("return batch_norm(x, None, None, training=True)",
                                                header=HEADER + "from torch.nn.functional import batch_norm\n"),
     {"torch_fallback"}),
    ("full_path_batch_norm", model("return torch.nn.functional.batch_norm(x, None, None, training=True)"),
     {"torch_fallback"}),
    ("torch_batch_norm_and_var_mean", model("v, m = torch.var_mean(x, 0)\nreturn torch.batch_norm(x, None, None, None, None, True, 0.1, 1e-5, False)"),
     {"torch_fallback"}),
    ("matmul_operator", model("return x @ self.gemm.weight.t()"), {"torch_fallback"}),
    ("matmul_augassign", model("x @= self.gemm.weight.t()\nreturn x"), {"torch_fallback"}),
    ("tensor_methods", model("return x.mm(self.gemm.weight.t()).var(0)"), {"torch_fallback"}),
    ("self_gemm_and_bn", model("return self.bn(self.gemm(x) * self.scale)"), {"torch_fallback"}),
    ("self_gemm_forward", model("return self.gemm.forward(x)"), {"torch_fallback"}),
    ("local_alias_of_layer", model("g = self.gemm\nreturn g(x)"), {"torch_fallback"}),
    ("unbound_module_forward", model("return nn.Linear.forward(self.gemm, x)"), {"torch_fallback"}),
    ("other_layer_attribute", model("return self.lin(x)", init="self.lin = torch.nn.Linear(4, 4)"),
     {"torch_fallback"}),
    ("helper_method", model("return self._mm(x)", methods="""
        def _mm(self, x):
            return torch.matmul(x, self.gemm.weight.t())
    """), {"torch_fallback"}),
    ("module_level_helper", model("return ref(self, x)", top="""
        def ref(m, x):
            return torch.einsum("bk,nk->bn", x, m.gemm.weight)
    """), {"torch_fallback"}),
    ("aten_op", model("return torch.ops.aten.addmm.default(self.gemm.bias, x, self.gemm.weight.t())"),
     {"torch_fallback"}),
    ("unbound_tensor_method", model("return torch.Tensor.matmul(x, self.gemm.weight.t())"), {"torch_fallback"}),
    ("getattr_constant", model('return getattr(torch, "matmul")(x, self.gemm.weight.t())'), {"torch_fallback"}),
    ("rebinding_alias", model("return mm(x, self.gemm.weight.t())", top="mm = torch.mm\n"), {"torch_fallback"}),
    ("torch_compile", model("return self.fn(x)", init="self.fn = torch.compile(lambda t: t * 2)"),
     {"torch_fallback"}),
    ("autograd_function_apply", model("return _Fn.apply(x, self.gemm.weight)", top="""
        class _Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                return torch.mm(x, w.t())
    """), {"torch_fallback"}),
    ("submodule_forward", model("return self.inner(x)", init="self.inner = _Inner(self.gemm)", top="""
        class _Inner(nn.Module):
            def __init__(self, lin):
                super().__init__()
                self.w = lin.weight
            def forward(self, x):
                return torch.addmm(x, x, self.w)
    """), {"torch_fallback"}),
    ("operator_matmul", model("return operator.matmul(x, self.gemm.weight.t())", header=HEADER + "import operator\n"),
     {"torch_fallback"}),
    ("reduce_operator_matmul", model("return functools.reduce(mm, [x, self.gemm.weight.t()])",
                                     header=HEADER + "import functools\nfrom operator import matmul as mm\n"),
     {"torch_fallback"}),
    ("variable_functions_spelling", model("return torch._C._VariableFunctions.addmm(self.gemm.bias, x, self.gemm.weight.t())"),
     {"torch_fallback"}),
    ("cpp_addmm_out", model("return _ext.fused(x)", top=D('''
        src = "torch::Tensor fused(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor out) { at::addmm_out(out, b, x, w.t()); return out; }"
    ''') + EXT), {"torch_fallback"}),
    ("cpp_namespaced_aten", model("return _ext.fused(x)", top=D('''
        src = """
        auto y = at::native::batch_norm_cpu(x, g, b, rm, rv, true, 0.1, 1e-5);
        auto z = at::_ops::mm::call(a, b);
        torch::nn::Linear lin(4, 4);
        """
    ''') + EXT), {"torch_fallback"}),
    ("cpp_calls_torch_matmul", model("return _ext.fused(x)", top='''
        from torch.utils.cpp_extension import load_inline
        _ext = load_inline(name="e", cpp_sources="torch::Tensor fused(torch::Tensor x, torch::Tensor w) { return torch::matmul(x, w); }", functions=["fused"])
    '''), {"torch_fallback"}),
    # ------------------------------------------------------------------ cuda_stream
    ("python_stream_and_event", model("""
        s = torch.cuda.Stream()
        e = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s):
            y = _ext.fused(x)
        return y
    """, top=EXT), {"cuda_stream"}),
    ("stream_from_import", model("return _ext.fused(x)", top=EXT, header=HEADER + "from torch.cuda import Stream\n"),
     {"cuda_stream"}),
    ("cuda_graph", model("return _ext.fused(x)", top=EXT, init="self.g = torch.cuda.CUDAGraph()"), {"cuda_stream"}),
    ("cpp_stream_apis", model("return _ext.fused(x)", top=D('''
        src = """
        cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaEvent_t e; cudaEventCreate(&e);
        auto p = at::cuda::getStreamFromPool();
        """
    ''') + EXT), {"cuda_stream"}),
    # ------------------------------------------------------------------ concurrency
    ("threading", model("""
        t = threading.Thread(target=lambda: None); t.start()
        return _ext.fused(x)
    """, top=EXT, header=HEADER + "import threading\n"), {"concurrency"}),
    ("thread_pool_from_import", model("return _ext.fused(x)", top=EXT,
                                      header=HEADER + "from concurrent.futures import ThreadPoolExecutor\n"),
     {"concurrency"}),
    ("multiprocessing_and_fork", model("os.fork()\nreturn _ext.fused(x)", top=EXT,
                                       header=HEADER + "import os\nimport multiprocessing as mp\n"), {"concurrency"}),
    ("asyncio", model("return asyncio.run(None)", header=HEADER + "import asyncio\n"), {"concurrency"}),
    # the C modules behind os, subprocess, socket: the same names under another root
    ("posix_fork_and_setpgid", model("posix.fork()\nreturn _ext.fused(x)", top=EXT, header=HEADER + "import posix\n"),
     {"concurrency"}),
    ("posix_setpgid", model("posix.setpgid(0, 0)\nreturn _ext.fused(x)", top=EXT, header=HEADER + "import posix\n"),
     {"introspection"}),
    ("posix_write_and_posixsubprocess", model("posix.write(1, b'x')\nreturn _ext.fused(x)", top=EXT,
                                              header=HEADER + "import posix\nimport _posixsubprocess\n"),
     {"io_or_network"}),
    ("pipe_size_and_shared_mapping", model("fcntl.fcntl(1, 1031, 1 << 20)\nreturn _ext.fused(x)", top=EXT,
                                           header=HEADER + "import fcntl\nimport mmap\n"), {"io_or_network"}),
    ("torch_multiprocessing", model("return x", header=HEADER + "import torch.multiprocessing as tmp\n"),
     {"concurrency"}),
    ("logging_threading", model("logging.threading.Thread(target=print).start()\nreturn x",
                                header=HEADER + "import logging\n"), {"concurrency"}),
    ("switch_interval", model("return x", header=HEADER + "import sys\n", top="sys.setswitchinterval(1e-6)\n"),
     {"concurrency"}),
    ("cpp_aten_launch", model("return _ext.fused(x)", top='src = "at::launch([=] { work(); });"\n' + EXT),
     {"concurrency"}),
    ("cpp_threads", model("return _ext.fused(x)", top=D('''
        src = "void f() { std::thread t([]{}); pthread_t p; pthread_create(&p, 0, 0, 0); if (fork() == 0) {} }"
    ''') + EXT), {"concurrency"}),
    ("cpp_clone_and_process_groups", model("return _ext.fused(x)", top=D('''
        src = "void f() { clone(g, stack, 0, 0); setpgid(0, 0); kill(1, 19); fcntl(1, 1031, 1 << 20); }"
    ''') + EXT), {"concurrency", "introspection", "io_or_network"}),
    ("cpp_timer_that_continues_the_process", model("return _ext.fused(x)", top=D('''
        src = "void f() { sigevent e; e.sigev_notify = SIGEV_SIGNAL; e.sigev_signo = 18; timer_create(1, &e, &t); }"
    ''') + EXT), {"introspection"}),
    ("cpp_openmp_thread_count_of_its_own", model("return _ext.fused(x)", top=D('''
        src = """
        #pragma omp parallel for num_threads(8)
        for (int i = 0; i < n; ++i) y[i] = x[i];
        void g() { omp_set_num_threads(2); _Pragma("omp parallel num_threads(4)") {} }
        """
    ''') + EXT), {"concurrency"}),
    ("cpp_openmp_at_the_harness_thread_count", model("return _ext.fused(x)", top=D('''
        src = """
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < n; ++i) y[i] = x[i] * omp_get_num_threads();
        """
    ''') + EXT), set()),
    ("cpp_tensor_clone_is_not_a_process", model("return _ext.fused(x)", top=D('''
        src = "torch::Tensor f(torch::Tensor x) { auto y = x.clone(); auto z = at::clone(y); return z; }"
    ''') + EXT), set()),
    # ------------------------------------------------------------------ monkeypatch
    ("patch_allclose", model("return x * 0", top="""
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
    """), {"monkeypatch"}),
    ("patch_numpy_alias", model("return x", header=HEADER + "import numpy as np\nnp.allclose = lambda *a: True\n"),
     {"monkeypatch"}),
    ("patch_event_elapsed_time", model("return x", top="torch.cuda.Event.elapsed_time = lambda s, e: 1e-3\n"),
     {"monkeypatch"}),
    ("patch_builtins", model("return x", header=HEADER + "import builtins\nbuiltins.print = None\n"), {"monkeypatch"}),
    ("setattr_delattr", model("return x", top='setattr(torch, "allclose", None)\ndelattr(torch.testing, "assert_close")\n'),
     {"monkeypatch"}),
    ("dict_and_vars_writes", model("return x", top='torch.__dict__["allclose"] = None\nvars(torch)["eq"] = None\n'
                                   'torch.__dict__.update(x=1)\n'), {"monkeypatch"}),
    ("augassign_and_del", model("return x", top="torch.x += 1\ndel torch.allclose\n"), {"monkeypatch"}),
    ("patch_tensor_method", model("return x", top="torch.Tensor.__eq__ = lambda a, b: True\n"), {"monkeypatch"}),
    ("from_import_then_patch", model("return x", header=HEADER + "from torch import testing\n",
                                     top="testing.assert_close = print\n"), {"monkeypatch"}),
    ("getattr_chain_patch", model("return x", top='getattr(torch, "testing").assert_close = print\n'), {"monkeypatch"}),
    ("patch_inside_forward", model("torch.allclose = lambda *a, **k: True\nreturn x"), {"monkeypatch"}),
    ("aten_override", model("return x", top='lib = torch.library.Library("aten", "IMPL")\n'
                            'lib.impl("mm", lambda a, b: a, "CUDA")\n'), {"monkeypatch"}),
    ("tensor_subclass", model("return _Lazy(x)", top="""
        class _Lazy(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return True
    """), {"monkeypatch"}),
    ("class_swap", model("y = x * 2\ny.__class__ = Foo\nreturn y", top="class Foo: pass\n"), {"monkeypatch"}),
    ("patch_class_through_type", model("return x", init="type(self.gemm).forward = lambda s, x: x"), {"monkeypatch"}),
    ("patch_class_through_dunder_class", model("return x", init="self.bn.__class__.forward = lambda s, x: x"),
     {"monkeypatch"}),
    ("setattr_on_type_of", model("return x", init='setattr(type(self.bn), "forward", lambda s, x: x)'),
     {"monkeypatch"}),
    ("patch_through_mro", model("return x", init="type(self).__mro__[1].__call__ = lambda s, x: x"), {"monkeypatch"}),
    ("module_globals_via_helper", model("return x", top=D("""
        import torch.nn.modules.linear
        def _swap(namespace, value):
            namespace.F = value
        _swap(torch.nn.modules.linear, None)
    """)), {"monkeypatch", "dynamic_code"}),
    ("module_dict_via_helper", model("return x", top=D("""
        import torch.nn.modules.batchnorm as bnm
        def _put(d, **kw):
            d.update(kw)
        _put(vars(bnm), F=None)
    """)), {"monkeypatch"}),
    ("module_globals_in_a_loop", model("return x", top=D("""
        import torch.nn.modules.linear, torch.nn.modules.batchnorm
        for m in (torch.nn.modules.linear, torch.nn.modules.batchnorm):
            m.F = None
    """)), {"monkeypatch", "dynamic_code"}),
    ("module_from_a_helper", model("return x", top=D("""
        def _mod():
            return torch.nn.modules.batchnorm
        _mod().F = None
    """)), {"monkeypatch", "dynamic_code"}),
    ("setattr_as_a_value", model("return x", top='list(map(setattr, [torch], ["allclose"], [None]))\n'),
     {"monkeypatch", "dynamic_code"}),
    ("global_module_hooks", model("return x", header=HEADER + "from torch.nn.modules.module import register_module_forward_hook\n",
                                  top=D("""
        register_module_forward_hook(lambda m, i, o: o)
        torch.nn.modules.module.register_module_forward_pre_hook(lambda m, i: i)
        torch.nn.modules.module._global_forward_hooks.clear()
    """)), {"monkeypatch", "dynamic_code"}),
    ("load_state_dict_override", model("return x", methods="""
        def load_state_dict(self, state_dict, strict=True, assign=False):
            for t in state_dict.values():
                t.zero_()
            return super().load_state_dict(state_dict, strict)
    """), {"monkeypatch"}),
    ("load_from_state_dict_in_a_submodule", model("return self.inner(x)", init="self.inner = _Inner()", top="""
        class _Inner(nn.Module):
            def _load_from_state_dict(self, *args):
                pass
            def forward(self, x):
                return x
    """), {"monkeypatch"}),
    # found in review: the executor sets the mode as it takes a window's command, before that window's clock starts
    ("train_override", model("return x", methods="""
        def train(self, mode=True):
            self.gemm.weight.sum()  # the weights pulled into the cache, untimed, before every window
            return super().train(mode)
    """), {"monkeypatch"}),
    ("train_override_in_a_mixin", model("return x", top="""
        class _Mode:
            def train(self, mode=True):
                return nn.Module.train(self, mode)
    """).replace("class ModelNew(nn.Module)", "class ModelNew(_Mode, nn.Module)"), {"monkeypatch"}),
    ("load_state_dict_in_a_mixin", model("return x", top="""
        class _Load:
            def load_state_dict(self, state_dict, strict=True, assign=False):
                return nn.Module.load_state_dict(self, state_dict, strict)
    """).replace("class ModelNew(nn.Module)", "class ModelNew(_Load, nn.Module)"), {"monkeypatch"}),
    ("eval_override_in_a_submodule", model("return self.inner(x)", init="self.inner = _Inner()", top="""
        class _Inner(nn.Module):
            def eval(self):
                return self
            def forward(self, x):
                return x
    """), {"monkeypatch"}),
    ("state_dict_hook", model("return x", init="self._register_load_state_dict_pre_hook(lambda *a: None)"),
     {"monkeypatch"}),
    ("buffers_registry_replaced", model("return x", init="self.bn._buffers = _Lazy(self.bn._buffers)",
                                        top="class _Lazy(dict):\n    pass\n"), {"monkeypatch"}),
    ("buffers_registry_through_object_setattr", model("return x", init='object.__setattr__(self.bn, "_buffers", {})'),
     {"monkeypatch"}),
    ("buffers_registry_through_dict", model("return x", init='self.bn.__dict__["_buffers"] = {}'), {"monkeypatch"}),
    ("cpp_aten_impl", model("return _ext.fused(x)", top='src = "TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl(\\"mm\\", f); }"\n' + EXT),
     {"monkeypatch"}),
    # ------------------------------------------------------------------ monkeypatch + introspection
    ("sys_modules_write", model("return x", header=HEADER + "import sys\n", top='sys.modules["evaluator"] = None\n'),
     {"monkeypatch"}),
    ("patch_evaluator", model("return x", header=HEADER + "import evaluator.wire.tensors as c\n",
                              top="c.compare = lambda *a: True\n"), {"monkeypatch", "introspection"}),
    # ------------------------------------------------------------------ introspection
    ("gc", model("gc.collect()\nreturn x", header=HEADER + "import gc\n"), {"introspection"}),
    ("inspect", model("return x", header=HEADER + "import inspect\n"), {"introspection"}),
    ("getframe", model("f = sys._getframe(1)\nreturn x", header=HEADER + "import sys\n"), {"introspection"}),
    ("settrace", model("sys.settrace(None)\nreturn x", header=HEADER + "import sys\n"), {"introspection"}),
    ("ctypes_from_import", model("return x", header=HEADER + "from ctypes import CDLL\n"), {"introspection"}),
    ("ctypes_use", model("return x", top="import ctypes\nlib = ctypes.CDLL(None)\n"), {"introspection"}),
    ("builtins_dunder", model('o = __builtins__["open"]\nreturn x'), {"introspection", "dynamic_code", "io_or_network"}),
    ("importlib_reload", model("return x", header=HEADER + "import importlib\n", top="importlib.reload(torch)\n"),
     {"introspection"}),
    ("frame_walk", model("f = self.forward.__globals__\nreturn x"), {"introspection"}),
    ("traceback_tb_frame_via_getattr", model("return x", init="""
        try:
            raise RuntimeError
        except RuntimeError as err:
            frame = getattr(err.__traceback__, "tb_frame")
    """), {"introspection"}),
    ("frame_attribute_name_in_a_variable", model("return x", top='_BACK = "f_back"\n', init="""
        f = self
        f = getattr(f, _BACK)
    """), {"introspection"}),
    ("attrgetter_frames", model("return x", header=HEADER + "import operator\n",
                                top='walk = operator.attrgetter("tb_frame.f_back")\n'), {"introspection"}),
    ("exc_info_traceback", model("return x", header=HEADER + "import sys\n", init="tb = sys.exc_info()[2]"),
     {"introspection"}),
    ("os_sys_modules", model("return x", header=HEADER + "import os\n", init="m = os.sys.modules"),
     {"introspection"}),
    ("cpp_dlsym", model("return _ext.fused(x)", top='src = "void* p = dlsym(RTLD_NEXT, \\"cudaEventElapsedTime\\");"\n' + EXT),
     {"introspection"}),
    # ------------------------------------------------------------------ io_or_network
    ("open_builtin", model("return x", top='data = open("/tmp/ref.pt", "rb").read()\n'), {"io_or_network"}),
    ("with_open", model('with open("/tmp/out.txt", "w") as fh:\n    fh.write("x")\nreturn x'), {"io_or_network"}),
    ("socket_subprocess", model("return x", header=HEADER + "import socket\nimport subprocess\n"), {"io_or_network"}),
    ("os_system_popen_remove", model('os.system("ls"); os.popen("ls"); os.remove("f")\nreturn x',
                                     header=HEADER + "import os\n"), {"io_or_network"}),
    ("urllib_requests_http", model("return x", header=HEADER + "import urllib.request\nimport requests\nimport http.client\n"),
     {"io_or_network"}),
    ("pathlib_write", model('Path("/tmp/x").write_text("hi")\nreturn x', header=HEADER + "from pathlib import Path\n"),
     {"io_or_network"}),
    ("shutil", model("return x", header=HEADER + "import shutil\n"), {"io_or_network"}),
    ("environ_writes", model('os.environ["CUDA_LAUNCH_BLOCKING"] = "1"\nos.environ.update(A="1")\nreturn x',
                             header=HEADER + "import os\n"), {"io_or_network"}),
    ("torch_save", model('torch.save(x, "/tmp/x.pt")\nreturn x'), {"io_or_network"}),
    ("cpp_extension_subprocess", model("return x", header=HEADER + "from torch.utils import cpp_extension\n",
                                       top='cpp_extension.subprocess.run(["true"])\n'), {"io_or_network"}),
    ("cpp_files_and_sockets", model("return _ext.fused(x)", top=D('''
        src = """
        std::ofstream out("/tmp/x"); int fd = open("/tmp/y", O_WRONLY | O_CREAT, 0644);
        std::filesystem::remove("/tmp/z"); int s = socket(AF_INET, SOCK_STREAM, 0); connect(s, addr, len);
        """
    ''') + EXT), {"io_or_network"}),
    ("detached_process", model("return x", header=HEADER + "import subprocess\n",
                               top='subprocess.Popen(["sleep", "60"], start_new_session=True)\n'),
     {"io_or_network", "concurrency"}),
    ("cpp_fopen", model("return _ext.fused(x)", top='src = "FILE* f = fopen(\\"/tmp/x\\", \\"w\\");"\n' + EXT),
     {"io_or_network"}),
    ("cpp_torch_save", model("return _ext.fused(x)", top='src = "torch::save(t, \\"/tmp/x.pt\\"); torch::pickle_load(d);"\n'
                             + EXT), {"io_or_network"}),
    # ------------------------------------------------------------------ precision_flags (not also monkeypatch)
    ("tf32_matmul", model("return x", top="torch.backends.cuda.matmul.allow_tf32 = True\n"), {"precision_flags"}),
    ("tf32_cudnn", model("return x", top="torch.backends.cudnn.allow_tf32 = True\n"), {"precision_flags"}),
    ("matmul_precision", model('torch.set_float32_matmul_precision("high")\nreturn x'), {"precision_flags"}),
    ("reduced_precision", model("return x", top="torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True\n"
                                "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True\n"),
     {"precision_flags"}),
    ("default_dtype_deterministic", model("return x", top="torch.set_default_dtype(torch.float16)\n"
                                          "torch.use_deterministic_algorithms(False)\n"), {"precision_flags"}),
    ("fp32_precision", model("return x", top='torch.backends.cuda.matmul.fp32_precision = "tf32"\n'
                             'torch.backends.cudnn.conv.fp32_precision = "tf32"\n'), {"precision_flags"}),
    ("setattr_tf32", model("return x", top='setattr(torch.backends.cuda.matmul, "allow_tf32", True)\n'),
     {"precision_flags"}),
    ("aliased_backends", model("return x", header=HEADER + "import torch.backends.cuda as tbc\n",
                               top="tbc.matmul.allow_tf32 = True\n"), {"precision_flags"}),
    ("cpp_global_context", model("return _ext.fused(x)",
                                 top='src = "at::globalContext().setAllowTF32CuBLAS(true);"\n' + EXT),
     {"precision_flags"}),
    # ------------------------------------------------------------------ output_caching
    ("self_cache_returned", model("""
        if self._out is None:
            self._out = _ext.fused(x)
        return self._out
    """, top=EXT, init="self._out = None"), {"output_caching"}),
    ("module_dict_keyed_by_input", model("""
        if x in _cache:
            return _cache[x]
        y = _ext.fused(x)
        _cache[x] = y
        return y
    """, top=EXT + "\n_cache = {}\n"), {"output_caching"}),
    ("global_last", model("""
        global _last
        if _last is None:
            _last = _ext.fused(x)
        return _last
    """, top=EXT + "\n_last = None\n"), {"output_caching"}),
    ("lru_cache_on_helper_with_args", model("return _run(x)", top=EXT + D("""
        import functools
        @functools.lru_cache(maxsize=8)
        def _run(x):
            return _ext.fused(x)
    """)), {"output_caching"}),
    ("cache_decorator_alias", model("return _ext.fused(x)", top=EXT, header=HEADER + "from functools import cache\n",
                                    methods="""
        @cache
        def forward(self, x):
            return _ext.fused(x)
    """), {"output_caching"}),
    ("data_ptr", model("k = x.data_ptr()\nreturn _ext.fused(x)", top=EXT), {"output_caching"}),
    # ------------------------------------------------------------------ dynamic_code
    ("exec_eval_compile", model('exec("y = 1"); eval("2"); compile("3", "f", "eval")\nreturn x'), {"dynamic_code"}),
    # a name spelled from known parts is still computed (dynamic_code), and what it spells is judged too
    ("computed_import", model("m = __import__(name)\nreturn x", top='name = "g" + "c"\n'),
     {"dynamic_code", "introspection"}),
    ("computed_getattr_on_module", model("f = getattr(torch, name)\nreturn x", top='name = "all" + "close"\n'),
     {"dynamic_code"}),
    ("computed_getattr_on_a_local", model("return x", init="""
        try:
            raise RuntimeError
        except RuntimeError as err:
            tb = err.with_traceback(None)
        f = getattr(tb, "tb_" + "frame")
    """), {"dynamic_code", "introspection"}),
    ("code_interpreter", model("return x", header=HEADER + "import code\n",
                               top='code.InteractiveInterpreter().runsource("import threading")\n'), {"dynamic_code"}),
    ("runpy", model("return x", header=HEADER + "import runpy\n", top='runpy.run_path("x.py")\n'), {"dynamic_code"}),
    ("constant_dynamic_import_resolves", model("return x", top='g = __import__("gc")\ng.collect()\n'),
     {"introspection"}),
    # ------------------------------------------------------------------ indirect builtins (issue 21): dynamic_code
    ("vars_builtins_spelled_import", model("return x", header=HEADER + "import builtins\n",
                                           top='g = vars(builtins)["__imp" + "ort__"]("gc")\n'),
     {"dynamic_code", "introspection"}),  # introspection: what it spells (__import__("gc")) is judged too
    ("builtins_dict_constant_key", model("return x", header=HEADER + "import builtins\n",
                                         top='length = builtins.__dict__["len"]\n'), {"dynamic_code"}),
    ("builtins_dict_get", model("return x", header=HEADER + "import builtins as b\n",
                                top='imp = b.__dict__.get(name)\n', init="name = 'x'"), {"dynamic_code"}),
    ("getattr_dunder_builtins_spelled", model("return x", top='s = getattr(__builtins__, "__imp" + "ort__")("sys")\n'),
     {"dynamic_code", "introspection"}),
    ("getattr_builtins_chr_join", model("return x", header=HEADER + "import builtins\n", top=D("""
        name = "".join([chr(95), chr(95), "import", chr(95) * 2])
        imp = getattr(builtins, name)
    """)), {"dynamic_code"}),
    ("getattr_builtins_fstring", model("return x", header=HEADER + "import builtins\n",
                                       top='part = "ort"\nimp = getattr(builtins, f"__imp{part}__")\n'),
     {"dynamic_code"}),
    ("builtins_getattribute", model("return x", header=HEADER + "import builtins\n",
                                    top='imp = builtins.__getattribute__("__imp" + "ort__")\n'), {"dynamic_code"}),
    ("getattr_passed_as_a_value", model("return x", header=HEADER + "import builtins, functools\n",
                                        top='imp = functools.reduce(getattr, ["__import__"], builtins)\n'),
     {"dynamic_code"}),
    ("importlib_find_spec", model("return x", header=HEADER + "import importlib.util\n",
                                  top='loader = importlib.util.find_spec("gc").loader\n'), {"dynamic_code"}),
    ("module_loader", model("return x", top='g = __loader__.load_module("gc")\nt = torch.__loader__\n'),
     {"dynamic_code"}),
    ("globals_computed_key", model("return x", top='b = globals()["__buil" + "tins__"]\n'),
     {"dynamic_code", "introspection"}),
    ("module_namespace_computed_key", model("return x", header=HEADER + "import os\n",
                                            top="def _get(name):\n    return vars(os)[name]\n"), {"dynamic_code"}),
    ("module_namespace_read_whole", model("return x", header=HEADER + "import torch.nn.functional as F\n",
                                          top="ops = dict(vars(F).items())\n"), {"dynamic_code"}),
    # near misses: constant names resolve like attributes; ModelNew's own objects and globals are its own
    ("indirect_builtins_near_misses", model("""
        n = getattr(builtins, "len")(x.shape)
        lin = vars(F)["relu"]
        ok = "linear" in vars(F) and "__import__" in dir(builtins)
        own = vars(self), self.__dict__.items(), globals()["_SCALE"]
        m = importlib.import_module("math")
        return x * _SCALE
    """, header=HEADER + "import builtins\nimport importlib\nimport torch.nn.functional as F\n", top="_SCALE = 2.0\n"),
     set()),
    # ------------------------------------------------------------------ Python driven from C++ (issue 21)
    ("cpp_pybind_import_attr", model("return _ext.fused(x)", top="src = " + repr(D("""
        torch::Tensor fused(torch::Tensor x, torch::Tensor w) {
          auto F = py::module_::import("torch.nn.functional");
          return F.attr("linear")(x, w).cast<torch::Tensor>();
        }
    """)) + "\n" + EXT), {"python_from_cpp", "torch_fallback"}),
    ("cpp_pybind_exec", model("return _ext.fused(x)", top="src = " + repr(
        'void f() { py::exec("import gc; gc.collect()"); }') + "\n" + EXT), {"python_from_cpp"}),
    ("cpp_pybind_eval_and_globals_through_an_alias", model("return _ext.fused(x)", top="src = " + repr(D("""
        namespace q = pybind11;
        void f() { q::eval("1"); auto g = q::globals(); }
    """)) + "\n" + EXT), {"python_from_cpp"}),
    ("cpp_pybind_bare_after_using", model("return _ext.fused(x)", top="src = " + repr(D("""
        using namespace pybind11;
        void f() { exec("import os"); }
    """)) + "\n" + EXT), {"python_from_cpp"}),
    ("cpp_python_c_api", model("return _ext.fused(x)", top="src = " + repr(D("""
        void f() {
          PyGILState_STATE s = PyGILState_Ensure();
          PyRun_SimpleString("import gc");
          PyObject* m = PyImport_ImportModule("torch.nn.functional");
          PyObject* bn = PyObject_GetAttrString(m, "batch_norm");
          PyGILState_Release(s);
        }
    """)) + "\n" + EXT), {"python_from_cpp", "torch_fallback"}),
    ("cpp_embedded_interpreter", model("return _ext.fused(x)", top="src = " + repr(
        "#include <pybind11/embed.h>\nvoid f() {}") + "\n" + EXT), {"python_from_cpp"}),
    ("cpp_python_spelled_from_parts", model("return _ext.fused(x)", top='a = "py::ex"\nsrc = a + "ec(\\"x\\");"\n' + EXT),
     {"python_from_cpp"}),
    ("cpp_attr_of_an_argument", model("return _ext.fused(x)", top="src = " + repr(
        'void f(py::object o) { o.attr("relu")(); }') + "\n" + EXT), {"python_from_cpp"}),
    ("cpp_pybind_honest_near_misses", model("return _ext.fused(x)", top="src = " + repr(D("""
        #include <torch/extension.h>
        __device__ float eval_poly(float x) { return x; }
        __global__ void evaluate(float* y) { }
        torch::Tensor fused(torch::Tensor x) {
          TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
          auto out = at::empty({x.size(0)}, x.options());
          float* p = out.data_ptr<float>();
          auto r = c10::Dispatcher::singleton().findSchemaOrThrow("aten::relu", "");
          PyObject* unused = nullptr;
          return out;
        }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
          m.def("fused", &fused, "fused", py::arg("x"), py::call_guard<py::gil_scoped_release>());
        }
    """)) + "\n" + EXT), set()),
    # ------------------------------------------------------------------ torch operators called from C++: torch_fallback
    ("cpp_torch_linear_and_batch_norm", model("return _ext.fused(x)", top="src = " + repr(
        "auto y = torch::linear(x, w, b); auto z = at::batch_norm(y, g, be, rm, rv, true, 0.1, 1e-5, false);")
        + "\n" + EXT), {"torch_fallback"}),
    ("cpp_dispatcher_by_name", model("return _ext.fused(x)", top="src = " + repr(
        'static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::addmm", "");') + "\n" + EXT),
     {"torch_fallback"}),
]


@pytest.mark.parametrize("source,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_flag_table(source: str, expected: set[str]) -> None:
    if not source.startswith("def broken"):
        ast.parse(source)  # a snippet that does not parse would silently give no flags
    flags = static_flags(source)
    assert {f.name for f in flags} == expected, "\n".join(f"{f.name}: {f.reason}" for f in flags)
    for f in flags:
        assert f.policy == DEFAULT_POLICIES[f.name]
        assert re.match(r"lines? \d+(, \d+)*: ", f.reason), f.reason
    assert len({f.name for f in flags}) == len(flags), "one flag per name"


def test_every_flag_has_a_case_a_policy_and_a_description() -> None:
    # no_custom_kernel is the triton backend's alone (tests/test_triton_backend.py)
    raised = set().union(*(expected for _, _, expected in CASES)) | {"no_custom_kernel"}
    assert raised == set(DEFAULT_POLICIES), "each flag needs a case of CASES that raises it; cases name only known flags"
    assert set(DEFAULT_POLICIES.values()) == set(FlagPolicy)
    assert set(FLAG_DESCRIPTIONS) == set(DEFAULT_POLICIES)
    assert all(d.endswith(".") and d.count(". ") == 0 for d in FLAG_DESCRIPTIONS.values())


def test_policy_override() -> None:
    src = model("return self.gemm(x)")
    assert [f.policy for f in static_flags(src)] == [FlagPolicy.flag]
    assert [f.policy for f in static_flags(src, {"torch_fallback": FlagPolicy.reject})] == [FlagPolicy.reject]
    assert [f.policy for f in static_flags(src, {"torch_fallback": "reject"})] == [FlagPolicy.reject]  # type: ignore[dict-item]


def test_one_flag_per_name_with_every_place_sorted_by_first_place() -> None:
    src = (
        "import torch\nimport gc\n"                                   # 1, 2
        "torch.allclose = torch.testing.assert_close = None\n"       # 3: two targets
        "gc.collect(); gc.collect()\n"                                # 4
        "torch.backends.cuda.matmul.allow_tf32 = True\n"             # 5
        "torch.equal = None\n"                                        # 6
        "gc.collect()\n"                                              # 7
    )
    flags = static_flags(src)
    assert all(isinstance(f, Flag) for f in flags)
    assert [f.name for f in flags] == ["introspection", "monkeypatch", "precision_flags"]
    introspection, monkeypatch, precision = (f.reason for f in flags)
    # gc.collect on lines 4 and 7, said once; `gc` alone on line 4 is what gc.collect already says
    assert introspection == ("line 2: uses gc (introspection or process control); "
                             "lines 4, 7: uses gc.collect (introspection or process control)")
    assert monkeypatch.count("line 3: assigns") == 2 and "torch.allclose" in monkeypatch \
        and "torch.testing.assert_close" in monkeypatch and monkeypatch.endswith(
            "line 6: assigns torch.equal (modifies an imported module or object)")
    assert precision.startswith("line 5: ")


def test_cpp_heavy_ops_are_derived_from_the_problems_names() -> None:
    """The C++ forms of a heavy op come from its name alone (evaluator.wire.problem Rules), whatever the problem."""
    from evaluator.wire.problem import HeavyOps, Rules

    rules = Rules(heavy=HeavyOps(label="softmax", cpp=["softmax"], cpp_methods=["softmax"], modules=["Softmax*"]))
    hits = ["at::softmax(x, 1)", "at::_softmax_out(o, x, 1, false)", "at::native::softmax_cpu(x, 1, false)",
            "torch::nn::functional::softmax(x, opts)", "at::_ops::_softmax::call(x, 1, false)", "x.softmax(1)",
            "x->softmax_(1)", "torch::nn::Softmax2d sm;", "at::cpu::_softmax_outf(x, 1, false, o)"]
    misses = ["at::matmul(a, b)", "softmax_kernel<<<1, 1>>>(x)", "my_softmax(x)", "x.softmax_tile(1)",
              "torch::nn::functional::log_softmax(x, 1)"]
    for text in hits + misses:
        src = model("return _ext.fused(x)", top=f"src = {text!r}\n" + EXT)
        got = [f.name for f in static_flags(src, rules=rules)]
        assert got == (["torch_fallback"] if text in hits else []), text


def test_line_numbers_inside_cpp_strings() -> None:
    src = 'import torch\nsrc = """\nline two\nline three\ncudaStreamCreate(&s);\n"""\n'
    (flag,) = static_flags(src)
    assert flag.name == "cuda_stream" and flag.reason.startswith("line 5:")


def test_python_from_cpp_reasons_name_the_construct_and_its_line() -> None:
    src = model("return _ext.fused(x)", top=D('''
        src = """
        #include <torch/extension.h>
        torch::Tensor fused(torch::Tensor x) {
          py::exec("import gc");
          auto F = py::module_::import("torch.nn.functional");
          return F.attr("batch_norm")(x).cast<torch::Tensor>();
        }
        """
    ''') + EXT)
    lines = src.splitlines()
    line_of = {word: next(i for i, t in enumerate(lines, 1) if word in t) for word in ("py::exec", "module_", ".attr(")}
    flags = {f.name: f for f in static_flags(src)}
    assert set(flags) == {"python_from_cpp", "torch_fallback"}
    reason = flags["python_from_cpp"].reason
    assert flags["python_from_cpp"].policy == FlagPolicy.reject
    for word, line in line_of.items():
        assert f"line {line}: " in reason and word.strip("._") in reason, reason
    assert flags["torch_fallback"].policy == FlagPolicy.flag
    assert flags["torch_fallback"].reason.startswith(f"line {line_of['.attr(']}: ") and 'attr("batch_norm")' in \
        flags["torch_fallback"].reason


def test_indirect_builtins_reasons_name_what_is_spelled() -> None:
    src = model("return x", header=HEADER + "import builtins\n", top=D('''
        _gc = vars(builtins)["__imp" + "ort__"]("gc")
        _sys = getattr(__builtins__, "__imp" + "ort__")("sys")
    '''))
    first = next(i for i, t in enumerate(src.splitlines(), 1) if "vars(builtins)" in t)
    flags = {f.name: f for f in static_flags(src)}
    dynamic = flags["dynamic_code"].reason
    assert flags["dynamic_code"].policy == FlagPolicy.reject
    assert dynamic.startswith(f"line {first}: reads the builtins' namespace as a mapping (vars(builtins)[")
    assert dynamic.count("spells '__import__'") == 2 and f"line {first + 1}: getattr() on the builtins module" in dynamic
    assert f"line {first}: uses gc" in flags["introspection"].reason  # what the spelled __import__ imports
    assert "accesses __builtins__" in flags["introspection"].reason


def test_a_string_spelled_from_parts_is_scanned_as_cpp_once() -> None:
    """A C++ token split over constants (`"py::ex" + "ec("`) is found in what they spell; a token one
    constant already holds is not reported twice."""
    src = 'import torch\nsrc = "cudaStreamCreate(&s); py::ex" + "ec(\\"x\\");"\n'
    flags = {f.name: f.reason for f in static_flags(src)}
    assert flags == {"cuda_stream": "line 2: C++/CUDA source creates a CUDA stream/event/graph: cudaStreamCreate",
                     "python_from_cpp": "line 2: C++/CUDA source runs Python (pybind11 or the Python C API) "
                                        "(spelled from parts): py::exec"}


def test_padding_does_not_hide_a_spelled_string() -> None:
    """A long chain of `+` is one step, and names bound once are followed one link at a time: padding
    either (`"" + "" + ... + "py::ex" + "ec("`, `a1 = a0 + ""`, ...) hides nothing."""
    plus = 'import torch\nsrc = ' + " + ".join(['""'] * 300) + ' + "py::ex" + "ec(1);"\n'
    names = "import torch\n" + "".join(f"a{i} = a{i - 1} + ''\n" if i else "a0 = 'py::ex'\n" for i in range(300))
    names += "src = a299 + 'ec(1);'\n"
    for src in (plus, names):
        assert [f.name for f in static_flags(src)] == ["python_from_cpp"]
    assert [f.name for f in static_flags(names.replace("'py::ex'", "'py::'"))] == []  # near miss: py::ec(


def test_fallback_reported_on_helper_line() -> None:
    src = model("return self._mm(x)", methods="""
        def _mm(self, x):
            y = x * 2
            return torch.matmul(y, self.gemm.weight.t())
    """)
    (flag,) = static_flags(src)
    line = next(i for i, t in enumerate(src.splitlines(), 1) if "torch.matmul" in t)
    assert flag.reason.startswith(f"line {line}:")


def test_no_model_new_still_checks_module() -> None:
    assert [f.name for f in static_flags("import torch\ntorch.allclose = None\nx = torch.mm\n")] == ["monkeypatch"]


GOLDEN_STYLE = r'''
"""A realistic candidate: one fused CUDA kernel pair for Linear -> scale -> BatchNorm1d (train)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// Tiled GEMM with the bias and the scale fused into the epilogue; launched on the current stream.
__global__ void gemm_scale_kernel(const float* x, const float* w, const float* b, const float* s,
                                  float* out, int B, int K, int N) { /* ... */ }
__global__ void bn_train_kernel(float* y, const float* g, const float* beta, float* rm, float* rv,
                                int B, int N, float momentum, float eps) { /* Welford per column */ }

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor s,
                            torch::Tensor g, torch::Tensor beta, torch::Tensor rm, torch::Tensor rv,
                            double momentum, double eps) {
  auto out = torch::empty({x.size(0), w.size(0)}, x.options());
  auto stream = at::cuda::getCurrentCUDAStream();
  gemm_scale_kernel<<<dim3(1), dim3(256), 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(),
      b.data_ptr<float>(), s.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), w.size(0));
  bn_train_kernel<<<dim3(1), dim3(256), 0, stream>>>(out.data_ptr<float>(), g.data_ptr<float>(),
      beta.data_ptr<float>(), rm.data_ptr<float>(), rv.data_ptr<float>(), x.size(0), w.size(0),
      (float)momentum, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""
cpp_source = "torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor s, " \
             "torch::Tensor g, torch::Tensor beta, torch::Tensor rm, torch::Tensor rv, double momentum, double eps);"

_ext = load_inline(name="gemm_scale_bn_fused", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["fused_forward"], extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        x = x.contiguous()
        momentum = self.bn.momentum if self.bn.momentum is not None else 0.0
        if self.training:
            self.bn.num_batches_tracked.add_(1)
        return _ext.fused_forward(x, self.gemm.weight, self.gemm.bias, self.scale, self.bn.weight,
                                  self.bn.bias, self.bn.running_mean, self.bn.running_var,
                                  momentum, self.bn.eps)
'''


def test_golden_style_candidate_is_clean() -> None:
    flags = static_flags(GOLDEN_STYLE)
    assert flags == [], [f.reason for f in flags]


GOLDEN = [str(p) for p in golden_files()]


@pytest.mark.parametrize("path", GOLDEN, ids=[Path(p).name for p in GOLDEN])
def test_golden_candidates_not_rejected(path: str) -> None:
    flags = static_flags(Path(path).read_text(encoding="utf-8"))
    rejected = [f.reason for f in flags if f.policy == FlagPolicy.reject]
    assert not rejected, f"{path}: {rejected}"


HACKS = sorted(glob.glob(str(ROOT / "tests" / "fixtures" / "hacks" / "cpu" / "*.py"))
               + glob.glob(str(ROOT / "tests" / "fixtures" / "hacks" / "cuda_device" / "*.py")))


def _declared_static(doc: str) -> set[str]:
    """`STATIC: name(policy), name(policy)` or `STATIC: none` in a fixture's docstring."""
    m = re.search(r"^STATIC:\s*(.+)$", doc, re.M)
    assert m, "hack fixture docstring lacks a STATIC: line"
    text = m.group(1).strip()
    return set() if text == "none" else {s.strip() for s in text.split(",")}


@pytest.mark.parametrize("path", HACKS, ids=[Path(p).name for p in HACKS])
def test_hack_fixtures_match_their_docstring(path: str) -> None:
    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    assert "EXPECT:" in doc
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    got = {f"{f.name}({f.policy.value})" for f in static_flags(source)}
    assert got == _declared_static(doc)


def test_a_string_python_would_fail_to_spell_is_not_read_and_raises_nothing() -> None:
    """Found in review: `"{0[x]}".format("abc")` and `str()` of an int past Python's digit limit raised out of the
    fold, and the candidate was rejected for it; Python would raise there too, so nothing is spelled."""
    big = "0x" + "f" * 5000
    src = (f'import torch\na = "{{0[x]}}".format("abc")\nb = str({big})\nc = f"{{{big}}}"\n'
           'd = "py::ex" + "ec("\n')
    assert [f.name for f in static_flags(src)] == ["python_from_cpp"]  # and the rest still read
