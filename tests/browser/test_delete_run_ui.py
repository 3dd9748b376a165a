"""The Runs panel's files, in Debian chromium: a run's report downloads and opens as a page; the table shows a run's
size, and the delete says what it gave back; its exports go with it only when ticked."""

import pytest
from playwright.sync_api import expect

from pipeline.run_folder import runs
from pipeline.setup.config import RunConfig

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser]


def test_the_table_shows_a_runs_size_and_a_ticked_delete_takes_its_exports(page, app_url, studio_data):
    run_dir = runs.new_run_dir("delete-me")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=4).to_dict())
    runs.write_status(run_dir, "stopped", started_at=1.0, ended_at=2.0)
    (run_dir / "adapter").mkdir()
    (run_dir / "adapter" / "adapter_model.safetensors").write_bytes(b"\0" * 3 * 2**20)
    export = runs.data_dir() / "exports" / f"{run_dir.name}-adapter.zip"
    export.parent.mkdir(parents=True, exist_ok=True)
    export.write_bytes(b"\0" * 2**20)

    page.goto(app_url)
    # Gradio draws a table's rows as role="row" divs; its one <tr> is a hidden row it measures widths with.
    row = page.locator("#runs-table [role=row]", has_text=run_dir.name)
    expect(row).to_contain_text("3 MiB", timeout=30_000)
    panel = page.locator(".column", has=page.get_by_role("button", name="Resume")).last
    panel.get_by_label("Run", exact=True).click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    page.get_by_label("Yes, delete it").check()
    page.get_by_label("and its exports").check()
    page.get_by_role("button", name="Delete").click()
    expect(panel).to_contain_text(f"Deleted {run_dir.name} and the file exported from it: 4 MiB freed.",
                                  timeout=30_000)
    assert not run_dir.exists() and not export.exists()
    # Both ticks are cleared: the next delete is confirmed anew.
    expect(page.get_by_label("Yes, delete it")).not_to_be_checked()
    expect(page.get_by_label("and its exports")).not_to_be_checked()
    expect(page.locator("#runs-table")).not_to_contain_text(run_dir.name)
    panel.screenshot(path=str(ARTIFACTS / "runs-delete.png"))


def test_files_kept_from_a_deleted_run_are_listed_and_removed_from_the_exports_folder(page, app_url, studio_data):
    runs.remove_orphan_exports()  # another test's kept file would change the counts this one reads
    run_dir = runs.new_run_dir("keep-its-zip")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=4).to_dict())
    runs.write_status(run_dir, "stopped", started_at=1.0, ended_at=2.0)
    kept = runs.exports_dir() / f"{run_dir.name}-merged.zip"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(b"\0" * 2 * 2**20)

    page.goto(app_url)
    panel = page.locator(".column", has=page.get_by_role("button", name="Resume")).last
    panel.get_by_label("Run", exact=True).click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    page.get_by_label("Yes, delete it").check()
    page.get_by_role("button", name="Delete").click()  # "and its exports" left unticked: the zip stays
    expect(panel).to_contain_text("The file exported from it (2 MiB) stays in the exports folder", timeout=30_000)
    page.locator("#exports-fold").get_by_text("Exports folder").click()
    view = page.locator("#exports-view")
    expect(view).to_contain_text(f"Kept from deleted runs: 1 file, 2 MiB ({kept.name})", timeout=30_000)
    page.locator("#orphans-btn").click()
    expect(view).to_contain_text("Removed 1 file from deleted runs: 2 MiB freed.", timeout=30_000)
    expect(page.locator("#orphans-btn")).to_be_hidden()
    assert not kept.exists()
    page.locator("#exports-fold").screenshot(path=str(ARTIFACTS / "runs-exports-folder.png"))


def test_a_runs_report_downloads_from_the_runs_panel_and_opens_as_one_page(page, app_url, studio_data, browser):
    run_dir = runs.new_run_dir("report-me")
    runs.write_json_atomic(run_dir / "config.json", RunConfig(max_steps=2).to_dict())
    runs.write_status(run_dir, "stopped", started_at=1.0, ended_at=60.0)
    for step in (1, 2):
        runs.append_jsonl(run_dir / "metrics.jsonl", {"step": step, "reward": 100.0 + 20 * step, "kl": 0.01 * step,
                                                      "rewards": {"length_target": {"mean": -50.0 + step}}})
    for step, answer in ((0, "A long answer from the base model."), (2, "A short answer.")):
        runs.append_jsonl(run_dir / "evals.jsonl", {"step": step, "reward": 90.0 + step, "samples": [
            {"prompt": "Summarize: a post.", "completion": answer, "total": 90.0 + step}]})

    page.goto(app_url)
    panel = page.locator(".column", has=page.get_by_role("button", name="Resume")).last
    panel.get_by_label("Run", exact=True).click()
    page.get_by_role("option", name=run_dir.name, exact=True).click()
    page.locator("#report-btn").click()
    expect(panel).to_contain_text(f"{run_dir.name}-report.html: one page", timeout=30_000)
    expect(page.locator("#report-file")).to_contain_text(f"{run_dir.name}-report")  # the name, then its size
    report = browser.new_page()
    report.goto((runs.exports_dir() / f"{run_dir.name}-report.html").as_uri())
    expect(report.locator("h1")).to_have_text(run_dir.name)
    expect(report.locator("svg")).to_have_count(3)  # train reward, held-out reward, KL
    # The tuned model's held-out answer, with the words it changed from the base model's marked.
    expect(report.locator(".gs-probe-text ins").first).to_have_text("short")
    report.screenshot(path=str(ARTIFACTS / "run-report.png"), full_page=True)
    report.close()
