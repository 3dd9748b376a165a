from pipeline.training.health import health_warnings
from ui import charts, views


def row(step, **kw):
    base = dict(step=step, reward=1.0, reward_std=0.5, frac_reward_zero_std=0.0, kl=0.01, clipped_ratio=0.0,
                entropy=2.0, loss=0.0, completion_length=20.0, rewards={"length_target": {"mean": -3.0}})
    base.update(kw)
    return base


def keys(rows):
    return [w.key for w in health_warnings(rows)]


def test_healthy_run_has_no_warnings():
    assert keys([row(i) for i in range(1, 6)]) == []


def test_no_signal_needs_a_few_steps():
    flat = [row(i, reward_std=0.0, frac_reward_zero_std=1.0) for i in range(1, 4)]
    assert keys(flat[:2]) == [] and keys(flat) == ["no_signal"]


def test_no_signal_from_reward_std_alone():
    """Rows where TRL logged no frac_reward_zero_std (the trainer writes None) or one below the threshold:
    a reward std of 0 over the last WINDOW steps still means every completion scored the same."""
    missing = [{k: v for k, v in row(i, reward_std=0.0).items() if k != "frac_reward_zero_std"} for i in range(1, 4)]
    for flat in (missing, [row(i, reward_std=0.0, frac_reward_zero_std=None) for i in range(1, 4)],
                 [row(i, reward_std=0.0, frac_reward_zero_std=0.0) for i in range(1, 4)]):
        warnings = health_warnings(flat)
        assert [w.key for w in warnings] == ["no_signal"], flat
        assert warnings[0].detail.startswith("In every group all G completions got the same reward"), warnings
    # One step with some spread among the last three is signal: no alarm.
    assert keys([row(1, reward_std=0.0, frac_reward_zero_std=None), row(2, reward_std=0.2, frac_reward_zero_std=None),
                 row(3, reward_std=0.0, frac_reward_zero_std=None)]) == []


def test_one_flat_step_does_not_alarm():
    rows = [row(1), row(2, frac_reward_zero_std=1.0), row(3)]
    assert "no_signal" not in keys(rows)


def test_kl_over_half():
    assert keys([row(1), row(2, kl=0.7)]) == ["kl_high"]


def test_clipped_completions():
    assert keys([row(i, clipped_ratio=0.9) for i in range(1, 4)]) == ["clipped"]


def test_a_length_target_above_the_completion_cap_is_a_warning_of_its_own():
    """length_target rewards answers near its target: with the target past the cap, every cut-off completion is
    short of it, so the reward pushes them longer. The run's config says so from the first steps."""
    from pipeline.setup.config import RewardSpec, RunConfig

    young = [row(i, clipped_ratio=0.9, reward_weights={"length_target": 1.0}) for i in (1, 2, 3)]
    fine = RunConfig().to_dict()  # 50 characters (about 12 tokens) under a 32-token cap
    far = RunConfig(rewards=[RewardSpec("length_target", 1.0, {"target": 500})]).to_dict()  # about 125 tokens
    assert health_warnings(young, config=fine)[0].level == "note"
    warning = health_warnings(young, config=far)[0]
    assert (warning.key, warning.level) == ("clipped", "warn") and "asks for longer ones" in warning.title
    assert "about 125 tokens, at or above max_completion_length (32)" in warning.detail
    assert "Raise max_completion_length above the target" in views.health_html(young, config=far)


def test_a_cap_that_only_cuts_what_the_rewards_do_not_read_is_a_note():
    """The Movie questions preset caps answers at 24 tokens: its rewards score the film an answer names first, so
    every completion reaching the cap hides nothing they score. Any trained reward that needs the whole answer (a
    format reward's closing tag, here) makes it the warning again; a monitor (weight 0) does not count."""
    movies = {"movie_title": 2.0, "film_citation": 0.5}
    rows = [row(i, clipped_ratio=1.0, reward_weights=movies, rewards={}) for i in range(1, 4)]
    (note,) = health_warnings(rows)
    assert (note.key, note.level) == ("clipped", "note"), note
    assert "movie_title, film_citation score what an answer says first" in note.detail, note
    assert "ℹ Completions run to the cap" in views.health_html(rows)
    again = [dict(r, reward_weights={"film_citation": 1.0, "film_citation_2": 0.5}) for r in rows]  # used twice
    assert health_warnings(again)[0].level == "note"
    with_monitor = [dict(r, reward_weights={**movies, "strict_format": 0.0}) for r in rows]
    assert health_warnings(with_monitor)[0].level == "note"
    formatted = [dict(r, reward_weights={**movies, "strict_format": 1.0}) for r in rows]
    (warning,) = health_warnings(formatted)
    assert (warning.title, warning.level) == ("Completions are cut off", "warn"), warning


def test_entropy_collapse_relative_and_absolute():
    rows = [row(1, entropy=2.0)] + [row(i, entropy=0.3) for i in range(2, 5)]
    assert keys(rows) == ["entropy_collapse"]
    assert keys([row(i, entropy=0.05) for i in range(1, 4)]) == ["entropy_collapse"]


def test_low_entropy_is_a_note_while_the_groups_still_differ():
    """A task with one short right answer: entropy falls to a quarter while the reward spread holds (every other
    step is a batch trained on again, which logs no reward std). The groups still teach, so the panel says so
    calmly; the same entropy with the spread gone is the warning."""
    still = [row(1, entropy=0.68, reward_std=0.8)] + [
        row(i, entropy=0.12, reward_std=1.0 if i % 2 else None, frac_reward_zero_std=0.0 if i % 2 else None)
        for i in range(2, 12)]
    (note,) = health_warnings(still)
    assert (note.key, note.level) == ("entropy_collapse", "note") and "the groups still teach" in note.detail, note
    assert "ℹ Entropy is low, and the groups still differ." in views.health_html(still)
    agreeing = [dict(r, reward_std=0.1) if r["reward_std"] is not None and r["step"] > 6 else r for r in still]
    (warning,) = health_warnings(agreeing)
    assert warning.level == "warn" and "and the reward std from 0.93 to 0.1:" in warning.detail, warning
    assert "⚠ Entropy collapse." in views.health_html(agreeing)


def test_every_warning_names_a_fix():
    bad = [row(i, reward_std=0.0, frac_reward_zero_std=1.0, kl=0.9, clipped_ratio=1.0, entropy=0.01)
           for i in range(1, 4)]
    warnings = health_warnings(bad)
    assert len(warnings) == 4 and all(w.fix for w in warnings)
    assert "Try:" in views.health_html(bad)


def test_reward_frame_has_total_and_each_reward():
    frame = charts.reward_frame([row(1), row(2)])
    assert set(frame["series"]) == {"total (weighted)", "length_target"} and len(frame) == 4


def test_groups_html_sorts_by_advantage_and_escapes():
    record = {"step": 3, "groups": [{"prompt": "<b>p</b>", "completions": [
        {"completion": "bad <script>", "rewards": {"r": 0.0}, "total": 0.0, "advantage": -0.94},
        {"completion": "good", "rewards": {"r": 1.0}, "total": 1.0, "advantage": 0.94}]}]}
    out = views.groups_html(record)
    assert out.index("good") < out.index("bad") and "<script>" not in out and "&lt;b&gt;" in out
    assert "gs-pos" in out and "gs-neg" in out


def test_the_header_clock_moves_while_a_run_is_on_its_way_and_stands_once_it_ended():
    """Running: the clock as it stands when drawn (elapsed at the last step plus the time since), for the page
    script to move on. Ended: the time it took (the last step's elapsed time when its trainer's start and end are
    not known), nothing to move. Before a step: time since the start."""
    row = {"step": 3, "elapsed": 60.0, "eta_seconds": 160.0, "time": 1000.0}
    running = views.progress_html("r", {"state": "running"}, [row], 11, now=1012.0)
    assert "class='gs-clock' data-elapsed='72.0' data-left='148.0' data-floor='140.0'" in running
    assert ">1m12s<" in running and ">2m28s<" in running
    ended = views.progress_html("r", {"state": "finished"}, [row], 11, now=5000.0)
    assert "gs-clock" not in ended and "elapsed 1m00s" in ended and "ETA" not in ended
    # The trainer's start and end are known: the whole run, its closing save included, as the runs table counts it.
    timed = {"state": "finished", "started_at": 940.0, "ended_at": 1006.0}
    assert "elapsed 1m06s" in views.progress_html("r", timed, [row], 11, now=5000.0)
    loading = views.progress_html("r", {"state": "running", "started_at": 990.0}, [], 11, now=1000.0)
    assert "data-elapsed='10.0'" in loading and "ETA" not in loading


def test_empty_states_explain_what_will_appear():
    assert "Start" in views.progress_html(None, {}, [], None)
    assert "first step" in views.groups_html(None)


def test_bench_summary_flags_equal_group():
    assert "teach the model nothing" in views.bench_summary([1.0, 1.0, 1.0])


def hacking_history(format_means, strict_means, weights=None):
    """Metrics rows of a run that trains incremental_format and watches strict_format at weight 0."""
    weights = {"incremental_format": 1.0, "strict_format": 0.0} if weights is None else weights
    return [row(step, reward_weights=weights, rewards={"incremental_format": {"mean": f}, "strict_format": {"mean": s}})
            for step, (f, s) in enumerate(zip(format_means, strict_means), 1)]


def test_reward_hacking_fires_when_a_trained_reward_rises_while_a_monitor_falls():
    rows = hacking_history([0.20, 0.25, 0.30, 0.60, 0.65, 0.70], [0.50, 0.45, 0.50, 0.20, 0.15, 0.10])
    warnings = health_warnings(rows)
    assert [w.key for w in warnings] == ["reward_hacking"]
    assert "incremental_format rose from 0.25 to 0.65" in warnings[0].detail
    assert "strict_format (weight 0" in warnings[0].detail and "fell from 0.483 to 0.15" in warnings[0].detail
    assert "A trained reward rises while a monitor falls" in views.health_html(rows)


def test_reward_hacking_stays_quiet_otherwise():
    up, down, flat = [0.2, 0.25, 0.3, 0.6, 0.65, 0.7], [0.5, 0.45, 0.5, 0.2, 0.15, 0.1], [0.4] * 6
    noisy_down = [0.5, 0.1, 0.5, 0.4, 0.0, 0.4]  # lower, but within its step-to-step noise
    assert keys(hacking_history(up, up)) == []  # both rise: learning
    assert keys(hacking_history(up, flat)) == []
    assert keys(hacking_history(flat, down)) == []  # the monitor falls, but nothing trained rises
    assert keys(hacking_history(up, noisy_down)) == []
    assert keys(hacking_history(up[1:], down[1:])) == []  # five steps: not two windows yet
    both_trained = {"incremental_format": 1.0, "strict_format": 0.5}
    assert keys(hacking_history(up, down, both_trained)) == []  # no monitor: a trade-off GRPO may make
    assert keys([{k: v for k, v in r.items() if k != "reward_weights"} for r in hacking_history(up, down)]) == []


def test_the_evaluation_renders_from_its_files_in_views():
    """The Runs panel's evaluation line is a pure function of eval_status.json and eval.json (views.eval_markdown)."""
    from ui.views import eval_markdown

    result = {"n": 8, "base": {"reward_mean": -1.0, "rewards": {"length_target": -1.0, "custom": None}},
              "tuned": {"reward_mean": 0.5, "rewards": {"length_target": 0.5, "custom": None}},
              "delta": 1.5, "gap_closed": 0.75}
    text = eval_markdown("run-1", {"state": "finished"}, result)
    assert "| | base | tuned | change |" in text and "| mean total | -1.000 | 0.500 | +1.500 |" in text
    assert "| length_target | -1.000 | 0.500 | +1.500 |" in text and "| custom | - | - | - |" in text
    assert "Delta (tuned - base): **+1.500**" in text and "gap closed: **75.0%**" in text
    assert eval_markdown("run-1", None, ValueError("Expecting value")) == (
        "❌ **run-1**'s eval.json can't be read (Expecting value): press Evaluate to run it again.")
    assert eval_markdown("run-1", {"state": "finished"}, {"n": 8}).startswith("❌ **run-1**'s eval.json can't be read")
    assert eval_markdown("run-1", {"state": "stopped", "done": 3, "total": 8}, None) == (
        "⏹ Evaluation of **run-1** was stopped (3/8 answers).")


def test_the_evaluation_says_whether_the_gain_is_more_than_chance():
    """Base and tuned are compared prompt by prompt, with the mean gain's bootstrap interval and what it means;
    an eval.json written before the evaluator kept the comparison gets it from its per-prompt totals."""
    from ui.views import eval_markdown

    def result(base, tuned):
        side = lambda totals: {"reward_mean": 0.0, "rewards": {}, "totals": totals}
        return {"n": len(base), "base": side(base), "tuned": side(tuned), "delta": 0.0, "gap_closed": None}

    clear = eval_markdown("run-1", {"state": "finished"}, result([1, 2, 3, 4, 5, 6, 7, 8], [2, 3, 4, 5, 6, 7, 8, 8]))
    assert "tuned scored higher on **7**, lower on **0**, the same on 1 of 8." in clear
    assert "above zero, so the gain holds across these prompts." in clear
    mixed = eval_markdown("run-1", {"state": "finished"}, result([0] * 8, [3, -2, 1, -1, 2, -3, 1, 0]))
    assert "higher on **4**, lower on **3**, the same on 1 of 8." in mixed
    assert "it holds zero, so on 8 prompts this difference may be chance. Evaluate on more held-out prompts" in mixed
    worse = eval_markdown("run-1", {"state": "finished"}, result([5] * 6, [4, 3, 4, 2, 4, 3]))
    assert "below zero: the tuned model scores lower on these prompts." in worse
    # The evaluator's own comparison is the one shown; a prompt either side could not score is left out.
    written = result([1, None, 3, 4, 5, 6], [2, 9, 4, 5, 6, 7])
    written["paired"] = {"n": 5, "better": 5, "worse": 0, "same": 0, "mean": 1.0, "level": 0.9, "low": 1.0,
                         "high": 1.0}
    assert "higher on **5**, lower on **0**, the same on 0 of 5." in eval_markdown("r", {"state": "finished"}, written)
    assert "Prompt by prompt" not in eval_markdown("run-1", {"state": "finished"}, result([], []) | {"n": 0})


def test_the_runs_overlay_shows_only_once_a_run_is_ticked():
    from pipeline.run_folder import runs
    from ui.runs_panel import compare_runs, overlay_labels

    from pipeline.setup.config import RunConfig

    run_dir = runs.new_run_dir("overlay")
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    for step, reward in ((1, 0.5), (2, 0.9)):
        runs.append_jsonl(run_dir / "metrics.jsonl", {"step": step, "reward": reward})
    assert compare_runs([])[0].constructor_args["visible"] is False  # nothing ticked: no empty chart
    shown = compare_runs([run_dir.name])[0].constructor_args
    assert shown["visible"] is True and set(shown["value"]["series"]) == {run_dir.name}
    assert list(shown["value"]["value"]) == [0.5, 0.9]
    assert list(compare_runs([run_dir.name])[1]) == [run_dir.name]  # a colour per run, for the legend
    # The held-out curve reads the run's probes (step 0: the base model), under its own titles.
    for step, reward in ((0, 0.2), (2, 0.6)):
        runs.append_jsonl(run_dir / "evals.jsonl", {"step": step, "reward": reward})
    held_out = compare_runs([run_dir.name], "Held-out reward")[0].constructor_args
    assert list(held_out["value"]["step"]) == [0, 2] and list(held_out["value"]["value"]) == [0.2, 0.6]
    labels = overlay_labels("Held-out reward").constructor_args
    assert (labels["title"], labels["y_title"]) == ("Held-out reward by run", "held-out total reward")
    assert overlay_labels("no such curve").constructor_args["title"] == "Train reward by run"


def shortening(step, mean, weight=1.0, clipped=0.7):
    return row(step, clipped_ratio=clipped, reward_weights={"length_target": weight},
               rewards={"length_target": {"mean": mean}})


def test_clipping_that_a_trained_length_reward_is_fixing_is_a_note():
    """The Quick CPU demo starts with most completions cut off, and its length_target reward shortens them: a
    calm note naming the reward, not a warning telling the user to change what the run is already fixing."""
    young = [shortening(s, -85.0) for s in range(1, 4)]
    rising = [shortening(s, -85.0 + 3 * s) for s in range(1, 8)]
    for rows in (young, rising):
        [w] = health_warnings(rows)
        assert (w.key, w.level) == ("clipped", "note") and "length_target" in w.title, w
    assert "rose from -79 to -67" in health_warnings(rising)[0].detail
    html = views.health_html(rising)
    assert "gs-note" in html and "gs-warn" not in html and "Try:" not in html


def test_clipping_is_a_warning_when_no_length_reward_is_shortening():
    stuck = [shortening(s, -70.0 - s) for s in range(1, 8)]  # the length reward falls: completions grow
    monitored = [shortening(s, -85.0 + 3 * s, weight=0.0) for s in range(1, 8)]  # scored, never trained on
    for rows in (stuck, monitored, [row(i, clipped_ratio=0.9) for i in range(1, 4)]):
        [w] = health_warnings(rows)
        assert w.level == "warn" and w.title == "Completions are cut off", w
        assert "Try: Raise max_completion_length" in views.health_html(rows)
