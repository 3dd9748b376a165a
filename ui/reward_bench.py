"""Reward test bench: score candidate completions (typed or sampled) with chosen rewards and see the
group mean, std and advantages exactly as the trainer computes them. Debug rewards before training."""

from __future__ import annotations

import gradio as gr

from pipeline.rewards.advantages import group_advantages
from pipeline.setup.config import BUNDLED_MODEL_ID, ConfigError
from pipeline.training.generate import ModelCache
from pipeline.models.loading import catalog_choices
from pipeline.setup.reward_check import needs_isolation, score_isolated
from pipeline.rewards import build_rewards, score
from ui import views
from ui.form import REWARD_COLUMNS, reward_rows, rewards_from_rows
from ui.tab import Tab, TabContext

SEPARATOR = "---"
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
    cleaned = (text or "").replace("[", " ").replace("]", " ").replace(",", " ").split()
    try:
        return [float(x) for x in cleaned]
    except ValueError:
        raise ConfigError("Raw rewards must be numbers separated by commas, e.g. 1,1,1,1,0,0,0,0.") from None


# What the result side says before the first group is scored.
BENCH_EMPTY = ("<div class='gs-empty'>Press <b>Score the group</b>: each completion's advantage, weighted total and "
               "per-reward scores appear here, one row each, with the group's mean and std above them. Or type raw "
               "rewards (e.g. 1,1,1,1,0,0,0,0) to see the advantage arithmetic alone.</div>")


def score_candidates(rewards_df, prompt: str, candidates: str, answer: str, raw: str, scale: bool,
                     allow_custom: bool = False):
    try:
        if (raw or "").strip():
            totals = parse_raw(raw)
            if len(totals) < 2:
                raise ConfigError("Enter at least two rewards: advantages compare within a group.")
            adv = group_advantages(totals, scale=scale)
            return views.bench_table({}, totals, adv), views.bench_summary(totals)
        rows = rewards_df.values.tolist() if hasattr(rewards_df, "values") else rewards_df
        specs = rewards_from_rows(rows)
        if not specs:
            raise ConfigError("Tick at least one reward.")
        texts = split_candidates(candidates)
        if len(texts) < 2:
            raise ConfigError(f"Enter at least two completions, separated by a line with only {SEPARATOR}.")
        completions = [[{"role": "assistant", "content": t}] for t in texts]
        extra = {"answer": [answer] * len(texts)} if (answer or "").strip() else {}
        if (prompt or "").strip():  # the text a summary is compared with (post_similarity), as a TL;DR row's post
            extra["source"] = [prompt] * len(texts)
        prompts = [[{"role": "user", "content": prompt or ""}]] * len(texts)
        if needs_isolation(specs):  # custom code runs in a child process, never in the web server
            if not allow_custom:
                raise ConfigError("custom_python runs your own code; start the app with --allow-custom-rewards.")
            result = score_isolated(specs, completions, allow_custom=True, prompts=prompts, **extra)
        else:
            funcs, weights = build_rewards(specs, policy="fail", timeout_s=BENCH_TIMEOUT_S)
            result = score(funcs, weights, completions, prompts=prompts, **extra)
        adv = group_advantages(result["total"], scale=scale)
        return views.bench_table(result["per_reward"], result["total"], adv), views.bench_summary(result["total"])
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
                        g = gr.Number(value=4, precision=0, label="G")
                        temperature = gr.Number(value=1.0, label="Temperature")
                        max_tokens = gr.Number(value=48, precision=0, label="Max new tokens")
                    sample_btn = gr.Button("Sample G completions")
                raw = gr.Textbox(label="…or type raw rewards (skips the functions)", placeholder="1,1,1,1,0,0,0,0",
                                 elem_id="bench-raw")
                scale = gr.Checkbox(value=True, label="Divide by group std (GRPO); off = mean-centred only")
                score_btn = gr.Button("Score the group", variant="primary", elem_id="bench-score")
            with gr.Column():
                summary = gr.Markdown(BENCH_EMPTY, elem_id="bench-summary")
                table = gr.Dataframe(views.bench_table({}, [], []), label="Scores and advantages", interactive=False,
                                     elem_id="bench-table")
        def score_with_flag(rewards_df, prompt_text, candidate_text, answer_text, raw_text, scale_on):
            return score_candidates(rewards_df, prompt_text, candidate_text, answer_text, raw_text, scale_on,
                                    allow_custom=allow_custom)

        score_btn.click(score_with_flag, [rewards, prompt, candidates, answer, raw, scale], [table, summary],
                        api_name="score_candidates")
        # The same queue as Chat's replies: both generate with the cache's models.
        sample_btn.click(make_sampler(cache), [model, prompt, g, temperature, max_tokens], [candidates, summary],
                         concurrency_id="chat", concurrency_limit=2, api_name="sample_group")
    return Tab()
