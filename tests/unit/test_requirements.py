"""The GPU requirements stay the CPU set plus vLLM and bitsandbytes, with transformers in vLLM's range."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            for op in ("==", ">="):
                if op in line:
                    pkg, version = line.split(op)
                    out[pkg.strip().lower()] = op + version.strip()
    return out


def test_gpu_requirements_are_the_cpu_set_plus_vllm_and_bitsandbytes():
    cpu, gpu = pins("requirements.txt"), pins("requirements-gpu.txt")
    assert set(gpu) == set(cpu) | {"vllm", "bitsandbytes"}
    assert {k: v for k, v in gpu.items() if k in cpu and k != "transformers"} == {
        k: v for k, v in cpu.items() if k != "transformers"}
    # vllm 0.31.0 (the newest TRL 1.16 accepts) wants transformers >=5.10.4,<5.18 and torch 2.13.0.
    assert gpu["vllm"] == "==0.31.0" and gpu["torch"] == "==2.13.0"
    major, minor, patch = (int(x) for x in gpu["transformers"][2:].split("."))
    assert (5, 10, 4) <= (major, minor, patch) < (5, 18, 0)
