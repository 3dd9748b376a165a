import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.models.loading import BUNDLED_LABEL, CATALOG, ModelError, catalog_choices, resolve_model


def test_catalog_leads_with_the_bundled_model():
    assert CATALOG[0].offline and catalog_choices()[0][0] == BUNDLED_LABEL
    ids = [e.id for e in CATALOG]
    for hub_id in ("HuggingFaceTB/SmolLM-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
                   "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"):
        assert hub_id in ids


@pytest.mark.parametrize("model_id,fragment", [
    ("", "No model chosen"),
    ("{data}/no/such/folder", "No model folder"),
    ("/no/such/folder", "outside the folders this app reads models from"),
    ("not a model!!", "is not a hub id"),
])
def test_bad_model_choices_explain_themselves(model_id, fragment):
    from pipeline.run_folder.paths import data_dir

    with pytest.raises(ModelError) as err:
        resolve_model(model_id.format(data=data_dir()))
    assert fragment in str(err.value) and BUNDLED_LABEL in str(err.value) or model_id == ""


def test_folder_without_config():
    from pipeline.run_folder.paths import data_dir

    folder = data_dir() / "models" / "not-a-model"
    folder.mkdir(parents=True, exist_ok=True)
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(folder))


def test_unreachable_hub_id_fails_in_seconds_and_names_offline_default(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")  # nothing listens there: refused at once
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-cache")
    start = time.time()
    with pytest.raises(ModelError) as err:
        resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert time.time() - start < 10
    assert "Can't reach the Hugging Face Hub" in str(err.value) and BUNDLED_LABEL in str(err.value)


# Refused on every host, whatever its memory or overcommit policy: the child caps its own address space
# (RLIMIT_AS) at what it has mapped plus 256 MiB, then asks for 8 GiB.
REFUSED_ALLOCATION = """
import json, resource
import psutil, torch
from pipeline.training.generate import generation_error_message
from pipeline.models.loading import is_out_of_memory

resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + 2**28, resource.RLIM_INFINITY))
try:
    torch.empty(2**33, dtype=torch.uint8)
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "oom": is_out_of_memory(exc),
                      "message": generation_error_message(exc)}))
else:
    print(json.dumps({"error": None}))
"""


def test_a_real_failed_allocation_reads_as_out_of_memory():
    from pipeline.training.generate import ChatModelError, generation_error_message

    root = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", REFUSED_ALLOCATION], cwd=root, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["error"] and "can't allocate memory" in result["error"], result  # torch's own refusal
    assert result["oom"], result
    assert result["message"] == ("⚠️ Out of memory while loading the model or generating. Lower max new tokens, "
                                 "pick a smaller model, or close the other chat; the app keeps running."), result
    assert generation_error_message(ValueError("x")) == "⚠️ Generation failed: ValueError: x"
    # A model too big to load comes wrapped in the loader's error; it still reads as out of memory.
    too_big = ChatModelError("Could not load 'big/model': Cannot allocate memory (os error 12)")
    assert generation_error_message(too_big) == result["message"]
    assert generation_error_message(ChatModelError("There is no run named 'x'.")) == "⚠️ There is no run named 'x'."


def test_two_processes_needing_the_bundled_model_convert_it_once(tmp_path, monkeypatch):
    """The app's start-up conversion and a Start right after it: the second waits and uses the first's copy."""
    import threading
    import time

    from pipeline.models import loading as models

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    calls = []

    def slow_convert(target):
        calls.append(target)
        time.sleep(0.5)
        target.mkdir(parents=True)
        (target / ".complete").write_text("test")
        return target

    monkeypatch.setattr(models, "_convert_bundled", slow_convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(models.ensure_bundled_model())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results == [models.bundled_cache_dir()] * 2


def test_start_refuses_a_hub_model_or_dataset_it_cannot_fetch_and_makes_no_run(monkeypatch):
    """Offline, Start says why at once and keeps the form as it is, instead of making a run that fails."""
    from dataclasses import replace

    from pipeline.run_folder import runs
    from pipeline.setup.config import BUNDLED_MODEL_ID, RunConfig
    from pipeline.setup.presets import apply_preset
    from ui.form import config_to_form
    from ui.train_form import start_training

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-cache")
    before = set(runs.iter_run_dirs())
    gsm8k = apply_preset(RunConfig(), "GSM8K on GPU: Qwen2.5-0.5B-Instruct")  # a hub model and a hub dataset
    _, message = start_training(False, 1, **config_to_form(gsm8k))
    assert message.startswith("❌ Can't reach the Hugging Face Hub to fetch model 'Qwen/Qwen2.5-0.5B-Instruct' "
                              "(offline mode is set (HF_HUB_OFFLINE)). Pick the offline default"), message
    _, message = start_training(False, 1, **config_to_form(replace(gsm8k, model=BUNDLED_MODEL_ID)))
    assert message.startswith("❌ Can't reach the Hugging Face Hub to fetch dataset 'openai/gsm8k'"), message
    assert set(runs.iter_run_dirs()) == before  # no run folder was made
