"""The contract between a referee (evaluator.referee.forking) and the zygote it forks executors from
(evaluator.executor.zygote): what the zygote imports, what it runs, how large a request may be."""

# What every executor imports (evaluator.executor.__main__, evaluator.executor.serve, and what they import when a
# candidate is imported or compiled): the zygote imports them once; the referee imports them first, so that their
# bytecode is cached (evaluator.referee.environment.bytecode_cache).
EXECUTOR_MODULES = ("evaluator.executor.serve", "evaluator.executor.__main__", "torch._dynamo",
                    "torch.utils.cpp_extension", "torch.profiler")
ZYGOTE_MODULE = "evaluator.executor.zygote"
EXECUTOR_ARGV = ("-m", "evaluator.executor")  # what a request's command line runs (after the interpreter)
MAX_REQUEST = 4 << 20   # a request is its environment and command line: kilobytes
MAX_FDS = 16
