"""The training queue from a terminal: see the line, add a run or a sweep of one setting to it, take a run out, or
keep the line going while the app is not running. It is the same line as the Train tab's (runs/.queue.json): a run
added here shows there, and either one starts it when the machine is free.

  python -m pipeline.queue                                    # the line, and the runs it started last
  python -m pipeline.queue add --name "lr 3e-4" --set learning_rate=3e-4
  python -m pipeline.queue add --like RUN --sweep learning_rate=1e-4,3e-4,1e-3
  python -m pipeline.queue add --sweep learning_rate=1e-4,1e-3 --sweep beta=0,0.04   # a grid: 4 runs
  python -m pipeline.queue add --preset "Arithmetic: correctness + format" --set max_steps=20
  python -m pipeline.queue add --after RUN --set rewards='[...]'   # a next stage, from the model RUN ended with
  python -m pipeline.queue remove lr-3e-4                     # by name or id
  python -m pipeline.queue keep --until-empty                 # start each run when the one before it ends

A run's settings start from the defaults (the Quick CPU demo), or from one of a preset, a config.json (`--config`,
a short diff of the defaults as a run folder holds it) or a run on disk (`--like`); `--set` then changes single
settings. Each run is checked as Start checks it before anything is queued.
"""

# No torch import: the checks are the runner's, and the runs start as their own processes.

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from pipeline import runner
from pipeline.run_folder import run_files, run_queue, runs
from pipeline.setup.config import ConfigError, DatasetSpec, RunConfig
from pipeline.setup.presets import PRESETS, apply_preset
from pipeline.setup.sweep import grid

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _typed(kind: str, key: str, text: str) -> Any:
    """`text` as the setting's type: a number, a yes/no, a string, or JSON for a list or an object.

    >>> _typed("float", "learning_rate", "3e-4"), _typed("int", "max_steps", "20"), _typed("bool", "x", "off")
    (0.0003, 20, False)
    >>> _typed("int", "max_steps", "2.5")
    Traceback (most recent call last):
    ...
    pipeline.setup.config.ConfigError: max_steps takes a whole number: '2.5' is not one.
    """
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise ConfigError(f"{key} takes a {'whole ' if kind == 'int' else ''}number: '{text}' is not one.") from None
    if kind == "bool":
        if text.lower() not in TRUE + FALSE:
            raise ConfigError(f"{key} takes true or false: '{text}' is neither.")
        return text.lower() in TRUE
    if kind == "str":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(f"{key} takes JSON (a list or an object): '{text}' is not.") from None


def with_settings(cfg: RunConfig, pairs: list[str]) -> RunConfig:
    """`cfg` with each NAME=VALUE of `--set` applied (dataset.FIELD=VALUE for the prompts' fields); ConfigError names
    a setting that does not exist, with the ones that do.

    >>> c = with_settings(RunConfig(), ["learning_rate=3e-4", "dataset.source=arithmetic", "max_steps=20"])
    >>> c.learning_rate, c.dataset.source, c.max_steps
    (0.0003, 'arithmetic', 20)
    """
    fields = {f.name: str(f.type) for f in dataclasses.fields(RunConfig)}
    data_fields = {f.name: str(f.type) for f in dataclasses.fields(DatasetSpec)}
    changes: dict[str, Any] = {}
    dataset: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set takes NAME=VALUE, such as learning_rate=3e-4 (got {pair!r}).")
        if key.startswith("dataset."):
            name = key.removeprefix("dataset.")
            if name not in data_fields:
                raise ConfigError(f"Unknown dataset setting '{name}'. Valid: {', '.join(sorted(data_fields))}.")
            dataset[name] = _typed(data_fields[name], key, text.strip())
        elif key in fields:
            changes[key] = _typed(fields[key], key, text.strip())
        else:
            raise ConfigError(f"Unknown setting '{key}'. Valid: {', '.join(sorted(fields))}, or dataset.FIELD.")
    data = {**cfg.to_dict(), **changes}
    if dataset:
        data["dataset"] = {**data["dataset"], **dataset}
    return RunConfig.from_dict(data)  # lists and objects (rewards, dataset) typed as a config file's are


def _run_dir(run: str) -> Path:
    """A run on disk, named by its folder's path or name, or by its run name (the newest run with that name:
    "lr-3e-4" names 20261128-101500-lr-3e-4)."""
    path = Path(run).expanduser()
    if path.is_dir():
        run_dir = path.resolve()
    else:
        named = [d for d in runs.iter_run_dirs() if d.name == run or d.name.endswith(f"-{run}")]
        run_dir = max(named, key=lambda d: d.name) if named else runs.runs_dir() / run
    if not (run_dir / run_files.CONFIG).is_file():
        raise ConfigError(f"No run '{run}' with a {run_files.CONFIG} here (runs are in {runs.runs_dir()}).")
    return run_dir


def _run_config(run: str) -> RunConfig:
    """The settings of a run on disk (named as `_run_dir` takes it)."""
    return RunConfig.load(_run_dir(run) / run_files.CONFIG)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, RunConfig]]:
    """The (run name, settings) pairs `add` queues: one, one per value of `--sweep`, or one per pair of values of
    two."""
    cfg = RunConfig()
    if args.preset:
        cfg = apply_preset(cfg, args.preset)
    if args.config:
        path = Path(args.config).expanduser()
        if not path.is_file():
            raise ConfigError(f"No config file at {path}.")
        try:
            diff = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(diff, dict):
            raise ConfigError(f"{path} must hold a JSON object of settings, such as {{\"max_steps\": 20}}.")
        cfg = RunConfig.from_dict({**cfg.to_dict(), **diff})
    if args.like:
        cfg = _run_config(args.like)
    if args.after:  # a next stage: the model the run ended with, and its settings unless others were named
        earlier = _run_dir(args.after)
        if not (args.preset or args.config or args.like):
            cfg = RunConfig.load(earlier / run_files.CONFIG)
        cfg = dataclasses.replace(cfg, model=str(earlier / run_files.MERGED))
    cfg = with_settings(cfg, args.set)
    name = (args.name or "").strip()
    if not args.sweep:
        return [(name, cfg)]
    axes = []
    for one in args.sweep:  # a second --sweep makes a grid: every value of one with every value of the other
        setting, sep, values = one.partition("=")
        if not sep:
            raise ConfigError(f"--sweep takes NAME=VALUE,VALUE..., such as learning_rate=1e-4,3e-4 (got {one!r}).")
        axes.append((setting.strip(), values))
    if len(axes) > 2:
        raise ConfigError("At most two --sweep: a grid of two settings.")
    return grid(cfg, axes, name, allow_custom_rewards=args.allow_custom_rewards)


def add(args: argparse.Namespace) -> str:
    planned = planned_runs(args)
    # The model, the prompts and the process count are the same for every run of a sweep: checked once.
    _, processes = runner.training_request(planned[0][1], None, args.nproc)
    pairs = [(runs.run_label(name, runner.default_label(cfg)), cfg) for name, cfg in planned]
    entries, started = runner.queue_trainings(pairs, nproc=processes, allow_custom_rewards=args.allow_custom_rewards)
    names = ", ".join(e.label for e in entries)
    if started is not None:
        rest = "" if len(entries) == 1 else (" The rest start one at a time after it, by the app while it runs, or "
                                             "by `python -m pipeline.queue keep`.")
        return f"Queued {names}. The machine was free: {started.name} started now.{rest}"
    busy = runner.busy_run()
    after = f" after {busy[0].name}" if busy else ""
    return (f"Queued {names}: {'they start' if len(entries) > 1 else 'it starts'} one at a time{after}, by the app "
            "while it runs, or by `python -m pipeline.queue keep`.")


def _entry(key: str) -> run_queue.Waiting:
    """The queued run named `key` (its id, or its name when only one has it)."""
    waiting = run_queue.read().waiting
    found = [w for w in waiting if w.id == key] or [w for w in waiting if w.label == key]
    if not found:
        raise ConfigError(f"No queued run '{key}': `python -m pipeline.queue` lists the line with ids.")
    if len(found) > 1:
        raise ConfigError(f"{len(found)} queued runs are named '{key}': remove one by its id "
                          f"({', '.join(w.id for w in found)}).")
    return found[0]


def listing() -> str:
    """The line as text: each run's place, name, settings in short, when it was added and its id."""
    queue = run_queue.read()
    busy = runner.busy_run()
    lines = [f"Training now: {busy[0].name}" if busy else "Nothing trains now."]
    if not queue.waiting:
        lines.append("The queue is empty.")
    varying = queue.varying()
    for entry in queue.waiting:
        place = queue.position(entry.id)
        who = f", queued by {entry.owner}" if entry.owner else ""
        lines.append(f"{str(place) + '.' if place else 'x '} {entry.label}  ({entry.summary(varying)}; added "
                     f"{time.strftime('%H:%M', time.localtime(entry.queued_at))}{who}; id {entry.id})")
        if entry.error:
            lines.append(f"   could not start: {entry.error}")
    for record in queue.started[-3:]:
        lines.append(f"Started from the queue: {record.get('run')} "
                     f"at {time.strftime('%H:%M', time.localtime(float(record.get('at') or 0)))}")
    return "\n".join(lines)


def keep(allow_custom_rewards: bool, until_empty: bool, every_s: float = runner.QUEUE_CHECK_S) -> None:
    """Start the line's runs one after another, as the app does, until Ctrl-C (or, with `until_empty`, until
    nothing waits and nothing trains)."""
    print(f"Keeping the queue of {runs.runs_dir()}: each run starts when the one before it ends. Ctrl-C stops "
          "keeping it (a run that trains goes on).", flush=True)
    seen = {record.get("run") for record in run_queue.read().started}
    while True:
        runner.start_next(allow_custom_rewards)
        queue = run_queue.read()
        for record in queue.started:  # this keeper's starts, and the app's if it runs too
            if record.get("run") not in seen:
                seen.add(record.get("run"))
                print(f"Started {record.get('run')}", flush=True)
        if until_empty and queue.ready() is None and runner.busy_run() is None:
            print("The queue is empty and nothing trains.", flush=True)
            return
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.queue", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("list", help="The line (the default).")
    adding = commands.add_parser("add", help="Add a run, or a sweep of one setting, to the end of the line.")
    adding.add_argument("--name", default="", help="The run's name (a sweep adds each value to it).")
    start_from = adding.add_mutually_exclusive_group()
    start_from.add_argument("--preset", choices=list(PRESETS), metavar="PRESET",
                            help=f"Start from a preset: {'; '.join(PRESETS)}.")
    start_from.add_argument("--config", help="A config.json to start from (a short diff of the defaults).")
    start_from.add_argument("--like", metavar="RUN", help="Start from a run's settings (its run name, folder name "
                            "or path).")
    adding.add_argument("--after", metavar="RUN", help="A next stage: train from the model RUN ended with, with "
                        "RUN's settings unless --preset, --config or --like names others.")
    adding.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="Change one setting, such as learning_rate=3e-4 or dataset.source=arithmetic "
                             "(repeatable).")
    adding.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="Queue the run once per value of one number setting, such as learning_rate=1e-4,3e-4; "
                             "a second --sweep queues every pair of values (a grid).")
    adding.add_argument("--nproc", type=int, default=1, help="Processes (one per GPU) for each run.")
    adding.add_argument("--allow-custom-rewards", action="store_true",
                        help="Allow custom_python reward code (it runs on this machine).")
    removing = commands.add_parser("remove", help="Take a run out of the line, by its name or id.")
    removing.add_argument("run", help="The queued run's name or id, as the list shows it.")
    keeping = commands.add_parser("keep", help="Start the queued runs one after another while the app is not "
                                  "running (the app does it itself when it runs).")
    keeping.add_argument("--until-empty", action="store_true", help="Exit once nothing waits and nothing trains.")
    keeping.add_argument("--allow-custom-rewards", action="store_true",
                         help="Start queued runs with custom_python reward code.")
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            print(add(args))
        elif args.command == "remove":
            entry = runner.unqueue(_entry(args.run).id)
            print(f"Removed {entry.label} from the queue.")
        elif args.command == "keep":
            keep(args.allow_custom_rewards, args.until_empty)
        else:
            print(listing())
    except (ConfigError, runner.RunnerError, ValueError, OSError) as exc:
        print(f"Refused: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Stopped keeping the queue; what waits stays in it.", file=sys.stderr)
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
