"""A run's size on disk, and what deleting it gives back: its exports go with it only when asked, and never another
run's whose name starts the same. (A refused delete leaves the exports too: tests/unit/test_run_owners.py.)"""

import os

import pytest

from pipeline.run_folder import disk, runs
from pipeline.setup.config import RunConfig


def new_run(label: str, payload: int = 0):
    run_dir = runs.new_run_dir(label)
    runs.write_json_atomic(run_dir / "config.json", RunConfig().to_dict())
    if payload:
        (run_dir / "checkpoint-1").mkdir()
        (run_dir / "checkpoint-1" / "adapter_model.safetensors").write_bytes(b"\0" * payload)
    return run_dir


def export_files(run_name: str, *suffixes: str):
    out = runs.data_dir() / "exports"
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for suffix in suffixes:
        path = out / f"{run_name}{suffix}"
        if suffix.endswith("-merged"):  # a checkpoint's merged folder
            path.mkdir()
            (path / "model.safetensors").write_bytes(b"\0" * 1000)
        else:
            path.write_bytes(b"\0" * 100)
        made.append(path)
    return made


def test_tree_bytes_counts_files_and_not_what_a_link_points_to(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.bin").write_bytes(b"\0" * 5000)
    (tmp_path / "b.txt").write_bytes(b"\0" * 7)
    big = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    big.mkdir()
    (big / "model.safetensors").write_bytes(b"\0" * 10**6)
    os.symlink(big, tmp_path / "merged")
    link = os.lstat(tmp_path / "merged").st_size
    assert disk.tree_bytes(tmp_path) == 5007 + link
    assert disk.tree_bytes(tmp_path / "b.txt") == 7 and disk.tree_bytes(tmp_path / "gone") == 0


def test_the_runs_table_shows_each_runs_size(studio_data):
    from ui import runs_panel

    run_dir = new_run("sized", payload=3 * 2**20)
    table = runs_panel.runs_table()
    row = table[table["run"] == run_dir.name].iloc[0]
    assert row["disk"] == "3 MiB"


def test_a_delete_keeps_the_exports_and_says_so_or_takes_them_when_asked(studio_data):
    from ui import runs_panel

    kept_run, taken_run = new_run("keep-exports", payload=2**20), new_run("take-exports", payload=2**20)
    kept = export_files(kept_run.name, "-merged.zip", "-Q8_0.gguf")
    taken = export_files(taken_run.name, "-adapter.zip", "-step1-merged", "-step1-F16.gguf", "-metrics.csv")
    # Another run whose name starts with this one's, and a file being written: neither is this run's export.
    others = export_files(f"{taken_run.name}-2", "-merged.zip") + [runs.data_dir() / "exports" /
                                                                   f".{taken_run.name}-F16.gguf.tmp"]
    others[-1].write_bytes(b"partial")

    message, *ticks = runs_panel.delete_run(kept_run.name, True)
    assert ticks == [False, False] and not kept_run.exists() and all(p.exists() for p in kept)
    assert message == (f"🗑 Deleted **{kept_run.name}**: 1 MiB freed. The 2 files exported from it (200 B) stay in "
                       f"the exports folder: `{kept_run.name}-Q8_0.gguf`, `{kept_run.name}-merged.zip`.")

    message, *ticks = runs_panel.delete_run(taken_run.name, True, True)
    assert ticks == [False, False]  # both cleared: the next delete is confirmed anew
    assert message == f"🗑 Deleted **{taken_run.name}** and the 4 files exported from it: 1 MiB freed."
    assert not taken_run.exists() and not any(p.exists() for p in taken)
    assert all(p.exists() for p in others)



def test_the_exports_folder_sorts_by_run_and_only_the_files_of_deleted_runs_are_removed(tmp_path, monkeypatch):
    """Exports kept when their run was deleted can be removed from the Runs panel. Only those: an export of a run
    on disk (even one whose name starts like the deleted run's), a half-written .tmp and a file put there by hand
    stay. Under a login only an operator may remove them, since whose they were is no longer known."""
    from pipeline.run_folder.owners import Actor
    from ui import runs_panel

    monkeypatch.setenv("GRPO_STUDIO_DATA", str(tmp_path))  # a folder of its own: this removes every orphan
    assert runs_panel.exports_view()[0] == runs_panel.EXPORTS_EMPTY
    here, gone = new_run("here"), new_run("gone")
    also_here = runs.runs_dir() / f"{gone.name}-2"  # a run of the same label started in the same second
    also_here.mkdir()
    runs.write_json_atomic(also_here / "config.json", RunConfig().to_dict())
    here_files = export_files(here.name, "-merged.zip", "-step2-merged")
    other_run_files = export_files(also_here.name, "-F16.gguf")
    orphans = export_files(gone.name, "-adapter.zip", "-Q8_0.gguf", "-metrics.csv")
    by_hand = export_files("notes", ".txt") + export_files(f".{gone.name}-F16.gguf", ".tmp")
    runs.delete_run(gone)  # its exports stay: now they are orphans

    found = runs.exports_on_disk()
    assert found.by_run[here.name] == here_files and sorted(found.orphans) == sorted(orphans)
    text, button = runs_panel.exports_view()
    assert "**Kept from deleted runs**: 3 files, 300 B" in text and f"| {here.name} | 2 | 1 KiB |" in text
    assert button.visible and button.value == "Remove the 3 files from deleted runs (300 B)"

    with pytest.raises(ValueError, match="only an operator"):
        runs.remove_orphan_exports(Actor("bob"))  # a user with a login who is not an operator
    assert all(p.exists() for p in orphans)
    text, button = runs_panel.remove_orphan_exports(operators=["carol"], request=type("R", (), {"username": "carol"}))
    assert text.startswith("🗑 Removed 3 files from deleted runs: 300 B freed.") and not button.visible
    assert not any(p.exists() for p in orphans)
    assert all(p.exists() for p in here_files + other_run_files + by_hand)
