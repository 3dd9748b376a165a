import dataclasses
import json

import pytest

from pipeline.setup.config import ConfigError, DatasetSpec, RewardSpec, RunConfig
from pipeline.setup.presets import PRESETS, apply_preset
from ui.form import form_fields


def shown_help(name: str) -> str:
    """A setting's help as the Train form shows it (under the field)."""
    return {f.name: f.metadata["help"] for f in form_fields()}[name]


def test_defaults_are_valid_and_keep_kl_on():
    cfg = RunConfig().validate()
    assert cfg.beta == 0.04 and cfg.num_generations == 4 and cfg.batch_size % cfg.num_generations == 0
    assert [r.name for r in cfg.rewards] == ["length_target", "token_diversity", "post_similarity"]
    # the length + diversity pair stays one click away
    assert [r.name for r in apply_preset(cfg, "Length + diversity pair").rewards] == [
        "length_target", "token_diversity"]
    assert [r.name for r in apply_preset(cfg, "Quick CPU demo").rewards] == [r.name for r in cfg.rewards]


def test_json_round_trip():
    cfg = RunConfig(max_steps=7, rewards=[RewardSpec("length_target", 2.0, {"target": 30})],
                    dataset=DatasetSpec(source="arithmetic"))
    again = RunConfig.from_json(cfg.to_json())
    assert again == cfg


def test_batch_must_be_multiple_of_group():
    problems = RunConfig(num_generations=4, batch_size=6).problems()
    assert any("multiple of the group size" in p for p in problems)
    # The fix offered is the multiples of G on either side of the batch asked for.
    assert any(p.endswith("Use 8 or 12.") for p in RunConfig(num_generations=4, batch_size=10).problems())
    assert any(p.endswith("Use 4 or 8.") for p in RunConfig(num_generations=4, batch_size=3).problems())


def test_unknown_fields_are_named():
    with pytest.raises(ConfigError, match="lerning_rate"):
        RunConfig.from_dict({"lerning_rate": 1e-5})
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunConfig.from_json("{nope")


def test_validate_collects_every_problem():
    cfg = RunConfig(num_generations=1, temperature=0, loss_type="ppo", rewards=[])
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    text = str(err.value)
    for fragment in ("at least 2", "Temperature", "loss_type", "at least one reward"):
        assert fragment in text


def test_the_right_film_citation_needs_the_movie_questions_prompts():
    """Elsewhere no prompt says which numbered film is the answer, so the reward would be 0 for every completion."""
    right = RewardSpec("film_citation", 1.0, {"right_film": True})
    problems = RunConfig(rewards=[right]).problems()
    assert any("right_film" in p and "Movie questions" in p for p in problems), problems
    assert RunConfig(rewards=[RewardSpec("film_citation", 1.0, {})]).problems() == []  # any citation: fine anywhere
    assert RunConfig(dataset=DatasetSpec(source="movies"), rewards=[right]).problems() == []


def test_answer_rewards_need_answers():
    cfg = RunConfig(rewards=[RewardSpec("numeric_tolerance")])
    assert any("TL;DR has none" in p for p in cfg.problems())
    cfg = RunConfig(rewards=[RewardSpec("numeric_tolerance")], dataset=DatasetSpec(source="file", path="x.csv"))
    assert any("answer column" in p for p in cfg.problems())
    cfg = RunConfig(rewards=[RewardSpec("numeric_tolerance")], dataset=DatasetSpec(source="arithmetic"))
    assert cfg.problems() == []


def test_custom_reward_refused_without_flag():
    cfg = RunConfig(rewards=[RewardSpec("custom_python")])
    assert any("--allow-custom-rewards" in p for p in cfg.problems())
    assert cfg.problems(allow_custom_rewards=True) == []


def test_rewards_may_be_given_by_name():
    cfg = RunConfig.from_dict({"rewards": ["token_diversity", {"name": "length_target", "weight": 0.5}]})
    assert cfg.rewards[1].weight == 0.5


def test_presets_apply_and_stay_valid():
    for name in PRESETS:
        apply_preset(RunConfig(), name).validate()
    assert apply_preset(RunConfig(), "GPU standard").num_generations == 8
    with pytest.raises(ConfigError):
        apply_preset(RunConfig(), "nope")


def test_fields_carry_help_text():
    assert "KL" in shown_help("beta")
    assert json.loads(RunConfig().to_json())["dataset"]["source"] == "tldr"


def test_keep_checkpoints_defaults_to_three_and_explains_itself():
    assert RunConfig().keep_checkpoints == 3
    assert "pile up" in shown_help("keep_checkpoints")
    assert RunConfig(keep_checkpoints=0).problems() == []  # 0 keeps every checkpoint
    assert any("keep_checkpoints" in p for p in RunConfig(keep_checkpoints=-1).problems())
    assert RunConfig.from_dict({"keep_checkpoints": 2}).keep_checkpoints == 2


def test_gpu_and_grpo_options_are_checked_in_plain_words():
    from pipeline.setup.config import RunConfig

    assert RunConfig().problems() == []
    bad = RunConfig(scale_rewards="std", importance_sampling_level="seq", lr_scheduler="warmup", report_to="wandb",
                    num_iterations=0, epsilon_high=0.1, top_k=-1, vllm_gpu_memory_utilization=1.5,
                    load_in_4bit=True, precision="fp32").problems()
    text = " ".join(bad)
    for expected in ("scale_rewards must be one of: group, batch, none", "importance_sampling_level must be one of",
                     "lr_scheduler must be one of", "report_to must be one of: none, tensorboard, trackio",
                     "num_iterations must be at least 1", "epsilon_high must be at least epsilon (0.2)",
                     "top_k cannot be negative", "vllm_gpu_memory_utilization is a share",
                     "4-bit QLoRA trains in bf16"):
        assert expected in text, expected


def test_configs_written_with_a_boolean_scale_rewards_still_load():
    from pipeline.setup.config import RunConfig

    assert RunConfig.from_dict({"scale_rewards": True}).scale_rewards == "group"
    assert RunConfig.from_dict({"scale_rewards": False}).scale_rewards == "none"


def test_a_field_range_in_metadata_is_checked_like_choices():
    """min/max live in the field's metadata: problems() refuses a value outside with a message naming the field
    and the range, and the form's number box gets the same inclusive bounds."""
    import dataclasses

    from pipeline.setup.fields import _form
    from ui.form import number_bounds

    @dataclasses.dataclass
    class Sized(RunConfig):
        chunk: int = dataclasses.field(default=4, metadata=_form("Chunk", "Rows per chunk.", minimum=1, maximum=64))
        share: float = dataclasses.field(default=0.5, metadata=_form("Share", "A share.", above=0, below=1))

    assert Sized().problems() == []
    assert Sized(chunk=65).problems() == ["chunk must be between 1 and 64 (got 65)."]
    assert Sized(chunk=0).problems() == ["chunk must be between 1 and 64 (got 0)."]
    assert Sized(share=1.0).problems() == ["share must be in (0, 1) (got 1.0)."]
    assert Sized(chunk="many").problems() == ["chunk must be a number (got 'many')."]
    assert number_bounds(next(f for f in dataclasses.fields(Sized) if f.name == "chunk")) == {"minimum": 1,
                                                                                               "maximum": 64}
    with pytest.raises(TypeError, match="_form\\(\\) takes no maximun"):
        _form("Chunk", "Rows per chunk.", maximun=64)


def test_the_train_forms_number_boxes_take_the_fields_bounds():
    import gradio as gr

    from ui import train_form

    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    with gr.Blocks():
        box = train_form.hyper_component(fields["top_p"], 1.0)
        steps = train_form.hyper_component(fields["save_steps"], 10)
    assert (box.minimum, box.maximum) == (None, 1)
    assert (steps.minimum, steps.maximum) == (1, None)
    assert RunConfig(save_steps=0).problems() == ["save_steps must be at least 1 (got 0)."]


def test_the_film_details_reward_needs_prompts_that_list_films():
    details = RewardSpec("film_details", 0.5, {})
    problems = RunConfig(rewards=[RewardSpec("length_target", 1.0, {}), details]).problems()
    assert any("film_details" in p and "Movie questions" in p for p in problems), problems
    assert RunConfig(dataset=DatasetSpec(source="movies"), rewards=[details]).problems() == []
    both = RewardSpec("film_details", 0.5, {"right_film": True, "penalty": True})
    assert RunConfig(dataset=DatasetSpec(source="movies"), rewards=[both]).problems() == [
        "Reward 'film_details': right_film and penalty don't combine: a penalty scores only what an answer invents, "
        "whichever film it names."]
