import math

import pytest

from pipeline.setup.config import RewardSpec
from pipeline.rewards import (
    GuardedReward, RewardFunctionError, build_rewards, reward_registry, score,
)

MSG = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731 - TRL's conversational shape

ODD_INPUTS = ["", "   ", None, 42, MSG(""), MSG("<answer>"), [], "<think><think></answer>", "x" * 5000]


@pytest.mark.parametrize("name", [n for n in reward_registry.names() if n != "custom_python"])
def test_every_reward_scores_malformed_completions_low_without_raising(name):
    fn = reward_registry.build(RewardSpec(name))
    post = "The town council voted to add protected bike lanes on Harper Street."
    kwargs = {"answer": ["7"] * len(ODD_INPUTS), "source": [post] * len(ODD_INPUTS)}
    values = fn(ODD_INPUTS, **kwargs)
    assert len(values) == len(ODD_INPUTS)
    assert all(isinstance(v, float) and math.isfinite(v) for v in values)
    good = {"length_target": "x" * 50, "token_diversity": "a b c", "strict_format": "<think>t</think><answer>7</answer>",
            "incremental_format": "<think>t</think><answer>7</answer>", "exact_answer": "<answer>7</answer>",
            "numeric_tolerance": "so 7", "keyword_presence": "TL;DR: yes",
            "post_similarity": "The council approved bike lanes on Harper Street.", "movie_title": "It is 7 [1].",
            "film_citation": "It is 7 [1].", "film_details": "It is 7 [1]."}[name]
    films = [[{"role": "user", "content": "[1] 7 (1999, Drama, dir. X): a plot"}]]  # a prompt listing one film
    best = fn([good], answer=["7"], source=[post], prompts=films)[0]
    assert best >= max(values), f"{name}: a malformed completion outscored a good one"


def test_length_target_matches_seed_formula_in_chat_format():
    fn = reward_registry.build(RewardSpec("length_target", params={"target": 50}))
    text = "y" * 80
    assert fn([MSG(text)]) == [-30.0]


def test_token_diversity_seed_scale():
    fn = reward_registry.build(RewardSpec("token_diversity"))
    assert fn([MSG("the cat the cat")]) == [50.0]


def test_numeric_tolerance_uses_answer_column_and_tolerance():
    fn = reward_registry.build(RewardSpec("numeric_tolerance", params={"atol": 0.5}))
    assert fn(["<answer>1,000.2</answer>", "1001", "<answer>x</answer>"], answer=["1000", "1000", "1000"]) == [1.0, 0.0, 0.0]


def test_exact_answer_without_answer_column_is_a_named_error():
    fn = GuardedReward(reward_registry.build(RewardSpec("exact_answer")), policy="fail")
    with pytest.raises(RewardFunctionError, match="exact_answer.*answer"):
        fn(["<answer>1</answer>"])


def test_keyword_presence_bad_regex_is_a_config_problem():
    problems = reward_registry.problems(RewardSpec("keyword_presence", params={"pattern": "(unclosed"}))
    assert problems and "keyword_presence" in problems[0]


def test_unknown_reward_lists_valid_names():
    with pytest.raises(KeyError, match="length_target"):
        reward_registry.get("lenght")
    assert "Valid rewards" in reward_registry.problems(RewardSpec("nope"))[0]


def test_unknown_param_is_reported():
    problems = reward_registry.problems(RewardSpec("length_target", params={"targt": 3}))
    assert "targt" in problems[0]


def test_custom_code_needs_explicit_opt_in():
    spec = RewardSpec("custom_python", params={"code": "def reward(completions, **kw):\n    return [1.0]*len(completions)"})
    assert "--allow-custom-rewards" in reward_registry.problems(spec)[0]
    with pytest.raises(PermissionError):
        reward_registry.build(spec)
    fn = reward_registry.build(spec, allow_custom=True)
    assert fn(["a", "b"]) == [1.0, 1.0]


def _raiser(completions, **kwargs):
    return [1.0 / (len(c) - 3) for c in completions]  # ZeroDivisionError on 3-char completions


_raiser.__name__ = "fragile"


def test_guard_fail_names_reward_and_offending_sample():
    guard = GuardedReward(_raiser, policy="fail")
    with pytest.raises(RewardFunctionError) as err:
        guard(["hello", "abc", "longer"])
    text = str(err.value)
    assert "fragile" in text and "ZeroDivisionError" in text and "#1" in text and '"abc"' in text


def test_guard_skip_keeps_good_scores_and_warns():
    warnings = []
    guard = GuardedReward(_raiser, policy="skip", on_warning=warnings.append)
    assert guard(["hello", "abc"]) == [0.5, None]
    assert warnings and "fragile" in warnings[0]


@pytest.mark.parametrize("bad", [[float("nan"), 1.0], [float("inf"), 1.0], ["x", 1.0]])
def test_guard_rejects_non_finite_values(bad):
    fn = lambda completions, **kw: bad  # noqa: E731
    fn.__name__ = "junk"
    with pytest.raises(RewardFunctionError, match="junk.*non-finite"):
        GuardedReward(fn, policy="fail")(["a", "b"])
    assert GuardedReward(fn, policy="skip")(["a", "b"]) == [None, 1.0]


def test_guard_rejects_wrong_count():
    fn = lambda completions, **kw: [1.0]  # noqa: E731
    fn.__name__ = "short"
    with pytest.raises(RewardFunctionError, match="returned 1 values for 3 completions: return one number per completion$"):
        GuardedReward(fn)(["a", "b", "c"])


def test_guard_says_what_a_reward_returned_that_is_not_a_list():
    fn = lambda completions, **kw: None  # noqa: E731
    fn.__name__ = "forgot_return"
    with pytest.raises(RewardFunctionError, match="forgot_return' returned NoneType, not a list of numbers"):
        GuardedReward(fn)(["a", "b"])
    assert GuardedReward(fn, policy="skip")(["a", "b"]) == [None, None]


def test_a_missing_column_names_the_keyword_arguments_the_reward_gets():
    def needs_answer(completions, **kw):
        return [float(a) for a in kw["answer"]]

    with pytest.raises(RewardFunctionError, match=r"raised KeyError: 'answer'.*it gets: prompts, source\)$"):
        GuardedReward(needs_answer)(["a", "b"], prompts=["p", "p"], source=["s", "s"])


def test_build_rewards_unique_names_and_weights():
    funcs, weights = build_rewards([RewardSpec("length_target", 0.5), RewardSpec("length_target", 2.0,
                                                                                  {"target": 10})])
    assert [f.__name__ for f in funcs] == ["length_target", "length_target_2"]
    assert weights == [0.5, 2.0]


def test_score_weighted_total_skips_missing():
    a = lambda completions, **kw: [1.0, None]  # noqa: E731
    a.__name__ = "a"
    b = lambda completions, **kw: [2.0, 4.0]  # noqa: E731
    b.__name__ = "b"
    out = score([a, b], [3.0, 0.5], ["x", "y"])
    assert out["total"] == [4.0, 2.0]


def test_every_registered_reward_declares_its_best_score():
    from pipeline.rewards import reward_maximum, reward_registry

    for name in reward_registry.names():
        spec = RewardSpec(name, 1.0, {"pattern": "x"} if name == "keyword_presence" else {})
        fn = reward_registry.build(spec, allow_custom=True)
        assert hasattr(fn, "max_value"), name
    funcs, weights = build_rewards([RewardSpec("length_target"), RewardSpec("token_diversity", 2.0, {"scale": 10}),
                                    RewardSpec("post_similarity", 0.5)])
    assert reward_maximum(funcs, weights) == 0 + 2 * 10 + 0.5 * 100
    # a negative weight makes the best total depend on the reward's minimum, which nobody declares
    assert reward_maximum(funcs, [1.0, -1.0, 1.0]) is None


def test_post_similarity_needs_the_summarised_text():
    from pipeline.setup.config import DatasetSpec, RunConfig

    with pytest.raises(RewardFunctionError, match="source"):
        build_rewards([RewardSpec("post_similarity")])[0][0](["a summary"])
    cfg = RunConfig(dataset=DatasetSpec(source="arithmetic"), rewards=[RewardSpec("post_similarity")])
    assert any("post_similarity" in p and "TL;DR" in p for p in cfg.problems())


def test_parameter_defaults_come_from_the_reward_class():
    """The registry keeps no copy of a default: describe() and build() read the class's `__init__`."""
    import inspect

    from pipeline.rewards.registry import Param, RewardDef

    for d in reward_registry.describe():
        factory = reward_registry.get(d["name"]).factory
        signature = inspect.signature(factory).parameters
        assert {k: p["default"] for k, p in d["params"].items()} == {k: signature[k].default for k in d["params"]}

    class Scaled:
        def __init__(self, scale: float = 7.5, name: str = "scaled"):
            self.scale, self.__name__ = scale, name

    assert RewardDef("scaled", Scaled, "test", {"scale": Param(float, "Multiplier.")}).params["scale"].default == 7.5
    assert reward_registry.build(RewardSpec("length_target")).target == 50  # LengthTarget's own default

    class NoDefault:
        def __init__(self, scale: float, name: str = "x"):
            pass

    with pytest.raises(TypeError, match="must take a parameter 'scale' with a default value"):
        RewardDef("bad", NoDefault, "test", {"scale": Param(float, "Multiplier.")})


def test_the_reward_bench_scores_its_own_example_with_the_default_rewards():
    """What a new user gets from Score the group without changing anything: the default run's rewards, whose
    post_similarity compares each completion with the prompt box's text (a TL;DR row's post)."""
    from ui.form import reward_rows
    from ui.reward_bench import EXAMPLE_CANDIDATES, EXAMPLE_PROMPT, score_candidates

    table, summary = score_candidates(reward_rows(), EXAMPLE_PROMPT, EXAMPLE_CANDIDATES, "", "", True)
    assert table is not None and not summary.startswith("❌"), summary
    assert {"length_target", "token_diversity", "post_similarity"} <= set(table.columns)
    on_topic = table["post_similarity"].iloc[1]  # "TL;DR: barking dog, two polite talks failed; ask the landlord"
    assert on_topic > table["post_similarity"].iloc[2]  # "dog dog dog dog dog dog"


def test_custom_code_errors_read_as_what_to_fix():
    from pipeline.rewards.custom import CustomPython

    with pytest.raises(ValueError, match="syntax error on line 1: expected ':'"):
        CustomPython("def reward(completions, **kw)\n    return [0.0]\n")
    forgot = GuardedReward(CustomPython("def reward(completions, **kw):\n    print(completions)\n"))
    with pytest.raises(RewardFunctionError, match=r"returned NoneType, not a list of numbers \(one per completion\)"):
        forgot(["a", "b"])
    assert GuardedReward(CustomPython("def reward(completions, **kw):\n    return (1.0 for _ in completions)\n"))(
        ["a", "b"]) == [1.0, 1.0]
