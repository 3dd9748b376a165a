import dataclasses

import pytest

from pipeline.setup.config import BUNDLED_MODEL_ID, ConfigError, DatasetSpec, RewardSpec, RunConfig
from pipeline.setup.presets import PRESETS, apply_preset
from ui.form import config_to_form, form_fields, form_keys, form_to_config, reward_rows, rewards_from_rows


def _form(**over):
    """The form's values for the default config, keyed by name, with some changed."""
    values = config_to_form(RunConfig())
    values.update(over)
    return form_to_config(values)


def _without_params(cfg: RunConfig) -> RunConfig:
    # The form spells out every reward parameter's default; a config leaves some implicit.
    return dataclasses.replace(cfg, rewards=[RewardSpec(r.name, r.weight) for r in cfg.rewards])


def test_default_form_gives_default_config():
    cfg = _form()
    assert _without_params(cfg) == _without_params(RunConfig())
    assert cfg.rewards[1].params == {"scale": 100.0}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_round_trip_from_the_dataclass(preset):
    """config -> form values -> config gives the same config, for every preset and a changed file-source one."""
    cfg = apply_preset(RunConfig(), preset)
    assert _without_params(form_to_config(config_to_form(cfg))) == _without_params(cfg)
    changed = dataclasses.replace(
        cfg, model="Qwen/Qwen2.5-0.5B-Instruct", seed=7, loss_type="grpo", use_vllm=True, min_p=0.05,
        dataset=DatasetSpec(source="file", path="/data/x.csv", prompt_column="q", answer_column="a",
                            system_prompt="Be brief."))
    assert _without_params(form_to_config(config_to_form(changed))) == _without_params(changed)


def test_form_shows_the_fields_marked_in_their_metadata_in_dataclass_order():
    marked = [f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("form")]
    shown = [f.name for f in form_fields()]
    assert shown == marked and marked[:3] == ["num_generations", "batch_size", "max_steps"]
    assert "gradient_accumulation_steps" not in shown and "merge_at_end" not in shown
    for spec in form_fields():  # each shown field carries its label and help; dropdowns their choices
        assert spec.metadata["label"] and spec.metadata["help"], spec.name
    meta = {f.name: f.metadata for f in form_fields()}
    assert meta["max_steps"]["label"] == "Steps" and "choices" not in meta["max_steps"]
    assert meta["loss_type"]["choices"][0] == "dapo" and meta["precision"]["label"] == "Precision"
    keys = form_keys()
    assert len(keys) == len(set(keys))  # dataset, model and setting names never collide
    assert list(config_to_form(RunConfig())) == keys


def test_a_new_field_needs_one_line_in_the_dataclass():
    """A field added to the config (here via make_dataclass) is in the form's keys, filled from a config, read
    back typed, and its choices are checked, with no other edit."""
    from pipeline.setup.fields import _form as shown

    Extended = dataclasses.make_dataclass("Extended", [
        ("top_a", float, dataclasses.field(default=0.0, metadata=shown("top-a", "A made-up sampling cut."))),
        ("style", str, dataclasses.field(default="plain", metadata=shown("Style", "Made up.", ("plain", "fancy")))),
    ], bases=(RunConfig,))
    assert form_keys(Extended)[-2:] == ["top_a", "style"]
    values = config_to_form(Extended())
    assert (values["top_a"], values["style"]) == (0.0, "plain")
    values.update(top_a="0.25", style="fancy", max_steps="3")
    cfg = form_to_config(values, Extended)
    assert (type(cfg), cfg.top_a, cfg.style, cfg.max_steps) == (Extended, 0.25, "fancy", 3)
    assert any("style must be one of: plain, fancy (got 'odd')" in p for p in Extended(style="odd").problems())


def test_form_and_config_disagreeing_is_a_plain_error():
    values = config_to_form(RunConfig())
    del values["max_steps"]
    with pytest.raises(ConfigError, match="no value for max_steps"):
        form_to_config(values)
    values = config_to_form(RunConfig())
    values["max_stepz"] = 3
    with pytest.raises(ConfigError, match="unknown max_stepz"):
        form_to_config(values)


def test_form_values_are_typed():
    cfg = _form(num_generations=8.0, batch_size="16", learning_rate="1e-4", gradient_checkpointing="false")
    assert cfg.num_generations == 8 and isinstance(cfg.num_generations, int)
    assert cfg.batch_size == 16 and cfg.learning_rate == 1e-4 and cfg.gradient_checkpointing is False
    assert _form(max_steps=None).max_steps == RunConfig().max_steps  # an emptied field means its default
    with pytest.raises(ConfigError, match="num_generations"):
        _form(num_generations=2.5)
    with pytest.raises(ConfigError, match="learning_rate"):
        _form(learning_rate="fast")


def test_custom_model_overrides_dropdown():
    assert _form(model_custom="  Qwen/Qwen2.5-0.5B-Instruct ").model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert _form(model=None).model == BUNDLED_MODEL_ID


def test_a_model_outside_the_catalog_goes_in_the_text_box_and_comes_back():
    """The dropdown accepts its own choices only, so a local folder or an unlisted hub id is shown (and sent by the
    API) in the text box beside it."""
    from pipeline.models.loading import CATALOG

    for model in ("/data/models/my-model", "someone/unlisted-model"):
        values = config_to_form(RunConfig(model=model))
        assert (values["model"], values["model_custom"]) == (BUNDLED_MODEL_ID, model)
        assert form_to_config(values).model == model
    listed = CATALOG[-1].id
    assert (config_to_form(RunConfig(model=listed))["model"], config_to_form(RunConfig(model=listed))["model_custom"]) \
        == (listed, "")


def test_file_source_keeps_columns_and_other_sources_drop_them():
    cfg = _form(source="Upload CSV/JSONL", path="/data/uploads/x.csv", prompt_column="q",
                answer_column="a", system_prompt="Be brief.")
    assert (cfg.dataset.source, cfg.dataset.path, cfg.dataset.prompt_column, cfg.dataset.answer_column) == \
        ("file", "/data/uploads/x.csv", "q", "a")
    cfg = _form(source="Arithmetic (bundled)", path="/x.csv", prompt_column="q")
    assert cfg.dataset.path == "" and cfg.dataset.prompt_column == "prompt"


def test_rewards_table_as_the_ui_and_the_api_send_it():
    import pandas as pd

    rows = reward_rows()
    frame = pd.DataFrame(rows, columns=["use", "reward", "weight", "params (JSON)"])
    for table in (rows, frame, {"headers": list(frame.columns), "data": rows}):
        assert [r.name for r in _form(rewards=table).rewards] == [s.name for s in RunConfig().rewards]


def test_reward_rows_round_trip_with_weights_and_params():
    rows = reward_rows()
    assert [r[1] for r in rows if r[0]] == [s.name for s in RunConfig().rewards]
    assert all(r[1] != "custom_python" for r in rows)
    assert any(r[1] == "custom_python" for r in reward_rows(allow_custom=True))
    for row in rows:
        if row[1] == "length_target":
            row[2], row[3] = 0.5, '{"target": 30, "unit": "words"}'
    specs = rewards_from_rows(rows)
    assert specs[0].name == "length_target" and specs[0].weight == 0.5 and specs[0].params["target"] == 30


def test_bad_reward_params_are_plain_errors():
    with pytest.raises(ConfigError, match="not valid JSON"):
        rewards_from_rows([[True, "length_target", 1.0, "{target: 3}"]])
    with pytest.raises(ConfigError, match="weight must be a number"):
        rewards_from_rows([[True, "length_target", "heavy", ""]])


def test_unticked_rows_are_ignored_and_strings_from_the_browser_count():
    specs = rewards_from_rows([["false", "length_target", 1, ""], ["true", "token_diversity", 1, ""]])
    assert [s.name for s in specs] == ["token_diversity"]


def test_a_ticked_reward_at_weight_0_is_a_monitor_the_config_accepts():
    """Weight 0 in the table (a number or the string the browser may send) keeps the reward, as a monitor."""
    specs = rewards_from_rows([[True, "numeric_tolerance", 1, ""], [True, "strict_format", "0", ""]])
    assert [(s.name, s.weight) for s in specs] == [("numeric_tolerance", 1.0), ("strict_format", 0.0)]
    cfg = RunConfig(rewards=specs, dataset=DatasetSpec(source="arithmetic"))
    assert cfg.problems() == []
    only_monitors = RunConfig(rewards=[RewardSpec("strict_format", 0.0)], dataset=DatasetSpec(source="arithmetic"))
    assert any("Every reward has weight 0" in p for p in only_monitors.problems())


def test_a_preset_fills_model_and_prompts_too():
    """The task presets carry their data; picking the Quick CPU demo after one puts TL;DR back."""
    arithmetic = config_to_form(apply_preset(RunConfig(), "Arithmetic: correctness + format"))
    assert arithmetic["source"] == "Arithmetic (bundled)"
    gsm8k = form_to_config(config_to_form(apply_preset(RunConfig(), "GSM8K on GPU: Qwen2.5-0.5B-Instruct")))
    assert (gsm8k.model, gsm8k.dataset.hub_id, gsm8k.dataset.hub_config, gsm8k.dataset.answer_column) == \
        ("Qwen/Qwen2.5-0.5B-Instruct", "openai/gsm8k", "main", "answer")
    back = apply_preset(apply_preset(RunConfig(), "Arithmetic: correctness + format"), "Quick CPU demo")
    assert back.dataset == RunConfig().dataset and back.rewards == RunConfig().rewards


def test_a_preset_keeps_a_next_stages_model(tmp_path, monkeypatch):
    """After *Train a next stage from it*, the model box holds a run's model: a preset picked then sets what the
    stage teaches and keeps that model; any other typed model is the preset's to replace."""
    from pipeline.run_folder import runs
    from ui.train_form import fill_preset

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))
    stage_model = str(runs.runs_dir() / "20261129-034631-smollm2-tldr" / "merged")
    values = fill_preset("Arithmetic: correctness + format", model_custom=stage_model)
    assert values["model_custom"] == stage_model and values["source"] == "Arithmetic (bundled)"
    assert fill_preset("Arithmetic: correctness + format", model_custom="org/other")["model_custom"] == ""
    assert fill_preset("Quick CPU demo")["model_custom"] == ""


def test_the_upload_choice_reads_as_the_files_it_takes_and_keeps_its_api_value():
    from ui.form import SOURCE_SHOWN, SOURCES

    assert SOURCES["Upload CSV/JSONL"] == "file"  # the value API callers send
    assert SOURCE_SHOWN["Upload CSV/JSONL"] == "Upload a file (CSV, TSV, JSONL, JSON)"
    assert set(SOURCE_SHOWN) <= set(SOURCES)
