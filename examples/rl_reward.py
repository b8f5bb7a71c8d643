"""Rewards for a batch of model replies, as a reinforcement-learning loop's reward function computes them.

    python3 examples/rl_reward.py REPLY.md [REPLY.md ...] [--device cpu] [--size small]

Each reply is a model's whole answer (reasoning and all): its code is taken out as `harness run` takes it, judged by
a warm `harness.Judge`, and its reward printed (harness.core.reward: every status has one; a correct verdict earns
credit whether or not its timing is shaky, and more with the lower end of its speedup's 95% interval). A GRPO-style
trainer's reward function is `reward_function` below: a list of completions in, a list of floats out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing it

from harness import Judge  # noqa: E402


def reward_function(judge: Judge, completions: list[str]) -> list[float]:
    """What a trainer's `reward_funcs` entry returns: one float per completion, every status included."""
    return [judge.evaluate_reply(text).reward for text in completions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("replies", nargs="+", type=Path)
    parser.add_argument("--problem", default="gemm_scale_bn")
    parser.add_argument("--size", default=None)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    with Judge(problem=args.problem, size=args.size, device=args.device) as judge:
        for path in args.replies:
            verdict = judge.evaluate_reply(path.read_text(), name=path.name)
            interval = verdict.speedup_interval.get("eager")
            low = f"{interval[0]:.2f}-{interval[1]:.2f}x" if interval else "-"
            print(f"{path.name:28} {verdict.status.value:14} reward {verdict.reward:.3f}  eager {low:14} "
                  f"{verdict.why or ''}"[:160], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
