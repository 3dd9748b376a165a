"""How the suite's two workers share the tests out (tests/conftest.py): every file that reads the shared finished run
is in the group that trains it once, and the browser tests stay together."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def suite_conftest():
    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_file_that_reads_the_shared_run_is_in_its_group():
    readers = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
               if re.search(r"def \w+\([^)]*\bshared_run\b", path.read_text())}
    assert readers and readers == set(suite_conftest().SHARED_RUN_READERS)


def test_groups():
    group = suite_conftest().worker_group
    assert group("tests/browser/test_train_ui.py::test_start") == group("tests/browser/test_rag_ui.py::t") == "tests/browser"
    assert group("tests/integration/test_probes.py::t") == group("tests/integration/test_train.py::t[x]") == "shared_run"
    assert group("tests/integration/test_faults.py::t") == "tests/integration/test_faults.py"
    assert group("pipeline/train.py::pipeline.train") == "pipeline/train.py"
