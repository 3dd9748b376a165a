"""Reward test bench: score candidate completions (typed or sampled) with chosen rewards and see the
group mean, std and advantages exactly as the trainer computes them. Debug rewards before training."""

from __future__ import annotations

import math

import gradio as gr

from pipeline.rewards.advantages import group_advantages, group_stats
from pipeline.run_folder import run_files, runs
from pipeline.setup.config import BUNDLED_MODEL_ID, ConfigError, RunConfig
from pipeline.training.generate import MAX_REPLY_TOKENS, ModelCache
from pipeline.models.loading import catalog_choices
from pipeline.setup.reward_check import needs_isolation, score_isolated
from pipeline.rewards import build_rewards, score
from ui import views
from ui.form import REWARD_COLUMNS, reward_rows, rewards_from_rows
from ui.probes_view import fmt_score
from ui.tab import Tab, TabContext

SEPARATOR = "---"
MAX_G = 64  # the largest group the bench samples
BENCH_TIMEOUT_S = 30.0
EXAMPLE_PROMPT = ("My neighbour's dog barks from 6 a.m. every day. I've asked twice, politely, and nothing "
                  "changed. Should I talk to the landlord or keep trying with the neighbour?")
EXAMPLE_CANDIDATES = "\n---\n".join([
    "Talk to the landlord after one last friendly note.",
    "TL;DR: barking dog, two polite talks failed; ask the landlord next.",
    "dog dog dog dog dog dog",
    "You should definitely consider the many different options that are available to you in this situation, "
    "because every situation is different and it depends on a lot of things.",
])


def split_candidates(text: str) -> list[str]:
    parts = [p.strip() for p in (text or "").split(f"\n{SEPARATOR}\n")]
    return [p for p in parts if p]


def parse_raw(text: str) -> list[float]:
    """Typed raw rewards, as numbers; anything else (a word, inf, nan) is refused in plain words.

    >>> parse_raw("[1, 0.5,0]")
    [1.0, 0.5, 0.0]
    >>> parse_raw("1e400, 1")
    Traceback (most recent call last):
    ...
    pipeline.setup.config.ConfigError: Raw reward '1e400' is not a finite number; type finite ones.
    """
    cleaned = (text or "").replace("[", " ").replace("]", " ").replace(",", " ").split()
    try:
        values = [float(x) for x in cleaned]
    except ValueError:
        raise ConfigError("Raw rewards must be numbers separated by commas, e.g. 1,1,1,1,0,0,0,0.") from None
    for word, value in zip(cleaned, values):
        if not math.isfinite(value):
            raise ConfigError(f"Raw reward '{word}' is not a finite number; type finite ones.")
    return values


# What the result side says before the first group is scored.
BENCH_EMPTY = ("<div class='gs-empty'>Press <b>Score the group</b>: each completion's advantage, weighted total and "
               "per-reward scores appear here, one row each, with the group's mean and std above them. Or type raw "
               "rewards (e.g. 1,1,1,1,0,0,0,0) to see the advantage arithmetic alone.</div>")


SCALES = [("the group's std (GRPO)", "group"), ("the batch's std (every group of the step)", "batch"),
          ("nothing (mean-centred only)", "none")]


def scale_mode(scale) -> str:
    """The advantage divisor as TRL's scale_rewards names it; True/False is the older checkbox (group/none).

    >>> scale_mode(True), scale_mode(False), scale_mode("batch")
    ('group', 'none', 'batch')
    """
    if isinstance(scale, bool):
        return "group" if scale else "none"
    if scale not in ("group", "batch", "none"):
        raise ConfigError(f"Divide advantages by the group's std, the batch's std or nothing, not {scale!r}.")
    return scale


def _extra_columns(columns: dict | None, prompt: str, answer: str, n: int) -> dict:
    """What the rewards get beside the completions: a dataset row's columns, the reference answer, the post."""
    extra = {key: [value] * n for key, value in (columns or {}).items() if key != "answer"}
    if (answer or "").strip():
        extra["answer"] = [answer] * n
    if (prompt or "").strip() and "source" not in extra:  # the text post_similarity compares with
        extra["source"] = [prompt] * n
    return extra


def _score_group(specs, texts: list[str], prompts: list[str], extra: dict, allow_custom: bool) -> dict:
    """Score completions, each with its own prompt and `extra` columns (one value per completion)."""
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    chats = [[{"role": "user", "content": p or ""}] for p in prompts]
    if needs_isolation(specs):  # custom code runs in a child process, never in the web server
        if not allow_custom:
            raise ConfigError("custom_python runs your own code; start the app with --allow-custom-rewards.")
        return score_isolated(specs, completions, allow_custom=True, prompts=chats, **extra)
    funcs, weights = build_rewards(specs, policy="fail", timeout_s=BENCH_TIMEOUT_S)
    return score(funcs, weights, completions, prompts=chats, **extra)


def _batch_totals(specs, loaded: dict, allow_custom: bool) -> list:
    """The totals of the loaded step's other groups, rescored with these rewards and weights in one call."""
    texts, prompts, parts = [], [], []
    for other in loaded.get("others") or []:
        n, columns = len(other.get("completions") or []), other.get("columns") or {}
        parts.append((n, _extra_columns(columns, other.get("prompt") or "", str(columns.get("answer") or ""), n)))
        texts += other.get("completions") or []
        prompts += [other.get("prompt") or ""] * n
    if not texts:
        return []
    keys = {key for _, part in parts for key in part}  # a column some group lacks is None for its completions
    extra = {key: [v for n, part in parts for v in part.get(key, [None] * n)] for key in keys}
    return _score_group(specs, texts, prompts, extra, allow_custom)["total"]


def score_candidates(rewards_df, prompt: str, candidates: str, answer: str, raw: str, scale,
                     allow_custom: bool = False, loaded: dict | None = None):
    """Score the group. `loaded` is what load_group kept of a group loaded from a run: while the Prompt box still
    holds that group's prompt, the rewards get its dataset row's columns as in the run (the post that
    post_similarity compares with, a movie question's films), and dividing by the batch's std rescores the other
    groups of its step; the reference answer is always the box's. `scale` is "group", "batch" or "none"."""
    try:
        mode = scale_mode(scale)
        current = loaded if (loaded or {}).get("prompt") == prompt else None
        if (raw or "").strip():
            totals = parse_raw(raw)
            if len(totals) < 2:
                raise ConfigError("Enter at least two rewards: advantages compare within a group.")
            per_reward, batch, in_run = {}, [], None
        else:
            rows = rewards_df.values.tolist() if hasattr(rewards_df, "values") else rewards_df
            specs = rewards_from_rows(rows)
            if not specs:
                raise ConfigError("Tick at least one reward.")
            texts = split_candidates(candidates)
            if current and current.get("candidates") == candidates and current.get("texts"):
                texts = list(current["texts"])  # as the run scored them: an empty one empty, spaces kept
            if len(texts) < 2:
                raise ConfigError(f"Enter at least two completions, separated by a line with only {SEPARATOR}.")
            extra = _extra_columns((current or {}).get("columns"), prompt, answer, len(texts))
            result = _score_group(specs, texts, [prompt] * len(texts), extra, allow_custom)
            totals, per_reward = result["total"], result["per_reward"]
            batch = _batch_totals(specs, current, allow_custom) if mode == "batch" and current else []
            # The run's advantages beside the bench's while the group is the one loaded, unedited.
            in_run = (current or {}).get("advantages") if (current or {}).get("candidates") == candidates else None
        divisor = group_stats(list(totals) + batch)[1] if mode == "batch" else None
        adv = group_advantages(totals, scale=mode != "none", divisor=divisor)
        groups = 1 + len((current or {}).get("others") or []) if batch else 1
        return (views.bench_table(per_reward, totals, adv, in_run=in_run),
                views.bench_summary(totals, mode, batch_std=divisor, batch_size=len(totals) + len(batch),
                                    groups=groups))
    except Exception as exc:  # noqa: BLE001 - a debugging tool: show the reason plainly
        return views.bench_table({}, [], []), f"❌ {exc}"  # the headers stay; no earlier group's rows beside it


def make_sampler(cache: ModelCache):
    """The "Sample G completions" handler. Its model comes from the app's one ModelCache (shared with
    Chat and RAG, under its load lock), so at most two models are in memory across the whole app."""

    def sample_group(model_id: str, prompt: str, g: float, temperature: float, max_tokens: float,
                     progress=gr.Progress()):
        from pipeline.training.generate import generate_batch

        try:
            progress(0.1, desc="Loading the model (or reusing the one Chat has loaded)")
            model, tok = cache.get(model_id or BUNDLED_MODEL_ID)
            progress(0.4, desc=f"Sampling {int(g)} completions")
            texts = generate_batch(model, tok, [[{"role": "user", "content": prompt}]] * int(g),
                                   max_new_tokens=int(max_tokens), temperature=max(float(temperature), 0.05))
            return (f"\n{SEPARATOR}\n".join(t.strip() or "(empty)" for t in texts),
                    f"Sampled {len(texts)} completions from `{model_id or BUNDLED_MODEL_ID}` into *Candidate "
                    "completions*: press **Score the group** to score them (or edit them first).")
        except Exception as exc:  # noqa: BLE001
            return gr.skip(), f"❌ {exc}"

    return sample_group


class GroupPickError(ValueError):
    """A run's step or prompt that can't be loaded, in words."""


def pick_group(records: list[dict], step, number) -> tuple[dict, dict]:
    """The step record and the group of its `number`-th prompt (from 1) in a run's groups.jsonl records; step 0
    means the latest.

    >>> records = [{"step": 1, "groups": [{"prompt": "a"}, {"prompt": "b"}]}, {"step": 2, "groups": [{"prompt": "c"}]}]
    >>> pick_group(records, 0, 1)[1], pick_group(records, 1, 2)[1]
    ({'prompt': 'c'}, {'prompt': 'b'})
    >>> pick_group(records, 5, 1)
    Traceback (most recent call last):
    ...
    ui.reward_bench.GroupPickError: Step 5 has no groups logged; this run has steps 1-2.
    >>> pick_group(records, 2, 3)
    Traceback (most recent call last):
    ...
    ui.reward_bench.GroupPickError: Step 2 has 1 prompt: pick a number from 1 to 1.
    """
    if not records:
        raise GroupPickError("This run has no groups yet: they are logged from its first step on.")
    step, number = int(step or 0), int(number or 1)
    record = records[-1] if step == 0 else next((r for r in records if r.get("step") == step), None)
    if record is None:
        steps = [r.get("step") for r in records]
        raise GroupPickError(f"Step {step} has no groups logged; this run has steps {min(steps)}-{max(steps)}.")
    groups = record.get("groups") or []
    if not 1 <= number <= len(groups):
        prompts = "1 prompt" if len(groups) == 1 else f"{len(groups)} prompts"
        raise GroupPickError(f"Step {record.get('step')} has {prompts}: pick a number from 1 to {len(groups)}.")
    return record, groups[number - 1]


def user_text(prompt: str) -> str:
    r"""The last user turn of a prompt as groups.jsonl writes it ("[system] …\n[user] …"), or the text itself.

    >>> user_text("[system] Be brief.\n[user] Post\n\nTL;DR:"), user_text("plain")
    ('Post\n\nTL;DR:', 'plain')
    """
    head, sep, tail = (prompt or "").rpartition("[user] ")
    return tail if sep and (not head or head.endswith("\n")) else (prompt or "")


def dataset_rows(cfg: RunConfig) -> list[dict]:
    """The run's prompt rows, to find a logged prompt's row in; [] for a hub dataset (not fetched from here) or a
    file that can't be read any more."""
    from pipeline.setup.data import load_rows

    if cfg.dataset.source == "hub":
        return []
    try:
        return load_rows(cfg.dataset)
    except Exception:  # noqa: BLE001 - an uploaded file since moved, a damaged one: the bench works without it
        return []


def dataset_row(rows: list[dict], user: str) -> dict:
    """The row a logged prompt came from, found by its user text: its columns (answer, source, ...) are what the
    run's rewards saw. {} when none matches."""
    from pipeline.training.probes import prompt_text

    return next((r for r in rows if prompt_text(r.get("prompt")) == user), {})


def _row_columns(row: dict) -> dict:
    return {key: value for key, value in row.items() if key not in ("prompt", "id")}


def runs_with_groups() -> list[str]:
    return [p.name for p in runs.iter_run_dirs() if (p / run_files.GROUPS).exists()]


def load_group(run_name: str | None, step, number, allow_custom: bool = False):
    """Fill the bench from a run: its rewards and weights, the group's prompt and its G completions, and what they
    scored in the run, to try other rewards or weights on completions the model really wrote."""
    run_dir = runs.resolve_run(run_name)
    if run_dir is None:
        return *[gr.skip()] * 4, "❌ Pick a run to load a group from.", gr.skip(), gr.skip()
    try:
        record, group = pick_group(runs.read_groups(run_dir), step, number)
        cfg = RunConfig.load(run_dir / run_files.CONFIG)
    except (GroupPickError, ConfigError, OSError, ValueError) as exc:
        return *[gr.skip()] * 4, f"❌ {exc}", gr.skip(), gr.skip()
    prompt = user_text(group.get("prompt") or "")
    rows = dataset_rows(cfg)
    row = dataset_row(rows, prompt)
    others = []  # the step's other groups: dividing by the batch's std rescores them with the bench's rewards
    for other in record.get("groups") or []:
        if other is not group:
            user = user_text(other.get("prompt") or "")
            others.append({"prompt": user, "columns": _row_columns(dataset_row(rows, user)),
                           "completions": [c.get("completion") or "" for c in other.get("completions") or []]})
    items = group.get("completions") or []
    totals = ", ".join(fmt_score(c.get("total")) for c in items)
    advantages = ", ".join(f"{c.get('advantage'):+.2f}" if isinstance(c.get("advantage"), (int, float)) else "-"
                           for c in items)
    scaled = {"batch": "the batch's std", "group": "the group's std"}.get(record.get("scale_rewards"), "no std")
    message = (f"Loaded **{run_dir.name}**, step {record.get('step')}, prompt {int(number or 1)}: {len(items)} "
               f"completions with the run's rewards and weights. In the run they scored {totals} (advantages "
               f"{advantages}, scaled by {scaled}, as the bench now is). Change a reward or a weight, then **Score the "
               "group**.")
    if not row:
        message += (" This run's prompts can't be read here, so the rewards compare with the *Prompt* box and "
                    "have no reference answer: type it for exact_answer / numeric_tolerance.")
    candidates = f"\n{SEPARATOR}\n".join((c.get("completion") or "").strip() or "(empty)" for c in items)
    scale = record.get("scale_rewards") if record.get("scale_rewards") in ("group", "batch", "none") else "group"
    return (reward_rows(cfg, allow_custom=allow_custom), prompt, candidates, str(row.get("answer") or ""),
            message, {"prompt": prompt, "columns": _row_columns(row), "others": others, "candidates": candidates,
                      "texts": [c.get("completion") or "" for c in items],
                      "advantages": [c.get("advantage") for c in items]}, scale)


def build(ctx: TabContext) -> Tab:
    """Add the Reward test bench tab; it samples with the app's model cache (shared with Chat and RAG)."""
    cache, allow_custom = ctx.cache, ctx.allow_custom_rewards
    with gr.Tab("Reward test bench", id="bench"):
        gr.Markdown("Try rewards on a group before spending compute. Each completion gets its per-reward "
                    "scores and weighted total; the advantages are computed exactly as TRL's GRPOTrainer does.")
        with gr.Row(equal_height=False):
            with gr.Column():
                rewards = gr.Dataframe(value=reward_rows(allow_custom=allow_custom), headers=REWARD_COLUMNS,
                                       datatype=["bool", "str", "number", "str"], interactive=True,
                                       column_count=(4, "fixed"), label="Rewards")
                prompt = gr.Textbox(label="Prompt", value=EXAMPLE_PROMPT, lines=3,
                                    info="Also the text post_similarity compares each completion's meaning with.")
                answer = gr.Textbox(label="Reference answer (for exact_answer / numeric_tolerance)")
                candidates = gr.Textbox(label=f"Candidate completions (separate with a line: {SEPARATOR})",
                                        value=EXAMPLE_CANDIDATES, lines=10, elem_id="bench-candidates")
                with gr.Accordion("Sample G completions from a model instead", open=False):
                    model = gr.Dropdown(choices=catalog_choices(), value=BUNDLED_MODEL_ID, label="Model",
                                        allow_custom_value=True)
                    with gr.Row():
                        # Bounded as Chat's replies are (the two share one queue): a group, not a batch job.
                        g = gr.Number(value=4, precision=0, minimum=2, maximum=MAX_G, label=f"G (2-{MAX_G})")
                        temperature = gr.Number(value=1.0, minimum=0, maximum=2, label="Temperature (0-2)")
                        max_tokens = gr.Number(value=48, precision=0, minimum=1, maximum=MAX_REPLY_TOKENS,
                                               label=f"Max new tokens (up to {MAX_REPLY_TOKENS})")
                    sample_btn = gr.Button("Sample G completions")
                with gr.Accordion("Load a group from a run instead", open=False, elem_id="bench-load") as load_fold:
                    with gr.Row():
                        load_run = gr.Dropdown(label="Run", choices=[], elem_id="bench-run", scale=3)
                        load_step = gr.Number(value=0, precision=0, minimum=0, label="Step (0 = latest)", scale=1)
                        load_number = gr.Number(value=1, precision=0, minimum=1, label="Prompt #", scale=1,
                                                info="as numbered in the group inspector")
                    load_btn = gr.Button("Load the group", elem_id="bench-load-btn")
                raw = gr.Textbox(label="…or type raw rewards (skips the functions)", placeholder="1,1,1,1,0,0,0,0",
                                 elem_id="bench-raw")
                scale = gr.Radio(SCALES, value="group", label="Divide each advantage by", elem_id="bench-scale",
                                 info="GRPO divides by the group's std. A run whose advantages are scaled by the "
                                      "batch's std (the Quick CPU demo's are) divides by the std of every "
                                      "completion of the step: a group loaded from a run brings its step's "
                                      "other groups for that, rescored with the rewards above.")
                score_btn = gr.Button("Score the group", variant="primary", elem_id="bench-score")
            with gr.Column():
                summary = gr.Markdown(BENCH_EMPTY, elem_id="bench-summary")
                table = gr.Dataframe(views.bench_table({}, [], []), label="Scores and advantages", interactive=False,
                                     elem_id="bench-table")
        loaded = gr.State({})  # a group loaded from a run: its dataset row and its step's other groups

        def score_with_flag(rewards_df, prompt_text, candidate_text, answer_text, raw_text, scale_on, row=None):
            return score_candidates(rewards_df, prompt_text, candidate_text, answer_text, raw_text, scale_on,
                                    allow_custom=allow_custom, loaded=row)

        score_btn.click(score_with_flag, [rewards, prompt, candidates, answer, raw, scale, loaded], [table, summary],
                        api_name="score_candidates")
        # The same queue as Chat's replies: both generate with the cache's models.
        sample_btn.click(make_sampler(cache), [model, prompt, g, temperature, max_tokens], [candidates, summary],
                         concurrency_id="chat", concurrency_limit=2, api_name="sample_group")
        load_fold.expand(lambda: gr.Dropdown(choices=runs_with_groups()), None, load_run, show_progress="hidden",
                         api_visibility="private")
        load_btn.click(lambda name, step, number: load_group(name, step, number, allow_custom),
                       [load_run, load_step, load_number], [rewards, prompt, candidates, answer, summary, loaded,
                                                            scale],
                       api_name="load_group")
    return Tab()
