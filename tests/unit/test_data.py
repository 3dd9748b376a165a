import json

import pytest

from pipeline.setup.config import DatasetSpec
from pipeline.setup.data import (
    DatasetError, arithmetic_problems, arithmetic_rows, check_prompt_budget, load_dataset_split, load_rows,
    split_rows, tldr_rows, TLDR_INSTRUCTION,
)


def test_tldr_is_bundled_and_chat_formatted():
    rows = tldr_rows()
    assert len(rows) >= 120
    assert len({r["prompt"][-1]["content"] for r in rows}) == len(rows)
    # The instruction sits in the user turn after the post (a 135M model follows a system prompt weakly)
    assert [m["role"] for m in rows[0]["prompt"]] == ["user"]
    assert rows[0]["prompt"][-1]["content"].endswith(TLDR_INSTRUCTION)
    assert rows[0]["prompt"][-1]["content"].startswith(rows[0]["source"])
    assert tldr_rows("Be brief.")[0]["prompt"][0] == {"role": "system", "content": "Be brief."}


def test_arithmetic_is_seeded_and_exact():
    problems = arithmetic_problems()
    assert problems == arithmetic_problems() and len(problems) == 400
    for question, answer in problems:
        assert question.startswith("Calculate ")
        expr = question.removeprefix("Calculate ").replace("×", "*")
        assert eval(expr) == answer  # noqa: S307 - our own generated arithmetic
    assert {q.split()[2] for q, _ in problems} == {"+", "-", "×"}
    # no problem twice (none both trained on and held out), and never the worked example's own
    assert len({q for q, _ in problems}) == len(problems) and "Calculate 12 + 7" not in dict(problems)
    assert all(r["answer"].isdigit() for r in arithmetic_rows())


def test_split_is_disjoint_and_seeded():
    rows = [{"id": i} for i in range(50)]
    a1, b1 = split_rows(rows, 0.2, seed=3)
    a2, b2 = split_rows(rows, 0.2, seed=3)
    assert (a1, b1) == (a2, b2) and len(b1) == 10
    assert not {r["id"] for r in a1} & {r["id"] for r in b1}


def _spec(path, **kw):
    return DatasetSpec(source="file", path=str(path), **kw)


def test_csv_with_prompt_and_answer(tmp_path):
    f = tmp_path / "q.csv"
    f.write_text("question,gold\nWhat is 2+2?,4\nCapital of France?,Paris\n", encoding="utf-8")
    rows = load_rows(_spec(f, prompt_column="question", answer_column="gold", system_prompt="Be brief."))
    assert rows[0] == {"prompt": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "What is 2+2?"}], "answer": "4"}


@pytest.mark.parametrize("name,text", [
    ("semicolons.csv", "question;gold\nWhat is 2+2?;4\n\"Capital; of France?\";Paris\n"),
    ("tabs.csv", "question\tgold\nWhat is 2+2?\t4\nCapital; of France?\tParis\n"),
    ("sheet.tsv", "question\tgold\nWhat is 2+2?\t4\nCapital; of France?\tParis\n"),
])
def test_csv_saved_with_semicolons_or_tabs_keeps_its_columns(tmp_path, name, text):
    """Spreadsheets in many locales save CSV with ';'; a header without commas tells which separator it is."""
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    rows = load_rows(_spec(f, prompt_column="question", answer_column="gold"))
    assert [(r["prompt"][0]["content"], r["answer"]) for r in rows] == [("What is 2+2?", "4"),
                                                                        ("Capital; of France?", "Paris")]


def test_jsonl_with_chat_messages(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}]}) + "\n")
    assert load_rows(_spec(f))[0]["prompt"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("content,name,message", [
    (b"", "empty.csv", "empty"),
    (b"text\n", "header_only.csv", "no data rows"),
    (b"other\nx\n", "wrong.csv", "no column 'prompt'. Columns found: other"),
    (b"prompt\n\xff\xfe\xfa\n", "latin.csv", "UTF-8"),
    (b'{"prompt": "a"}\n{"prompt": \n', "torn.jsonl", "line 2 is not valid JSON"),
    (b'["a"]\n', "list.jsonl", "line 1 is not a JSON object"),
    (b'{"prompt": {"role": "user", "content": "hi"}}\n', "one.jsonl", "the prompt is a JSON object"),
    (b"prompt\nfine\n\n\"\"\n", "blank.csv", "empty prompt"),
    (b"a,b", "data.xlsx", "unsupported file type"),
])
def test_bad_files_name_file_and_problem(tmp_path, content, name, message):
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DatasetError) as err:
        load_rows(_spec(f))
    assert name in str(err.value) and message in str(err.value)


def test_an_uploads_problems_name_the_file_as_uploaded(tmp_path):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    f = uploads / "0123abcd-my prompts.csv"
    f.write_bytes(b"prompt\nfine\n\"\"\n")
    with pytest.raises(DatasetError, match=r"^my prompts\.csv: 1 row\(s\) have an empty prompt"):
        load_rows(_spec(f))


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="nothere.csv: file not found"):
        load_rows(_spec(tmp_path / "nothere.csv"))


def test_no_file_or_a_folder_is_a_plain_dataset_error(tmp_path):
    """An upload that was refused leaves the path empty; the form must say so, not fail on reading '.'."""
    with pytest.raises(DatasetError, match=r"^No prompts file yet: upload a CSV"):
        load_rows(DatasetSpec(source="file", path=""))
    folder = tmp_path / "prompts"
    folder.mkdir()
    with pytest.raises(DatasetError, match=r"^prompts: a folder, not a file\."):
        load_rows(_spec(folder))


def test_prompt_budget(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "x" * n}]} for n in (10, 500)]
    count = lambda msgs: len(msgs[-1]["content"])  # noqa: E731 - stands in for a tokenizer
    check_prompt_budget(rows[:1], count, 100, "mine.csv")
    with pytest.raises(DatasetError, match="mine.csv: 1 prompt.*100-token budget.*500 tokens"):
        check_prompt_budget(rows, count, 100, "mine.csv")


def test_hub_dataset_offline_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(Exception, match="Can't reach the Hugging Face Hub.*bundled"):
        load_dataset_split(DatasetSpec(source="hub", hub_id="mlabonne/smoltldr"), seed=0)


def test_gsm8k_preset_fails_fast_and_plainly_offline(monkeypatch):
    """The GPU preset is online only: offline, its dataset and its model each say so within seconds."""
    import time

    from pipeline.setup.config import RunConfig
    from pipeline.setup.presets import apply_preset
    from pipeline.models.loading import ModelError, resolve_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-cache")  # a cached copy would (rightly) load offline
    cfg = apply_preset(RunConfig(), "GSM8K on GPU: Qwen2.5-0.5B-Instruct")
    start = time.time()
    with pytest.raises(DatasetError, match="Can't reach the Hugging Face Hub to fetch dataset 'openai/gsm8k' "
                                           r"\(offline mode is set.*bundled TL;DR or Arithmetic"):
        load_dataset_split(cfg.dataset, cfg.seed)
    with pytest.raises(ModelError, match="Can't reach the Hugging Face Hub to fetch model 'Qwen/Qwen2.5-0.5B"):
        resolve_model(cfg.model)
    assert time.time() - start < 5


def test_arithmetic_prompts_open_with_one_worked_example():
    rows = arithmetic_rows()
    first = rows[0]["prompt"]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]
    assert "<answer>" in first[0]["content"] and first[2]["content"].endswith("<answer>19</answer>")
    assert len({r["prompt"][-1]["content"] for r in rows}) > 300  # the last turn is the problem itself
    assert arithmetic_rows("Be terse.")[0]["prompt"][0]["content"] == "Be terse."


DEEP = "[" * 5000 + "]" * 5000  # thousands deep: Python's JSON parser gives up with RecursionError


@pytest.mark.parametrize("suffix, text", [(".json", DEEP), (".jsonl", '{"prompt": "hi"}\n{"x": ' + DEEP + "}\n")])
def test_deeply_nested_json_is_refused_with_a_message(tmp_path, suffix, text):
    """Every reader of an uploaded table: the prompts reader (and the Train tab's upload), the RAG tab's
    films reader, and the rewards table's parameters."""
    from pipeline.setup.config import ConfigError
    from retrieval.movies import MovieDataError, read_table as read_films
    from ui.form import rewards_from_rows
    from ui.train_form import store_upload

    path = tmp_path / f"deep{suffix}"
    path.write_text(text)
    with pytest.raises(DatasetError, match="nested too deeply"):
        load_rows(_spec(path))
    *_, message = store_upload(str(path))
    assert message.startswith("❌ deep") and "nested too deeply" in message, message
    if suffix == ".jsonl":
        with pytest.raises(MovieDataError, match="could not be read"):
            read_films(path)
    with pytest.raises(ConfigError, match="nested too deeply"):
        rewards_from_rows([[True, "length_target", 1.0, DEEP]])
