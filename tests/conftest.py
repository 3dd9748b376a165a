"""Shared fixtures: every test session gets its own data directory, so runs and the converted
bundled model never touch the developer's ./data."""

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# No spare workers (pipeline/spare_worker.py) in the tests: pytest names each test's phase in the environment, so a
# spare prepared in one phase never matches a run of the next, and its imports would take a core from the other
# worker. The tests of spares turn them on, and so does the browser tests' app (its environment stays fixed).
os.environ.setdefault("GRPO_STUDIO_SPARE_WORKER", "0")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers share the two cores: one thread each for torch here and in the trainers and apps they start
    # (they read OMP_NUM_THREADS), so neither worker's processes fight the other's for a core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# Test files that read the one finished run `shared_run` (tests/integration/conftest.py) trains: on one worker
# together, so it is trained once (about a minute) instead of once on each worker. tests/unit/test_suite_groups.py
# checks that this lists every file that asks for it.
SHARED_RUN_READERS = ("tests/integration/test_checkpoints.py", "tests/integration/test_gguf_export.py",
                      "tests/integration/test_probes.py", "tests/integration/test_report.py",
                      "tests/integration/test_train.py")


def worker_group(nodeid: str) -> str:
    """The group of tests that one worker runs whole: the browser tests, the shared run's readers, else a file."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/browser/"):
        return "tests/browser"
    return "shared_run" if path in SHARED_RUN_READERS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Test files are shared out between the workers whole, and the browser tests all go to one worker together, in
    file order: they share one app process and its data folder, and some read what an earlier one left (the newest
    run, a finished run's models). The two longest groups, the browser tests and the shared run's readers, are
    handed out first, one to each worker, and the files after them go to whichever worker is free, so that neither
    is left with a long group at the end. (pytest-xdist's own grouping by mark does not take under pytest 9.)"""
    from xdist.scheduler import LoadFileScheduling

    class Groups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

        def _assign_work_unit(self, node) -> None:
            for group in ("tests/browser", "shared_run"):  # the longest first
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
                    break
            super()._assign_work_unit(node)

    return Groups(config, log)


@pytest.fixture(scope="session", autouse=True)
def studio_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("studio-data")
    old = os.environ.get("GRPO_STUDIO_DATA")
    os.environ["GRPO_STUDIO_DATA"] = str(path)
    yield path
    if old is None:
        os.environ.pop("GRPO_STUDIO_DATA", None)
    else:
        os.environ["GRPO_STUDIO_DATA"] = old


@pytest.fixture(scope="session")
def bundled_model_dir(studio_data):
    """The bundled SmolLM2 converted once per session: linked from ./data when `make setup` converted it there
    (the conversion takes about 30 s on CPU), converted here otherwise."""
    from pipeline.models.loading import bundled_cache_dir, ensure_bundled_model
    from pipeline.run_folder.paths import data_dir

    made = ROOT / "data" / bundled_cache_dir().relative_to(data_dir())
    target = bundled_cache_dir()
    if (made / ".complete").exists() and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copytree(made, target, copy_function=os.link)
        except OSError:  # another file system: a copy is still faster than a conversion
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(made, target)
    return ensure_bundled_model()


@pytest.fixture(scope="session")
def tiny_model_dir(bundled_model_dir):
    """A two-layer model with random weights and the bundled model's tokenizer, in the session's data folder: for
    tests of what happens around training (checkpoints, stops, kills, faults, ranks), where the model's answers
    do not matter. A step takes a fraction of a second instead of seconds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    target = bundled_model_dir.parent / "tiny-random-llama"
    if (target / "model.safetensors").exists():
        return target
    config = AutoConfig.from_pretrained(bundled_model_dir)
    config.update(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (bundled_model_dir / name).exists():
            shutil.copy2(bundled_model_dir / name, target / name)
    return target


@pytest.fixture(scope="session")
def movie_table(studio_data):
    """The bundled films' movie table in the session's data folder, as `make setup` leaves it in ./data: copied from
    there when it holds exactly the bundled films with the bundled embedder and their sentence index (embedding
    them takes about 20 s on two cores), built here otherwise."""
    from retrieval import movies
    from retrieval.bundled_table import prepare
    from retrieval.chunks import PlotChunks
    from retrieval.store import BUNDLED_EMBEDDER, MovieStore

    target = studio_data / "lancedb"
    made = ROOT / "data" / "lancedb"
    if not target.exists() and made.is_dir():
        try:
            store = MovieStore(made)
            table, info = store.table(), store.info()
            ids = set(table.to_arrow().column("id").to_pylist()) if table is not None else set()
            fits = (info.embedder == BUNDLED_EMBEDDER and ids == {m.id for m in movies.load_bundled()}
                    and PlotChunks(store).table() is not None)
        except Exception:  # noqa: BLE001 - anything unreadable is simply not copied
            fits = False
        if fits:
            shutil.copytree(made, target)
    prepare(MovieStore(target))  # builds what is missing; a copied table is already whole
    return target
