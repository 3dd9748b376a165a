"""Questions about the bundled films that describe a film without naming it, for the Movie questions
prompt set (assets/prompts/movies.jsonl, built by bench/movie_questions.py).

A question is one sentence of the film's plot, from the part of the plot the answer prompt shows, with the
film's title words and the plot's names taken out, and the film's year ("Which film from 1920 is this: a young
man recounts how a sinister showman arrived at the fair ..."). Pure Python: the retrieval that puts plots beside
each question is done once, offline, by the build script.
"""

from __future__ import annotations

import re

from pipeline.rewards.text import names_title, normalise_title

QUESTION_PREFIX = "Which film "
# The year gives the model a second clue it can check against the numbered list ("(1921, Comedy, ...)"): with it, the
# bundled model picks the right film more often before training, so GRPO's groups hold right and wrong answers to
# learn from (bench/results/learning-movies-trials-2026-11-25.txt).
# Plot characters per film and films per prompt: three films of 120 characters and the question stay near 250
# tokens, so a step costs about what a default-run step does on a CPU. The answer prompt is otherwise the
# RAG tab's own (retrieval/rag.py); the RAG tab answers like the training prompts when its top-k is 3 too.
PROMPT_PLOT_CHARS = 120
PROMPT_TOP_K = 3
MIN_WORDS = 8  # a question shorter than this (after the names are out) says too little to pick a film

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'A-Z])")
WORD = re.compile(r"[\w'’.-]+|[^\w\s]", re.UNICODE)
SMALL_WORDS = frozenset("""a an the of in on at to and or for from with by as is it its his her their our my your
no not into over under up out off i""".split())


def sentences(plot: str) -> list[str]:
    """The plot's sentences.

    >>> sentences("A clerk steals money. She flees to a motel! Who is Norman?")
    ['A clerk steals money.', 'She flees to a motel!', 'Who is Norman?']
    """
    return [s.strip() for s in SENTENCE_END.split(plot.strip()) if s.strip()]


def plot_names(plot: str) -> set[str]:
    """Capitalised words the plot uses inside a sentence (people, places, groups), lower-cased: names.

    >>> sorted(plot_names("A clerk named Marion steals money. Marion flees to Fairvale."))
    ['fairvale', 'marion']
    """
    names = set()
    for sentence in sentences(plot):
        for word in WORD.findall(sentence)[1:]:
            bare = word.strip(".'’-")
            if bare[:1].isupper() and bare != "I":
                names.add(bare.lower())
    return names


def _starts_with_name(sentence: str, plot: str) -> bool:
    """Whether the sentence opens with a name ("Henry Hill grows up ..."): a first word the plot never writes
    in lower case, followed by another capitalised word."""
    words = sentence.split()
    if len(words) < 2:
        return False
    first, second = words[0].strip(".,;:'’"), words[1].strip(".,;:'’")
    return (first[:1].isupper() and second[:1].isupper()
            and not re.search(r"\b" + re.escape(first.lower()) + r"\b", plot))


def _masked(sentence: str, hidden: set[str], first_is_name: bool = False, stems: tuple[str, ...] = ()) -> str:
    """The sentence with every hidden word out, and every word that starts with one of `stems` (the title's
    longer words: "witnesses" for Witness): a run of names becomes "someone", a hidden common word
    "something"."""
    out: list[str] = []
    if first_is_name:
        hidden = hidden | {sentence.split()[0].strip(".,;:'’").lower()}
    for word in sentence.split():
        core = word.strip(".,;:!?\"'’()")
        key = core.rstrip("'’s") if core.endswith(("'s", "’s")) else core
        if core and (key.lower() in hidden or core.lower() in hidden or normalise_title(core) in hidden
                     or core.lower().startswith(stems)):
            tail = word[len(word.rstrip(".,;:!?\"')")):]
            filler = "someone" if core[:1].isupper() else "something"
            if out and out[-1].rstrip(".,;:!?\"')") in ("someone", "something"):
                out[-1] = out[-1].rstrip(".,;:!?\"')") + tail
                continue
            out.append(filler + tail)
        else:
            out.append(word)
    text = " ".join(out)
    text = re.sub(r"\b(?:named|called) (?:someone|something)\b,?", "", text)
    return re.sub(r"\s+([,.;:!?])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def question_for(title: str, plot: str, director: str = "", plot_chars: int = PROMPT_PLOT_CHARS,
                 year: int | None = None) -> str | None:
    """A question describing the film without naming it: the sentence of the plot's shown part (its first
    `plot_chars` characters) that keeps the most words once the names are out. None when no sentence keeps
    `MIN_WORDS` words. With `year`, the question gives it ("Which film from 1960 is this: ...").

    >>> question_for("Psycho", "A clerk named Marion Crane steals money from her boss and flees to a remote "
    ...              "motel run by Norman Bates. Psycho things follow.")
    'Which film is this: a clerk steals money from her boss and flees to a remote motel run by someone.'
    >>> question_for("Psycho", "A clerk named Marion Crane steals money from her boss and flees.", year=1960)
    'Which film from 1960 is this: a clerk steals money from her boss and flees.'
    """
    hidden = plot_names(plot)
    hidden |= {normalise_title(w) for w in re.split(r"\s+", f"{title} {director}") if normalise_title(w)}
    hidden -= SMALL_WORDS
    stems = tuple(w for w in normalise_title(title).split() if len(w) >= 5)
    best, best_words = None, 0
    for sentence in sentences(plot):
        start = plot.find(sentence)
        if start + len(sentence) > plot_chars:  # keep the part the prompt shows, up to its last comma
            sentence = sentence[:max(plot_chars - start, 0)].rsplit(",", 1)[0] if "," in sentence[:max(
                plot_chars - start, 0)] else ""
            sentence = sentence.rstrip(" ,;:") + ("." if sentence else "")
        if not sentence:
            continue
        text = _masked(sentence, hidden, _starts_with_name(sentence, plot), stems)
        words = sum(1 for w in text.split() if w.strip(".,;:!?") not in ("someone", "something"))
        if words >= MIN_WORDS and words > best_words and not names_title(text, title):
            best, best_words = text, words
    if best is None:
        return None
    asked = f"from {year} is this: " if year else "is this: "
    return QUESTION_PREFIX + asked + best[:1].lower() + best[1:]
