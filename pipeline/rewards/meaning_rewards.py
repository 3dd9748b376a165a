"""Rewards on meaning: how close a summary stays to the post it summarises (sentence embeddings)."""

from __future__ import annotations

from pipeline.rewards.errors import RewardFunctionError
from pipeline.rewards.text import completion_text


class PostSimilarity:
    """How close the answer's meaning is to the text it summarises: the cosine of their sentence
    embeddings (the bundled all-MiniLM-L6-v2), divided by `full_at` and capped at 1, times `scale`.
    An answer that talks about something else ("The post is too long.") scores near 0 however short
    it is. A one-sentence summary rarely gets closer to its post than a cosine of about 0.6 without
    copying it, so `full_at` 0.6 gives full marks there and makes the maximum reachable.

    Needs the summarised text in a `source` column (the bundled TL;DR rows carry their post there).
    The embedder loads on first use, in the process that trains.
    """

    needs_source = True

    def __init__(self, scale: float = 100.0, full_at: float = 0.6, name: str = "post_similarity"):
        if not 0 < full_at <= 1:
            raise ValueError("full_at must be in (0, 1]")
        self.scale, self.full_at, self.__name__ = float(scale), float(full_at), name
        self.max_value = max(self.scale, 0.0)

    def __call__(self, completions, source=None, **kwargs) -> list[float]:
        if source is None:
            raise RewardFunctionError(f"Reward '{self.__name__}' needs the summarised text in a 'source' column "
                                      "(the bundled TL;DR prompts have one).")
        sources = [source] * len(completions) if isinstance(source, str) else list(source)
        texts = [completion_text(c).strip() for c in completions]
        model = sentence_embedder()
        unique = list(dict.fromkeys(sources))
        post_vecs = dict(zip(unique, model.encode(unique, normalize_embeddings=True)))
        answer_vecs = model.encode([t or " " for t in texts], normalize_embeddings=True)
        return [0.0 if not t else self.scale * min(1.0, max(0.0, float((a * post_vecs[s]).sum())) / self.full_at)
                for t, a, s in zip(texts, answer_vecs, sources)]


_EMBEDDER: list = []


def sentence_embedder():
    """The bundled sentence embedder, loaded once per process."""
    if not _EMBEDDER:
        from sentence_transformers import SentenceTransformer

        from pipeline.models.loading import bundled_embedder_dir

        _EMBEDDER.append(SentenceTransformer(str(bundled_embedder_dir()), device="cpu"))
    return _EMBEDDER[0]
