"""Train tab: the layout and its events, wiring three parts: the form with Start (ui/train_form.py), the live
view of the shown run (ui/live_view.py) and the Runs panel with its jobs (ui/runs_panel.py). The live view
follows the run directory (a poll in the page asks for a stamp per part of the view every second and the
parts whose stamp moved are redrawn), so a page reload or an app restart picks a run up again."""


from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gradio as gr

from pipeline.run_folder.jobs import EVAL_LIMIT, EVAL_MAX
from pipeline.run_folder.runs import RUN_NAME_MAX
from pipeline.setup.config import BUNDLED_MODEL_ID, RunConfig
from pipeline.models.loading import catalog_choices, gpu_count
from pipeline.training.preflight import SCAN_PROMPTS
from pipeline.setup.presets import PRESETS
from ui import charts, clock, page_title, probes_view, steer_panel, token_views, views, watch
from ui.answers_view import ANSWER_SOURCES, ANSWERS_EMPTY, EVALUATION, PROBES
from ui.compare_view import COMPARE_EMPTY
from ui.tab import PageLoad, Tab, TabContext
from ui.form import REWARD_COLUMNS, SOURCE_SHOWN, SOURCES, config_to_form, form_fields, form_keys, reward_rows
from ui.live_view import (
    ALL_PARTS, BACKGROUND, GROUPS_ONLY_JS, PART_OUTPUTS, PLOTS, live_view, picked_probes, plot_colors, run_header,
)
from ui.runs_panel import (
    EXPORTS_EMPTY, NO_RUNS, compare_answers, compare_runs, compare_settings, comparison_download, delete_run,
    eval_view, evaluate_run, exports_view, load_run_settings, metrics_download, next_stage_settings, overlay_choices,
    overlay_colors, overlay_labels, picked_answers, refresh_runs, remove_orphan_exports, report_download,
    resume_training, runs_hint, runs_table, stop_evaluation, stop_push, stop_training,
)
from ui.train_form import (
    CLOSE_SETTINGS_JS, UPLOAD_TYPES, fill_preset, hyper_component, make_scanner, preview_dataset, reward_docs,
    SWEEP_HELP, queue_sweep, queue_training, run_preflight, settings_accordion, show_command, start_training,
    store_upload,
)
from pipeline.setup.sweep import sweepable
from ui.queue_view import load_queued, remove_from_queue


TAB_LABEL = "Train"


def keyed(handler: Callable[..., dict[str, Any]], components: dict[str, Any]) -> Callable[..., Any]:
    """Gradio's side of a handler that returns {name: update}: the same updates keyed by component. A name
    left out leaves its component as it is. The handler's name (and so its API name) is kept."""
    @functools.wraps(handler)
    def by_component(*args, **kwargs):
        updates = handler(*args, **kwargs)
        # An empty dict would read as one output's value: a single skip() leaves every output unchanged.
        return {components[name]: value for name, value in updates.items()} if updates else gr.skip()
    return by_component


# ---- layout ------------------------------------------------------------------------------------


def build(ctx: TabContext) -> Tab:
    """Add the Train tab to the enclosing gr.Blocks. On page load it offers the runs on disk (refresh_runs: a
    reload finds the active or latest run again), folds the settings and follows the run files (ui/watch.py)."""
    allow_custom = ctx.allow_custom_rewards
    defaults = config_to_form(RunConfig())
    with gr.Tab(TAB_LABEL, id="train"):
        allow = gr.State(allow_custom)
        ops = gr.State(sorted(ctx.operators))  # logins that may act on every run (the others: on their own)
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=380):
                gr.Markdown("### 1. Model and data")
                model_choice = gr.Dropdown(choices=catalog_choices(), value=BUNDLED_MODEL_ID, label="Model",
                                           info="The bundled model works offline; hub models need a network.")
                model_custom = gr.Textbox(label="…or a hub id / local folder", placeholder="org/name or /path/to/model")
                source = gr.Radio([(SOURCE_SHOWN.get(key, key), key) for key in SOURCES], value="TL;DR (bundled)",
                                  label="Prompts")
                with gr.Group(visible=False) as file_box:
                    upload = gr.File(label="CSV / TSV / JSONL / JSON", file_types=UPLOAD_TYPES,
                                     type="filepath")
                    upload_msg = gr.Markdown()
                    with gr.Row():
                        prompt_col = gr.Dropdown(label="Prompt column", choices=[], allow_custom_value=True)
                        answer_col = gr.Dropdown(label="Answer column (optional)", choices=[], allow_custom_value=True)
                with gr.Group(visible=False) as hub_box:
                    with gr.Row():
                        hub_id = gr.Textbox(label="Hub dataset id", placeholder="mlabonne/smoltldr")
                        hub_config = gr.Textbox(label="Config (subset)", placeholder="e.g. main (optional)")
                        hub_split = gr.Textbox(label="Split", value="train")
                system = gr.Textbox(label="System prompt (optional)", lines=2,
                                    placeholder="Leave empty for the dataset's default instruction.")
                stored_path = gr.State("")
                preview_btn = gr.Button("Preview prompts as the model sees them", size="sm")
                preview = gr.Code(label="Prompt preview", language=None, lines=8, visible=False,
                                  elem_id="prompt-preview")

                gr.Markdown("### 2. Rewards")
                rewards = gr.Dataframe(value=reward_rows(allow_custom=allow_custom), headers=REWARD_COLUMNS,
                                       datatype=["bool", "str", "number", "str"], interactive=True,
                                       column_count=(4, "fixed"),
                                       label="Tick to use; set weight (0 = monitor) and parameters",
                                       elem_id="rewards-table")
                with gr.Accordion("What each reward does", open=False):
                    gr.Markdown(reward_docs())

                gr.Markdown("### 3. Hyperparameters")
                preset = gr.Dropdown(choices=list(PRESETS), value="Quick CPU demo", label="Preset",
                                     info="Fills the whole form. A next stage keeps its run's model: the preset "
                                          "sets what the stage teaches.", elem_id="preset")
                with settings_accordion():  # one component per RunConfig field marked for the form
                    hyper = {spec.name: hyper_component(spec, defaults[spec.name]) for spec in form_fields()}

                gpus = gpu_count()
                nproc = gr.Slider(1, max(gpus, 2), value=max(gpus, 1), step=1, visible=gpus > 1,
                                  label=f"Processes (one per GPU; {gpus} visible)",
                                  info="More than one starts the same trainer under torchrun (data parallel).")
                run_name = gr.Textbox(label="Run name (optional)", max_lines=1, elem_id="run-name",
                                      placeholder="e.g. lr 3e-4, or no diversity reward",
                                      info=f"Up to {RUN_NAME_MAX} characters, kept after the run's start time "
                                           "in its folder name, so the runs you compare say what you tried. "
                                           "Left empty, the model and the prompts name it.")
                with gr.Row():
                    check_btn = gr.Button("Pre-flight check")
                    scan_btn = gr.Button("Learnability scan", elem_id="scan-btn")
                    cmd_btn = gr.Button("Show command")
                    queue_btn = gr.Button("Add to queue", elem_id="queue-btn")
                    start_btn = gr.Button("Start", variant="primary", elem_id="start-btn")
                with gr.Accordion("Queue a sweep", open=False, elem_id="sweep-fold"):
                    gr.Markdown(SWEEP_HELP)
                    with gr.Row():
                        sweep_setting = gr.Dropdown(choices=sweepable(), value="learning_rate", scale=2,
                                                    label="Setting to vary", elem_id="sweep-setting")
                        sweep_values = gr.Textbox(label="Values", placeholder="1e-4, 3e-4, 1e-3", max_lines=1,
                                                  scale=3, elem_id="sweep-values")
                    with gr.Row():
                        sweep_setting2 = gr.Dropdown(choices=[("none", ""), *sweepable()], value="", scale=2,
                                                     label="Second setting (a grid)", elem_id="sweep-setting2")
                        sweep_values2 = gr.Textbox(label="Its values", placeholder="0, 0.04", max_lines=1,
                                                   scale=3, elem_id="sweep-values2")
                    sweep_btn = gr.Button("Queue the sweep", elem_id="sweep-btn")
                message = gr.Markdown(elem_id="train-message")
                with gr.Group(visible=False, elem_id="queue-box") as queue_box:  # shown while runs wait
                    queue_list = gr.HTML(elem_id="queue")
                    queue_pick = gr.Dropdown(label="Queued run", choices=[], elem_id="queue-pick")
                    with gr.Row():
                        load_queued_btn = gr.Button("Load into the form", size="sm", elem_id="load-queued-btn")
                        unqueue_btn = gr.Button("Remove from queue", size="sm", elem_id="unqueue-btn")
                scan_prompts = gr.Number(value=SCAN_PROMPTS, precision=0, minimum=1, maximum=256,
                                         label="Prompts to scan", elem_id="scan-prompts",
                                         info=f"The learnability scan samples G completions for this many training "
                                              f"prompts. {SCAN_PROMPTS} take under a minute on 2 CPU cores with the "
                                              "bundled model and the default settings; more give a surer picture "
                                              "and keep more prompts.")
                scan_view = gr.HTML(views.scan_empty_html(), elem_id="scan")
                kept_prompts = gr.State([])  # the prompts the last scan found signal on (RunConfig.signal_prompts)
                # Shown once asked for (Show command): an empty code box until then says nothing.
                command = gr.Code(label="Equivalent command and config", language="shell", visible=False, lines=6,
                                  elem_id="train-command")

            with gr.Column(scale=3, min_width=520):
                with gr.Row():
                    run_select = gr.Dropdown(label="Run", choices=[], scale=4, elem_id="run-select")
                    stop_btn = gr.Button("Stop", variant="stop", scale=1, elem_id="stop-btn")
                stop_message = gr.Markdown(elem_id="stop-message")  # beside the button that asked, not under Start
                progress_box = gr.HTML(views.progress_html(None, {}, [], None), elem_id="progress")
                health = gr.HTML(elem_id="health")
                steer = steer_panel.build()  # the run on screen's weights, temperature, learning rate and beta
                # Full width each: their legends list every reward and each steering change in one row.
                reward_plot = gr.LinePlot(None, x="step", y="value", color="series",
                                          title=charts.REWARD_TITLE, height=260,
                                          y_title=charts.CHART_Y_TITLES["reward"],
                                          elem_id="reward-plot", **charts.STEP_CHART)
                probe_plot = gr.LinePlot(None, x="step", y="value", color="series",
                                         title=charts.PROBE_TITLE, height=260,
                                         y_title=charts.CHART_Y_TITLES["probe"],
                                         elem_id="probe-plot", **charts.STEP_CHART)
                plots = {}
                chart_items = list(charts.CHARTS.items())
                for i in range(0, len(chart_items), 2):
                    with gr.Row():
                        for key, (title, _) in chart_items[i:i + 2]:
                            plots[f"plot_{key}"] = gr.LinePlot(
                                None, x="step", y="value", color="series", title=title, height=200,
                                y_title=charts.CHART_Y_TITLES[key],
                                elem_id=f"plot-{key}", y_lim=charts.CHART_Y_LIMITS.get(key), **charts.STEP_CHART)
                gr.Markdown(charts.LOSS_NOTE, elem_id="loss-note")
                gr.Markdown("#### Completions over time\nThe same held-out prompts, answered greedily at step 0 "
                            "(the base model), every few steps and at the end. Pick a step to see its answers.")
                probe_pick = gr.Radio(choices=probes_view.probe_choices([]), value="latest", label="Probe step",
                                      elem_id="probe-step")
                probes_panel = gr.HTML(probes_view.probes_empty_html(RunConfig().to_dict()), elem_id="probes")
                gr.Markdown("#### Group inspector\nEach prompt's G completions, best advantage first. "
                            "Green rows were reinforced, red rows discouraged.")
                group_step = gr.Slider(0, 1, value=0, step=1, label="Step (0 = latest)", elem_id="group-step")
                token_mode = gr.Radio(list(token_views.MODES), value=token_views.TEXT, label="Show completions as",
                                      info="Log-prob shades the tokens the policy found surprising; Entropy, where "
                                           "it was unsure what to write. Hover a token for its values.",
                                      elem_id="token-mode")
                groups = gr.HTML(views.groups_html(None), elem_id="groups")
                log = gr.Textbox(label="Log tail", lines=8, max_lines=8, interactive=False, elem_id="log")

        with gr.Accordion("Runs", open=True):
            with gr.Row():
                refresh_btn = gr.Button("Refresh list", size="sm")
            runs_empty = gr.Markdown(NO_RUNS, visible=False, elem_id="runs-empty")
            table = gr.Dataframe(runs_table(), interactive=False, label="All runs", elem_id="runs-table")
            with gr.Row():
                with gr.Column():
                    compare = gr.CheckboxGroup(label="Overlay runs", choices=[], elem_id="compare",
                                               info="Tick two or more runs to draw one of their curves on one "
                                                    "chart.")
                    compare_curve = gr.Radio(list(charts.COMPARE_CURVES), value=charts.DEFAULT_COMPARE,
                                             label="Curve", elem_id="compare-curve",
                                             info="Held-out reward is the probe prompts' (never trained on; step "
                                                  "0 is the base model): whether a run's gain carries over. Each "
                                                  "reward the ticked runs scored has a curve too (its mean, before "
                                                  "weights).")
                    compare_plot = gr.LinePlot(None, x="step", y="value", color="series", color_title="run",
                                               visible=False, title=charts.COMPARE_TITLE, height=240,
                                               elem_id="compare-plot", y_title=charts.CHART_Y_TITLES["compare"],
                                               **charts.STEP_CHART)
                    compared = gr.HTML(COMPARE_EMPTY, elem_id="compare-settings")
                    comparison_btn = gr.Button("Download the comparison (HTML)", size="sm", elem_id="comparison-btn")
                    comparison_msg = gr.Markdown(elem_id="comparison-msg")
                    comparison_file = gr.File(label="The ticked runs on one page: curves, settings, held-out answers",
                                              visible=False, interactive=False, elem_id="comparison-file")
                with gr.Column():
                    action_run = gr.Dropdown(label="Run", choices=[], elem_id="action-run")
                    with gr.Row():
                        resume_btn = gr.Button("Resume", elem_id="resume-btn")
                        eval_btn = gr.Button("Evaluate base vs tuned", elem_id="eval-btn")
                    with gr.Row():
                        load_run_btn = gr.Button("Load its settings into the form", size="sm",
                                                 elem_id="load-run-btn")
                        stage_btn = gr.Button("Train a next stage from it", size="sm", elem_id="stage-btn")
                    with gr.Row():
                        resume_steps = gr.Number(value=None, precision=0, minimum=0, label="Resume to step",
                                                 info="0 or empty: the run's own step count. Above a finished "
                                                      "run's last step, Resume trains it further.",
                                                 elem_id="resume-steps")
                        eval_prompts = gr.Number(value=EVAL_LIMIT, precision=0, minimum=1, maximum=EVAL_MAX,
                                                 label="Held-out prompts to evaluate",
                                                 info="More take longer and tell a real gain from chance more "
                                                      "surely; a run holds out only so many.",
                                                 elem_id="eval-prompts")
                    with gr.Row():  # the jobs' own stops, under the buttons that start them
                        eval_stop_btn = gr.Button("Stop evaluation", size="sm", interactive=False,
                                                  elem_id="eval-stop-btn")
                        push_stop_btn = gr.Button("Stop push", size="sm", interactive=False, elem_id="push-stop-btn")
                    with gr.Row():
                        metrics_btn = gr.Button("Download metrics (CSV)", size="sm", elem_id="metrics-btn")
                        report_btn = gr.Button("Download report (HTML)", size="sm", elem_id="report-btn")
                    metrics_file = gr.File(label="Metrics, a row per step", visible=False, interactive=False,
                                           elem_id="metrics-file")
                    report_file = gr.File(label="Report: curves, held-out answers, a group, settings", visible=False,
                                          interactive=False, elem_id="report-file")
                    with gr.Row():
                        confirm = gr.Checkbox(label="Yes, delete it", value=False)
                        with_exports = gr.Checkbox(label="and its exports", value=False, elem_id="delete-exports",
                                                   info="Zips and GGUF files made from it in Chat; kept "
                                                        "unless ticked.")
                        delete_btn = gr.Button("Delete", variant="stop")
                    action_msg = gr.Markdown(elem_id="action-msg")
                    eval_box = gr.Markdown(elem_id="eval-status")
                    with gr.Accordion("Exports folder", open=False, elem_id="exports-fold") as exports_fold:
                        exports_md = gr.Markdown(EXPORTS_EMPTY, elem_id="exports-view")
                        orphans_btn = gr.Button("Remove the files from deleted runs", size="sm", variant="stop",
                                                visible=False, elem_id="orphans-btn")
            with gr.Accordion("Held-out answers side by side", open=True, elem_id="answers-fold"):
                answer_source = gr.Radio(list(ANSWER_SOURCES), value=PROBES, label="Answers from",
                                         info=f"{PROBES}: {ANSWER_SOURCES[PROBES]}. {EVALUATION}: "
                                              f"{ANSWER_SOURCES[EVALUATION]}, for runs evaluated.",
                                         elem_id="answer-source")
                answer_pick = gr.Dropdown(label="Held-out prompt", choices=[], visible=False, elem_id="answer-pick",
                                          info="A prompt none of the runs trained on, answered greedily and "
                                               "scored with each run's own rewards.")
                answers = gr.HTML(ANSWERS_EMPTY, elem_id="answers")

        # The form by name (RunConfig / DatasetSpec field names), in form_keys order, which is also the order
        # the API takes: handlers get it as keyword arguments and ui.form.form_to_config turns it into a config.
        parts = {"model": model_choice, "model_custom": model_custom, "source": source, "path": stored_path,
                 "prompt_column": prompt_col, "answer_column": answer_col, "system_prompt": system,
                 "hub_id": hub_id, "hub_config": hub_config, "hub_split": hub_split, "rewards": rewards,
                 "signal_prompts": kept_prompts, **hyper}
        form = {key: parts[key] for key in form_keys()}
        # The live view: the page's poll (ui/watch.py) presses this hidden button when a part's stamp moved, and its
        # event hands the handler those parts (its last input, filled in by the poll's js).
        live_refresh = gr.Button("Refresh the live view", elem_id="live-refresh", elem_classes=["gs-hidden"])
        moved_parts = gr.Textbox(ALL_PARTS, label="Live view parts to redraw", elem_classes=["gs-hidden"])
        # The run header and the queue, pressed by the poll while the tab is out of sight (the page's title reads
        # the header; the queue moves the page to the run it starts).
        header_refresh = gr.Button("Refresh the run header", elem_id="header-refresh", elem_classes=["gs-hidden"])
        # The live view's outputs by name (PART_OUTPUTS), in the order the API returns them.
        shown = {"progress": progress_box, "stop_btn": stop_btn, "health": health, "reward_plot": reward_plot, **plots,
                 "groups": groups,
                 "group_step": group_step, "log": log, "probe_plot": probe_plot, "probes": probes_panel,
                 "probe_pick": probe_pick, "eval_box": eval_box, "eval_stop_btn": eval_stop_btn,
                 "push_stop_btn": push_stop_btn, "runs_table": table,
                 "queue_box": queue_box, "queue_view": queue_list, "queue_pick": queue_pick, "run_select": run_select,
                 "plot_colors": gr.State({})}  # the redrawn plots' colours, sent after their data (plot_colors)
        live_outputs = {name: shown[name] for names in PART_OUTPUTS.values() for name in names}
        live_inputs = [run_select, group_step, probe_pick, action_run, token_mode, moved_parts]

        listed = [run_select, table, compare, action_run]

        def then_hint(event):
            """After `event` has listed the runs: the panel's empty state."""
            event.then(runs_hint, None, runs_empty, show_progress="hidden", api_visibility="private")

        def then_refresh(event):
            """After `event` (a run started, resumed or deleted): the runs list, then the panel's empty state."""
            then_hint(event.then(refresh_runs, run_select, listed))

        source.change(lambda s: (gr.Group(visible=SOURCES[s] == "file"), gr.Group(visible=SOURCES[s] == "hub")),
                      source, [file_box, hub_box])
        upload.upload(store_upload, upload, [stored_path, prompt_col, answer_col, upload_msg])
        # The box shows when asked for (its progress runs inside it), then fills.
        preview_btn.click(lambda: gr.Code(visible=True), None, preview, queue=False, api_visibility="private").then(
            preview_dataset, None, preview, inputs_kwargs=form, concurrency_id="model", concurrency_limit=1)
        preset_outputs = {key: parts[key] for key in form_keys() if key != "path"}
        preset.change(keyed(lambda name, custom: fill_preset(name, allow_custom, custom), preset_outputs),
                      [preset, model_custom], list(preset_outputs.values()))
        check_btn.click(run_preflight, allow, message, inputs_kwargs=form, concurrency_id="model",
                        concurrency_limit=1)
        scan_btn.click(make_scanner(ctx.cache), [allow, scan_prompts], [scan_view, kept_prompts], inputs_kwargs=form,
                       concurrency_id="model", concurrency_limit=1, api_name="learnability_scan")
        cmd_btn.click(lambda: gr.Code(visible=True), None, command, queue=False, api_visibility="private").then(
            show_command, [allow, nproc, run_name], command, inputs_kwargs=form)
        then_refresh(start_btn.click(start_training, [allow, nproc, run_name], [run_select, message],
                                     inputs_kwargs=form, concurrency_limit=1, concurrency_id="start"))
        then_refresh(queue_btn.click(queue_training, [allow, nproc, run_name], [run_select, message],
                                     inputs_kwargs=form, concurrency_limit=1, concurrency_id="start",
                                     api_name="queue_training"))
        unqueue_btn.click(remove_from_queue, [queue_pick, ops], message, api_name="remove_from_queue")
        loaded = {**{key: parts[key] for key in form_keys()}, "run_name": run_name, "message": message}
        load_queued_btn.click(keyed(load_queued, loaded), [queue_pick, allow], list(loaded.values()),
                              api_name="load_queued")
        loaded_run = {**loaded, "message": action_msg}
        load_run_btn.click(keyed(load_run_settings, loaded_run), [action_run, allow], list(loaded_run.values()),
                           api_name="load_run_settings")
        stage_btn.click(keyed(next_stage_settings, loaded_run), [action_run, allow], list(loaded_run.values()),
                        api_name="next_stage_settings")
        then_refresh(sweep_btn.click(queue_sweep, [allow, nproc, run_name, sweep_setting, sweep_values,
                                                   sweep_setting2, sweep_values2],
                                     [run_select, message], inputs_kwargs=form, concurrency_limit=1,
                                     concurrency_id="start", api_name="queue_sweep"))
        stop_btn.click(stop_training, [run_select, ops], stop_message)
        # A step picked in the group inspector redraws the groups. Through the API (/refresh) it is the live view's
        # Refresh, every part unless told which.
        group_step.release(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                           js=GROUPS_ONLY_JS, show_progress="hidden", api_name="refresh")
        token_mode.change(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                          js=GROUPS_ONLY_JS, show_progress="hidden", api_visibility="private")
        probe_pick.input(picked_probes, [run_select, probe_pick], probes_panel, show_progress="hidden")
        run_select.change(lambda: "latest", None, probe_pick)
        refreshed = refresh_btn.click(refresh_runs, run_select, listed)
        then_hint(refreshed)
        compare.change(compare_settings, compare, compared, show_progress="hidden", api_visibility="private")
        # Refresh list draws the ticked runs again too: one still training has new steps and probes since its tick.
        for changed in (compare.change, answer_source.change, refreshed.then):
            changed(compare_answers, [compare, answer_pick, answer_source], [answer_pick, answers],
                    show_progress="hidden", api_visibility="private")
        answer_pick.input(picked_answers, [compare, answer_pick, answer_source], answers, show_progress="hidden",
                          api_visibility="private")
        # The ticked runs' rewards join the curves; a reward curve none of them has goes back to the default (its
        # change then redraws the overlay).
        compare.change(overlay_choices, [compare, compare_curve], compare_curve, show_progress="hidden",
                       api_visibility="private")
        # The overlay in three events: its titles, its data, then its colour per run (see compare_runs).
        overlay_map = gr.State({})
        for changed in (compare.change, compare_curve.change):
            changed(overlay_labels, compare_curve, compare_plot, trigger_mode="always_last", show_progress="hidden",
                    api_visibility="private").then(
                compare_runs, [compare, compare_curve], [compare_plot, overlay_map], api_visibility="private").then(
                overlay_colors, overlay_map, compare_plot, show_progress="hidden", api_visibility="private")
        refreshed.then(compare_runs, [compare, compare_curve], [compare_plot, overlay_map], show_progress="hidden",
                       api_visibility="private").then(
            overlay_colors, overlay_map, compare_plot, show_progress="hidden", api_visibility="private")
        then_refresh(resume_btn.click(resume_training, [action_run, allow, ops, resume_steps],
                                      [run_select, action_msg]))
        # The evaluation is a runner job: the click returns at once; its files' changes show its progress and result.
        eval_btn.click(evaluate_run, [action_run, ops, eval_prompts], action_msg, api_name="evaluate_run").then(
            eval_view, [action_run], eval_box, show_progress="hidden")
        eval_stop_btn.click(stop_evaluation, [action_run, ops], action_msg, api_name="stop_evaluation")
        push_stop_btn.click(stop_push, [action_run, ops], action_msg, api_name="stop_push")
        comparison_btn.click(comparison_download, compare, [comparison_file, comparison_msg],
                             api_visibility="private")
        compare.change(lambda: (gr.File(visible=False), ""), None, [comparison_file, comparison_msg],
                       show_progress="hidden", api_visibility="private")  # the file shown was of other runs
        metrics_btn.click(metrics_download, action_run, [metrics_file, action_msg], api_visibility="private")
        report_btn.click(report_download, action_run, [report_file, action_msg], api_visibility="private")
        action_run.change(lambda: (gr.File(visible=False),) * 2, None, [metrics_file, report_file],
                          show_progress="hidden", api_visibility="private")  # the files shown were another run's
        deleted = delete_btn.click(delete_run, [action_run, confirm, with_exports, ops],
                                   [action_msg, confirm, with_exports])
        then_refresh(deleted)
        # The exports folder is read when opened, and again after a delete, which may have kept or taken files.
        for event in (exports_fold.expand, deleted.then):
            event(exports_view, None, [exports_md, orphans_btn], show_progress="hidden", api_visibility="private")
        orphans_btn.click(remove_orphan_exports, ops, [exports_md, orphans_btn], api_name="remove_orphan_exports")
        live_plots = {name: shown[name] for name in PLOTS}
        live_refresh.click(keyed(live_view, live_outputs), live_inputs, list(live_outputs.values()),
                           js=watch.take_moved_js("live-refresh", len(live_inputs)), show_progress="hidden",
                           trigger_mode="always_last", api_visibility="private")
        # The colours follow in a second event only when they changed (a series appeared or went, or another set of
        # plots was redrawn): each event costs the page a pass over every component that has shown a status.
        shown["plot_colors"].change(keyed(plot_colors, live_plots), shown["plot_colors"], list(live_plots.values()),
                                    show_progress="hidden", api_visibility="private")
        # The run header and the queue go on following while the tab is out of sight, through an event that names
        # their outputs alone: the page's title says how the run stands, and moves on to the run the queue starts.
        header_outputs = {name: shown[name] for part in BACKGROUND for name in PART_OUTPUTS[part]}
        header_refresh.click(keyed(run_header, header_outputs), live_inputs, list(header_outputs.values()),
                             js=watch.take_moved_js("header-refresh", len(live_inputs)), show_progress="hidden",
                             trigger_mode="always_last", api_visibility="private")
        follow_runs = watch.follow("progress", "live-refresh", tuple(PART_OUTPUTS), background=BACKGROUND,
                                   background_button="header-refresh")
        follow_steering = steer_panel.wire(steer, run_select, allow, ops)
    return Tab(loads=(PageLoad(refresh_runs, [run_select], listed),
                      PageLoad(runs_hint, (), [runs_empty])),
               scripts=(CLOSE_SETTINGS_JS, charts.STEP_TICKS_JS, clock.CLOCK_JS, follow_runs, follow_steering,
                        page_title.title_js()))
