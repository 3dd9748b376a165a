"""Storytelling words a user types, and the words a plot summary uses for the same thing.

A screenwriter asks for "the protagonist turns out to be the bad guy"; a plot says "the twist reveals that
Harry ... committed the killings". The small embedder does not bridge the two, and a keyword search for
"protagonist" finds nothing. This table adds the plot-side words to the keyword leg of a search (never to
the embedded query), and the tab shows what was added. Entries are general craft terms, not film names.
"""

from __future__ import annotations

import re

# (phrases a user may write, words plots use). Phrases match whole words, case-insensitively.
GLOSSARY: tuple[tuple[tuple[str, ...], str], ...] = (
    (("protagonist", "main character", "lead character", "the hero"), "hero himself herself"),
    (("bad guy", "bad guys", "antagonist", "villain", "baddie"), "villain killer killings murderer murders"),
    (("turns out", "turned out", "twist", "all along", "secretly", "in fact", "the reveal"),
     "twist reveals revealed truth actually"),
    (("narrator", "unreliable"), "recounts story tells delusion"),
    (("imaginary", "own invention", "figment", "not real", "in his head", "in her head", "made up"),
     "imaginary hallucination hallucinations projection delusion"),
    (("dead all along", "was dead", "already dead", "a ghost", "ghost"), "ghost ghosts dead died"),
    (("time loop", "same day", "over and over", "relives", "reliving"), "loop again repeats wakes morning"),
    (("heist", "robbery", "break-in"), "heist robbery rob vault thieves crew"),
    (("mole", "traitor", "double agent", "informant", "snitch", "undercover"),
     "undercover informant traitor mole betrays"),
    (("doppelganger", "doppelgänger", "lookalike", "double", "clone", "clones"), "double doubles clone copy twin"),
    (("amnesia", "memory loss", "lost memory", "can't remember", "cannot remember"),
     "memory memories remember forget"),
    (("serial killer", "slasher"), "killer murders victims masked"),
    (("con man", "con artist", "conman", "grifter", "scam", "swindle"), "con swindle posing fake impostor"),
    (("robot", "android", "artificial intelligence", "ai", "computer"), "robot machine artificial computer"),
    (("dystopia", "dystopian", "totalitarian"), "totalitarian state police future"),
    (("revenge", "vengeance", "get even"), "revenge avenge vengeance"),
    (("kidnapping", "kidnapped", "abducted", "abduction"), "kidnap kidnapped abducted ransom"),
    (("courtroom", "trial", "jury", "lawyer"), "trial court jury lawyer testimony"),
    (("haunted", "haunting"), "haunted ghosts spirits house"),
    (("split personality", "multiple personalities", "alter ego"), "personality personalities alternate"),
)

_PATTERNS = [(re.compile(r"(?<!\w)(?:" + "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
                         + r")(?!\w)", re.IGNORECASE), words) for phrases, words in GLOSSARY]


def expand(query: str) -> tuple[str, list[str]]:
    """The query with the plot-side words of every craft term it uses appended, and those added words.

    >>> " ".join(expand("the protagonist turns out to be the bad guy")[1])
    'hero himself herself villain killer killings murderer murders twist reveals revealed truth actually'

    >>> expand("a shark terrorises a beach town")
    ('a shark terrorises a beach town', [])
    """
    added: list[str] = []
    lowered = set(query.lower().split())
    for pattern, words in _PATTERNS:
        if pattern.search(query):
            added.extend(w for w in words.split() if w not in added and w not in lowered)
    return (f"{query} {' '.join(added)}" if added else query), added
