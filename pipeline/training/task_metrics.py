"""Held-out task metrics that are not rewards: they say whether the model got better at the task,
not just at the numbers GRPO optimised (judge on held-out data; watch for reward hacking).

For TL;DR summaries the metric asks two things of an answer:
- grounded: the share of its content words that also occur in the post (a summary reuses the post's
  words; "You've already covered the main points" reuses almost none);
- on_topic: whether it shares at least two content words with the post at all (one, for an answer
  that has only one content word).
summary_score = grounded x on_topic, averaged over prompts. Pure Python.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

WORD = re.compile(r"[a-z][a-z'-]*")
STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being
below between both but by can can't could couldn't did didn't do does doesn't doing don't down during
each even ever every few for from further get gets got had hadn't has hasn't have haven't having he
he'd he'll he's her here here's hers herself him himself his how how's however i i'd i'll i'm i've if
in into is isn't it it's its itself just let's like made make makes many may me might more most much
must mustn't my myself no nor not now of off on once one only or other ought our ours ourselves out
over own really same say says said shan't she she'd she'll she's should shouldn't so some still such
than that that's the their theirs them themselves then there there's these they they'd they'll they're
they've thing things this those though through to too under until up upon us very was wasn't we we'd
we'll we're we've were weren't what what's when when's where where's which while who who's whom why
why's will with won't would wouldn't yet you you'd you'll you're you've your yours yourself yourselves
post summary tl dr tldr sentence short main point points here's sure
""".split())


def _stem(word: str) -> str:
    """A light suffix strip so 'lanes'/'lane' and 'voted'/'vote' count as the same word.

    >>> [_stem(w) for w in ["lanes", "lane", "voted", "vote", "parking", "cats", "class"]]
    ['lan', 'lan', 'vot', 'vot', 'park', 'cat', 'class']
    """
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """Stemmed words of three letters or more that are not stop words.

    >>> sorted(content_words("The council voted for new bike lanes."))
    ['bik', 'council', 'lan', 'new', 'vot']
    """
    words = (w.strip("'-") for w in WORD.findall(text.lower()))
    return {_stem(w) for w in words if len(w) >= 3 and w not in STOPWORDS}


def summary_scores(answer: str, post: str) -> dict[str, float]:
    """How well one answer sticks to its post.

    >>> summary_scores("Council approves bike lanes on Harper Street.",
    ...                "The council voted to add bike lanes along Harper Street.")
    {'grounded': 0.8333, 'on_topic': 1.0, 'summary_score': 0.8333}
    >>> summary_scores("You've already covered everything well.", "My roommate eats my leftovers.")
    {'grounded': 0.0, 'on_topic': 0.0, 'summary_score': 0.0}
    """
    said, source = content_words(answer), content_words(post)
    if not said:
        return {"grounded": 0.0, "on_topic": 0.0, "summary_score": 0.0}
    shared = said & source
    grounded = len(shared) / len(said)
    on_topic = 1.0 if len(shared) >= min(2, len(said)) else 0.0
    return {"grounded": round(grounded, 4), "on_topic": on_topic, "summary_score": round(grounded * on_topic, 4)}


def answer_parses(completion: str) -> bool:
    """Whether the answer gives a number inside <answer></answer> (the last such tag counts).

    >>> [answer_parses(t) for t in ["<think>2+2</think><answer> 4 </answer>", "<answer>four</answer>", "4",
    ...                             "<answer>4"]]
    [True, False, False, False]
    """
    from pipeline.rewards.text import ANSWER_TAG, parse_number

    tagged = ANSWER_TAG.findall(completion or "")
    return bool(tagged) and parse_number(tagged[-1]) is not None


def task_metrics(rows: list[dict], completions: list[str]) -> dict[str, Any] | None:
    """Mean task metrics over held-out rows, or None when the dataset has no task metric.

    TL;DR rows carry their post under "source". Movie question rows (an "answer" and "retrieved") get
    `movie_metrics`. Other rows with a reference "answer" get exact-number
    accuracy (numeric_tolerance's test, scored here whether or not the run used it as a reward) and
    format compliance: the share of answers with a number inside <answer></answer>.

    >>> task_metrics([{"source": "Bike lanes on Harper Street."}], ["Harper Street gets bike lanes."])
    {'kind': 'summary', 'grounded': 1.0, 'on_topic': 1.0, 'summary_score': 1.0, 'per_prompt': [1.0]}
    >>> m = task_metrics([{"answer": "14"}, {"answer": "3"}], ["<answer>14</answer>", "5"])
    >>> m["accuracy"], m["format_compliance"]
    (0.5, 0.5)
    >>> task_metrics([{"prompt": []}], ["x"]) is None
    True
    """
    if rows and all("source" in r for r in rows):
        scored = [summary_scores(c, r["source"]) for r, c in zip(rows, completions)]
        out: dict[str, Any] = {"kind": "summary"}
        for key in ("grounded", "on_topic", "summary_score"):
            out[key] = round(statistics.fmean(s[key] for s in scored), 4)
        out["per_prompt"] = [s["summary_score"] for s in scored]
        return out
    if rows and all("answer" in r and "retrieved" in r for r in rows):
        return movie_metrics(rows, completions)
    if rows and all("answer" in r for r in rows):
        from pipeline.rewards import NumericTolerance

        hits = NumericTolerance()(completions, answer=[r["answer"] for r in rows])
        formatted = [1.0 if answer_parses(c) else 0.0 for c in completions]
        return {"kind": "accuracy", "accuracy": round(statistics.fmean(hits), 4),
                "format_compliance": round(statistics.fmean(formatted), 4), "per_prompt": hits}
    return None


def movie_metrics(rows: list[dict], completions: list[str]) -> dict[str, Any]:
    """Movie questions: accuracy (the answer names the right film and no other it was given) beside
    retrieval recall (the share of questions whose film was among the retrieved plots at all: accuracy can't
    pass it, since a film the search missed can't be cited), format compliance (one film cited by number), and
    invented details (the share of answers that state a film number, title, name, year, genre or director the
    films given lack, as the RAG tab's check reads them).

    >>> films = "[1] Psycho (1960, Horror, dir. Alfred Hitchcock): A clerk steals. [2] Jaws (1975, Thriller, dir. S)"
    >>> rows = [{"answer": "Psycho", "candidates": ["Psycho", "Jaws"], "retrieved": True, "prompt": films},
    ...         {"answer": "Heat", "candidates": ["Psycho", "Jaws"], "retrieved": False, "prompt": films}]
    >>> m = movie_metrics(rows, ["Psycho [1]", "Heat (1995)"])
    >>> m["accuracy"], m["retrieval_recall"], m["format_compliance"], m["invented_details"], m["per_prompt"]
    (0.5, 0.5, 0.5, 0.5, [1.0, 0.0])
    """
    from pipeline.rewards import FilmCitation, FilmDetails, MovieTitle

    kwargs = {"answer": [r["answer"] for r in rows], "candidates": [r.get("candidates") for r in rows]}
    # A right title for a film the search missed came from the model's memory, not the plots: not counted.
    hits = [h if r["retrieved"] else 0.0 for h, r in zip(MovieTitle()(completions, **kwargs), rows)]
    cited = [1.0 if v == 1.0 else 0.0 for v in FilmCitation()(completions, **kwargs)]
    flagged = FilmDetails(penalty=True)(completions, prompts=[r.get("prompt") for r in rows])  # -1: invents
    invented = [1.0 if v else 0.0 for v in flagged]
    return {"kind": "movie", "accuracy": round(statistics.fmean(hits), 4),
            "retrieval_recall": round(statistics.fmean(1.0 if r["retrieved"] else 0.0 for r in rows), 4),
            "format_compliance": round(statistics.fmean(cited), 4),
            "invented_details": round(statistics.fmean(invented), 4), "per_prompt": hits}


def headline(metrics: dict[str, Any] | None) -> tuple[str, float] | None:
    """The one number to compare base and tuned on: (name, value)."""
    if not metrics:
        return None
    key = "summary_score" if metrics["kind"] == "summary" else "accuracy"
    return key, metrics[key]
