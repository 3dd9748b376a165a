import pytest

from pipeline.config import BUNDLED_MODEL_ID, ConfigError, RunConfig
from ui.form import HYPER_FIELDS, config_to_form, form_to_config, reward_rows, rewards_from_rows


def _hyper(**over):
    values = config_to_form(RunConfig())
    values.update(over)
    return [values[f] for f in HYPER_FIELDS]


def _form(**kw):
    base = dict(model_choice=BUNDLED_MODEL_ID, model_custom="", source_label="TL;DR (bundled)", file_path="",
                prompt_column=None, answer_column=None, system_prompt="", hub_id="", hub_split="train",
                rewards_table=reward_rows())
    base.update(kw)
    hyper = base.pop("hyper", _hyper())
    return form_to_config(*base.values(), *hyper)


def test_default_form_gives_default_config():
    import dataclasses

    cfg = _form()
    assert dataclasses.replace(cfg, rewards=[]) == dataclasses.replace(RunConfig(), rewards=[])
    # The form spells out every parameter's default; the config's defaults leave some implicit.
    assert [(r.name, r.weight) for r in cfg.rewards] == [(r.name, r.weight) for r in RunConfig().rewards]
    assert cfg.rewards[1].params == {"scale": 100.0}


def test_form_values_are_typed():
    cfg = _form(hyper=_hyper(num_generations=8.0, batch_size="16", learning_rate="1e-4", gradient_checkpointing="false"))
    assert cfg.num_generations == 8 and isinstance(cfg.num_generations, int)
    assert cfg.batch_size == 16 and cfg.learning_rate == 1e-4 and cfg.gradient_checkpointing is False
    with pytest.raises(ConfigError, match="num_generations"):
        _form(hyper=_hyper(num_generations=2.5))
    with pytest.raises(ConfigError, match="learning_rate"):
        _form(hyper=_hyper(learning_rate="fast"))


def test_custom_model_overrides_dropdown():
    assert _form(model_custom="  Qwen/Qwen2.5-0.5B-Instruct ").model == "Qwen/Qwen2.5-0.5B-Instruct"


def test_file_source_keeps_columns_and_other_sources_drop_them():
    cfg = _form(source_label="Upload CSV/JSONL", file_path="/data/uploads/x.csv", prompt_column="q",
                answer_column="a", system_prompt="Be brief.")
    assert (cfg.dataset.source, cfg.dataset.path, cfg.dataset.prompt_column, cfg.dataset.answer_column) == \
        ("file", "/data/uploads/x.csv", "q", "a")
    cfg = _form(source_label="Arithmetic (bundled)", file_path="/x.csv", prompt_column="q")
    assert cfg.dataset.path == "" and cfg.dataset.prompt_column == "prompt"


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
