"""`make setup-gpu` refuses a machine that can't run the CUDA 13 set before it installs anything, and checks
torch after (bench/check_gpu_setup.sh), on simulated machines: no driver, an old driver, an old card, a CPU torch."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "check_gpu_setup.sh"
BASH = shutil.which("bash")


def run(args, path: Path, **env):
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(path), **env})


def fake_smi(tmp_path: Path, line: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!{BASH}\necho '{line}'\n")
    smi.chmod(0o755)
    return bin_dir


def test_no_driver_is_refused_before_anything_is_installed(tmp_path):
    done = run(["driver"], tmp_path)  # a PATH with no nvidia-smi on it
    assert done.returncode == 1
    assert "no NVIDIA driver found" in done.stderr and "Nothing was installed" in done.stderr


@pytest.mark.parametrize("line,reason", [
    ("535.104.05, 8.6, NVIDIA A10G", "NVIDIA driver 535.104.05 is older than 580"),
    ("580.159.04, 7.0, Tesla V100-SXM2-16GB", "compute capability 7.0"),
])
def test_an_old_driver_or_card_is_refused_with_the_reason(tmp_path, line, reason):
    done = run(["driver"], fake_smi(tmp_path, line))
    assert done.returncode == 1 and reason in done.stderr, done.stderr


def test_a_driver_and_card_that_fit_pass(tmp_path):
    done = run(["driver"], fake_smi(tmp_path, "580.159.04, 9.0, NVIDIA H100 80GB HBM3"))
    assert done.returncode == 0, done.stderr
    assert "580.159.04" in done.stdout and "H100" in done.stdout


def fake_torch(tmp_path: Path, cuda: str | None, available: bool) -> Path:
    pkg = tmp_path / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"__version__ = '2.13.0{'' if cuda else '+cpu'}'\n"
        f"class version:\n    cuda = {cuda!r}\n"
        f"class cuda:\n    is_available = staticmethod(lambda: {available})\n")
    return pkg.parent


def test_a_cpu_torch_after_install_is_refused(tmp_path):
    site = fake_torch(tmp_path, None, False)
    done = run(["torch", sys.executable], tmp_path, PYTHONPATH=str(site))
    assert done.returncode == 1 and "torch 2.13.0+cpu is a CPU build" in done.stderr, done.stderr


def test_a_cuda_torch_that_sees_no_gpu_is_refused(tmp_path):
    site = fake_torch(tmp_path, "13.0", False)
    done = run(["torch", sys.executable], tmp_path, PYTHONPATH=str(site))
    assert done.returncode == 1 and "built for CUDA 13.0 but sees no GPU" in done.stderr, done.stderr


def test_make_setup_gpu_checks_the_driver_first_and_torch_last():
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nsetup-gpu:\n", 1)[1].split("\n\n", 1)[0].strip().splitlines()
    assert recipe[0].strip() == "bash bench/check_gpu_setup.sh driver"
    lines = [line.strip() for line in recipe]
    torch_check = lines.index("bash bench/check_gpu_setup.sh torch $(PY)")
    assert all(i < torch_check for i, line in enumerate(lines) if "pip install" in line)  # after every install
    assert lines[-1] == "touch $(STAMP)"
