import time

import pytest

from pipeline.models import BUNDLED_LABEL, CATALOG, ModelError, catalog_choices, resolve_model


def test_catalog_leads_with_the_bundled_model():
    assert CATALOG[0].offline and catalog_choices()[0][0] == BUNDLED_LABEL
    ids = [e.id for e in CATALOG]
    for hub_id in ("HuggingFaceTB/SmolLM-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
                   "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"):
        assert hub_id in ids


@pytest.mark.parametrize("model_id,fragment", [
    ("", "No model chosen"),
    ("/no/such/folder", "No model folder"),
    ("not a model!!", "not a catalog model"),
])
def test_bad_model_choices_explain_themselves(model_id, fragment):
    with pytest.raises(ModelError) as err:
        resolve_model(model_id)
    assert fragment in str(err.value) and BUNDLED_LABEL in str(err.value) or model_id == ""


def test_unreachable_hub_id_fails_in_seconds_and_names_offline_default(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")  # nothing listens there: refused at once
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-cache")
    start = time.time()
    with pytest.raises(ModelError) as err:
        resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert time.time() - start < 10
    assert "Can't reach the Hugging Face Hub" in str(err.value) and BUNDLED_LABEL in str(err.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path))


def test_a_real_failed_allocation_reads_as_out_of_memory():
    import torch

    from pipeline.generate import generation_error_message
    from pipeline.models import is_out_of_memory

    try:
        torch.empty(10**14, dtype=torch.uint8)  # 100 TB: the allocator refuses at once
    except RuntimeError as exc:
        error = exc
    else:  # pragma: no cover - a machine with 100 TB of memory
        pytest.skip("the allocation succeeded")
    assert is_out_of_memory(error)
    message = generation_error_message(error)
    assert message.startswith("⚠️ Out of memory") and "keeps running" in message
    assert generation_error_message(ValueError("x")) == "⚠️ Generation failed: ValueError: x"
