"""Score completions with rewards in a child process. The web server uses this whenever custom reward
code is involved (pre-flight check, reward test bench), so that code never runs in the server itself, and
the child gets only the environment custom code may see (no tokens or credentials: rewards/custom.py).

    echo '{"rewards": [...], "completions": ["..."], "kwargs": {}}' | python -m pipeline.setup.reward_check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict

ROOT_MODULE = "pipeline.setup.reward_check"


def needs_isolation(specs) -> bool:
    from pipeline.rewards import reward_registry

    return any(spec.name in reward_registry.names() and reward_registry.get(spec.name).custom_code for spec in specs)


def score_isolated(specs, completions: list, allow_custom: bool = False, timeout_s: float = 60.0,
                   **kwargs) -> dict:
    """Like pipeline.rewards.score with policy 'fail', run in a fresh Python process."""
    from pathlib import Path

    from pipeline.rewards.custom import custom_code_env

    payload = json.dumps({"rewards": [asdict(s) for s in specs], "completions": completions, "kwargs": kwargs,
                          "timeout_s": timeout_s})
    cmd = [sys.executable, "-m", ROOT_MODULE] + (["--allow-custom-rewards"] if allow_custom else [])
    try:
        done = subprocess.run(cmd, input=payload, capture_output=True, text=True, timeout=timeout_s + 30,
                              cwd=Path(__file__).resolve().parents[2], env=custom_code_env())
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Scoring did not finish within {timeout_s + 30:g} s.") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"The scoring process failed: {done.stderr.strip()[-500:] or 'no output'}")
    result = json.loads(lines[-1])
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--allow-custom-rewards", action="store_true")
    args = parser.parse_args(argv)
    from pipeline.setup.config import RewardSpec
    from pipeline.rewards import build_rewards, score

    request = json.loads(sys.stdin.read())
    try:
        specs = [RewardSpec(**r) for r in request["rewards"]]
        funcs, weights = build_rewards(specs, policy="fail", allow_custom=args.allow_custom_rewards,
                                       timeout_s=request.get("timeout_s"))
        result = score(funcs, weights, request["completions"], **request.get("kwargs", {}))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a message
        result = {"error": str(exc)}
    print(json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import os

    code = main()
    os._exit(code)  # a hung reward thread must not keep the process alive
