"""What an answer states about films that the films it was given do not say.

A small model answering from retrieved plots often adds facts of its own: a year, a director, a title or a name it
remembers, a film number past the end of the list, or the right number with another film's details. Those are
checkable against the prompt the model saw: the RAG tab lists them under each answer, the Movie questions
evaluation counts the answers that have any, and the `film_details` reward pays for answers that have none. The
check is narrow on purpose: it reads film numbers, titles, names, years, genres and directors, and says nothing
about whether a plot was retold faithfully. Pure Python.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from pipeline.rewards.text import completion_text

YEAR_TEXT = r"(?:1[89]\d\d|20\d\d)"
CITATION = re.compile(r"\[(\d{1,3})\]")
YEAR = re.compile(rf"(?<![\d.,])({YEAR_TEXT})(?![\d.,]?\d)")
# A film's details in brackets, as the prompt writes them: "(1958, Thriller, dir. Alfred Hitchcock)". An answer cut
# off by its token limit may end inside them.
DETAILS = re.compile(rf"\(\s*({YEAR_TEXT})\b([^()\n]*)(?:\)|$)")
# What sits just before the details: "[2] Vertigo ", "[2] ", or a title with no number.
CITED_BEFORE = re.compile(r"\[(\d{1,3})\]\s*([^\[\]()\n]{0,80}?)\s*$")
# "directed by Alfred Hitchcock", "Director: Alfred Hitchcock", "dir. Stanley Donen and Gene Kelly" (one line).
DIRECTED = re.compile(r"\b(?i:directed[ \t]+by|dir\.|director)[ \t]*:?[ \t]+"
                      r"([A-Z][\w'’.-]*(?:[ \t]+(?:and[ \t]+)?[A-Z][\w'’.-]*){0,4})")
# A title the answer marks as one: "Vertigo", *Vertigo*, _Vertigo_, “Vertigo” (capital first, at most 80 characters;
# **bold** is emphasis, not a title).
MARKED_TITLE = re.compile(r"(?<![*_\w])[\"“*_]([A-Z0-9][^\"“”*_\n]{1,79}?)[\"”*_](?![*_\w])")
# Words a title may hold in lower case ("Gone with the Wind", "3:10 to Yuma").
TITLE_SMALL_WORDS = frozenset("a an the of in on at to and or for from with by under over into de la le du".split())
# A name: capitalised words, with the small words titles keep in lower case between them ("Strangers on a Train",
# "Guy Haines", "Winnie the Evil Twister").
_CAPITAL = r"(?:(?:[A-Z]|Jr|Sr|Dr|Mr|Mrs|Ms|St|Mt)\.|[A-Z][\w'’&-]*)"  # initials and titles keep their dot
_SMALL = "|".join(sorted(TITLE_SMALL_WORDS))
NAME = re.compile(rf"(?<![\w'’-])(?!I(?:['’]\w+)?(?![\w'’-]))"  # not "I", "I'd"
                  rf"{_CAPITAL}(?:[ \t]+(?:(?:{_SMALL})[ \t]+)*{_CAPITAL})*")
TRAILING_SMALL_WORDS = re.compile(rf"(?:[ \t]+(?:{_SMALL}))+$", re.IGNORECASE)  # "Stars Out Of" -> "Stars Out"
# Words that open a sentence of an answer without being names.
OPENERS = frozenset("""about according after all also although another answer as based because before both but
during each either every film films first given he her here here's his how however if it it's its just like many
maybe most movie movies my neither no none not one only other our perhaps question she since so some that their then
there these they this those though thus two unlike we what when where which while who why yes you""".split())
# Genres a film table commonly holds (the bundled films' sixteen among them): a genre the answer gives that no film
# given has is named as a genre, not as a name.
GENRES = frozenset(("action", "adventure", "animation", "biography", "comedy", "crime", "documentary", "drama",
                    "family", "fantasy", "film noir", "history", "horror", "musical", "mystery", "romance",
                    "science fiction", "sport", "thriller", "war", "western"))
# Nationalities and languages: written with a capital, but a claim about a film rather than a name in it ("a Japanese
# thriller"). One the films given do not mention is reported as such.
NATIONALITIES = frozenset("""african american arabic australian austrian belgian brazilian british canadian chinese
czech danish dutch egyptian english european finnish french german greek hindi hungarian indian irish israeli italian
japanese korean latin mexican norwegian persian polish portuguese russian scottish soviet spanish swedish swiss
turkish welsh""".split())
# What ends a sentence (or a list marker) before a word, closing quotes and brackets included: 'as "Vertigo." They'.
SENTENCE_START = re.compile(r"(?:^|[.!?:;\n\]\-–—•*]|\d[.)])[\"”’')]*\s*$")
CONTRACTION = re.compile(r"['’](?:s|re|ll|ve|d|m)$")  # "They're" is "they" to the list of openers
ARTICLE = re.compile(r"^(?:the|a|an) ")


class Film(Protocol):
    """What the check reads of a film given: a search hit in the RAG tab, a film read back from a prompt in a run."""

    title: str
    release_year: int
    genre: str
    director: str


@dataclass(frozen=True)
class GivenFilm:
    title: str
    release_year: int
    genre: str
    director: str


# A film as the answer prompt lists it: "[2] Vertigo (1958, Thriller, dir. Alfred Hitchcock): A detective ..."
PROMPT_FILM = re.compile(r"^\[(\d{1,3})\] (.+?) \((\d{4}), ([^,\n]*), dir\. ([^\n]*?)\):", re.MULTILINE)


def films_in_prompt(prompt: str) -> list[GivenFilm]:
    """The numbered films of an answer prompt (retrieval/rag.py writes them), in their order.

    >>> films_in_prompt("Films:\\n\\n[1] Psycho (1960, Horror, dir. Alfred Hitchcock): A clerk steals.\\n\\nWho?")
    [GivenFilm(title='Psycho', release_year=1960, genre='Horror', director='Alfred Hitchcock')]
    """
    found = {int(m.group(1)): GivenFilm(m.group(2), int(m.group(3)), m.group(4), m.group(5))
             for m in PROMPT_FILM.finditer(prompt)}
    return [found[n] for n in sorted(found)]


@dataclass(frozen=True)
class Unsupported:
    """One thing the answer says that the films given do not: what it wrote, what the films say, and where in the
    answer it is written (each place, as (start, end) character offsets)."""

    said: str
    why: str
    where: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    def markdown(self) -> str:
        return f"`{self.said}` ({self.why})"


def fold(text: str) -> str:
    """Lower case, with punctuation and runs of space as one space, and no leading article: for comparing names.

    >>> fold("The Cabinet of Dr. Caligari!"), fold("3:10  to Yuma")
    ('cabinet of dr caligari', '3 10 to yuma')
    """
    return ARTICLE.sub("", re.sub(r"[\W_]+", " ", str(text).lower()).strip())


def contains(source: str, phrase: str, cut: bool = False) -> bool:
    """Whether `phrase` appears in `source` as whole words, ignoring case and punctuation; with `cut` (the phrase
    ends an answer that hit its token limit), its last word may be the beginning of one.

    >>> contains("dir. Akira Kurosawa", "Akira Kuro"), contains("dir. Akira Kurosawa", "Akira Kuro", cut=True)
    (False, True)
    >>> contains("Akira Kurosawa", "kira", cut=True)
    False
    """
    words = re.sub(r"[\W_]+", " ", str(phrase).lower()).strip()
    text = " " + re.sub(r"[\W_]+", " ", str(source).lower()).strip() + " "
    return bool(words) and (" " + words + ("" if cut else " ")) in text


def starts(actual: str, claimed: str, cut: bool = False) -> bool:
    """Whether `claimed` is `actual`, ignoring case and punctuation; with `cut`, or its beginning.

    >>> starts("Robert Zemeckis", "Robert Zem", cut=True), starts("Robert Zemeckis", "Robert Zem")
    (True, False)
    """
    want = re.sub(r"[\W_]+", " ", claimed.lower()).strip()
    have = re.sub(r"[\W_]+", " ", actual.lower()).strip()
    return bool(want) and (have.startswith(want) if cut else have == want)


def title_before(text: str) -> tuple[str, int]:
    """The title at the end of `text` (just before a film's details) and where it starts: the trailing run of
    capitalised words and the small words titles keep in lower case, starting with a capital or a digit, and
    stopping at a word that ends a clause (",", ";", ":") or a film number.

    >>> title_before("The film is: The Shawshank Redemption "), title_before("I'd say 3:10 to Yuma")
    (('The Shawshank Redemption', 13), ('3:10 to Yuma', 8))
    >>> title_before("the answer is "), title_before("in 1999, then Dune"), title_before("1. Dune")
    (('', 14), ('Dune', 14), ('Dune', 3))
    """
    def capitalised(word: str) -> bool:
        bare = word.strip("\"'“”*_")
        return bare[:1].isupper() or bare[:1].isdigit()

    words = list(re.finditer(r"\S+", text))
    first = len(words)
    for index in range(len(words) - 1, -1, -1):
        word = words[index].group(0)
        titled = capitalised(word) or word.strip("\"'“”*_").lower() in TITLE_SMALL_WORDS
        numbered = re.fullmatch(r"\d{1,2}[.)]", word)  # a list's "1." or "2)"
        ends_line = index < len(words) - 1 and "\n" in text[words[index].end():words[index + 1].start()]
        if not titled or numbered or ends_line or word[:1] == "[" or (index < len(words) - 1 and word[-1:] in ",;:"):
            break
        first = index
    while first < len(words) and not capitalised(words[first].group(0)):
        first += 1
    if first >= len(words):
        return "", len(text)
    start = words[first].start()
    return text[start:].strip().strip("\"'“”*_,;:"), start


def is_title(written: str, title: str) -> bool:
    """Whether `written` is the film title `title`, or ends with it after words like "film" ("the film Psycho").

    >>> is_title("The film Psycho", "Psycho"), is_title("Psycho II", "Psycho")
    (True, False)
    """
    wanted, name = fold(written), fold(title)
    return bool(name) and (wanted == name or wanted.endswith(" " + name))


def hit_by_title(title: str, hits: Sequence[Film]) -> int | None:
    """1-based number of the film given whose title `title` is (`is_title`), else None."""
    return next((number for number, hit in enumerate(hits, 1) if is_title(title, hit.title)), None)


def details_of(hit: Film) -> str:
    return f"{hit.title} ({hit.release_year}, {hit.genre}, dir. {hit.director})"


def entry_problem(hit: Film, title: str, year: str, rest: str, cut: bool = False) -> bool:
    """Whether the details an answer gives for `hit` disagree with it: the title (when one is written), the year,
    the genre (the field after the year) and the director ("dir. ..."); with `cut` (the answer ends inside the
    details) the last of them may be cut short."""
    if title and fold(title) and not is_title(title, hit.title):
        return True
    if int(year) != hit.release_year:
        return True
    fields = [field.strip() for field in re.split(r"[,:;]", rest) if field.strip()]
    if fields and not fields[0].lower().startswith(("dir", "directed")) and not starts(hit.genre, fields[0], cut):
        return True
    director = re.search(r"\b(?:dir\.|directed\s+by)\s*([^,:;)]*)", rest)
    return bool(director and director.group(1).strip() and not starts(hit.director, director.group(1), cut))


def unsupported_name(name: str, source: str, opens_sentence: bool, cut: bool = False) -> str | None:
    """The part of a capitalised name in an answer that the films given do not have, or None. A name is in them as a
    whole, or each part of it around "and" / "or" is ("Psycho and Vertigo"). A name that opens a sentence may owe its
    first capital to that: alone it is let pass, and in front of a name ("Like Blade Runner") the rest is checked.

    >>> source = "[1] Psycho (1960): Marion Crane steals money. [2] Strangers on a Train (1951)"
    >>> [unsupported_name(n, source, False) for n in ("Marion Crane", "Strangers on a Train", "Psycho and Marion")]
    [None, None, None]
    >>> unsupported_name("Both Psycho", source, True), unsupported_name("Like Blade Runner", source, True)
    (None, 'Blade Runner')
    >>> unsupported_name("Thirteen Men in a Bedroom", source, False), unsupported_name("Norman Bates", source, True)
    ('Thirteen Men in a Bedroom', 'Norman Bates')
    """
    name = name.rstrip(".")
    words = name.split()
    if contains(source, name, cut):
        return None
    if len(words) == 1 and (CONTRACTION.sub("", name.lower()) in OPENERS or (name.isupper() and len(name) <= 3)):
        return None  # "Film", "Movie", "TV", "They're": ordinary words written with a capital
    if opens_sentence:
        if len(words) == 1 and name.lower() not in GENRES:  # "Genre: Thriller" is checked
            return None
        if not contains(source, words[0]) and words[0].lower() in OPENERS | TITLE_SMALL_WORDS:
            return unsupported_name(" ".join(words[1:]), source, False, cut)
    parts = [part for part in re.split(r"\s+(?:and|or)\s+", name) if part]
    if len(parts) > 1:
        return next((left for part in parts if (left := unsupported_name(part, source, False, cut))), None)
    return name


def name_reason(said: str, hits: Sequence[Film]) -> str:
    """Why a capitalised word or name the films given lack is reported: a genre, a nationality or language, or a
    name.

    >>> hits = [GivenFilm("Psycho", 1960, "Horror", "Alfred Hitchcock")]
    >>> [name_reason(said, hits) for said in ("Western", "Japanese", "Norman Bates")]
    ['no film given is in this genre', 'no film given mentions this', 'no film given has this name']
    """
    if said.lower() in GENRES or said.lower() in {hit.genre.lower() for hit in hits}:
        return "no film given is in this genre"
    if said.lower() in NATIONALITIES:
        return "no film given mentions this"
    return "no film given has this name"


def check_answer(answer: str, hits: Sequence[Film], source: str) -> list[Unsupported]:
    """What `answer` states that the films given (`hits`, shown to the model in `source`, the prompt it read with
    the numbered films and the question) do not support, in the order the answer says it.

    >>> hits = [GivenFilm("Psycho", 1960, "Horror", "Alfred Hitchcock"),
    ...         GivenFilm("Vertigo", 1958, "Thriller", "Alfred Hitchcock")]
    >>> source = ("[1] Psycho (1960, Horror, dir. Alfred Hitchcock): Marion steals money. "
    ...           "[2] Vertigo (1958, Thriller, dir. Alfred Hitchcock): A detective fears heights.")
    >>> answer = '[1] Vertigo (1958) and [3], directed by Steven Spielberg in 1975, like "Jaws".'
    >>> for item in check_answer(answer, hits, source):
    ...     print(item.said, "|", item.why)
    [1] Vertigo (1958) | [1] is Psycho (1960, Horror, dir. Alfred Hitchcock)
    [3] | only 2 films were given
    Steven Spielberg | no film given names this director
    1975 | no film given is from 1975, and no plot given mentions it
    Jaws | no film given has this title
    >>> check_answer("Film: [2] Vertigo (1958, Thriller, dir. Alfred Hit", hits, source)
    []
    >>> [item.why for item in check_answer("It is Jaws (1975, Thriller, dir. Steven Spielberg)", hits, source)]
    ['no film given has this title']
    """
    found: dict[str, tuple[str, list[tuple[int, int]]]] = {}  # what was said -> (why, where)
    answer_end = len(answer.rstrip())  # a phrase that reaches it may have been cut off by the token limit
    spans: list[tuple[int, int]] = []

    def add(start: int, end: int, said: str, why: str) -> None:
        if any(a <= start and end <= b for a, b in spans):
            return  # inside a film's details, already checked as a whole
        said = " ".join(said.split())
        found.setdefault(said, (why, []))[1].append((start, end))

    # A film's details, e.g. "[3] Forrest Gump (1994, Thriller, dir. Alfred Hitchcock)": checked against the film
    # it names (by number, else by title). Those spans are then not checked again word by word.
    for match in DETAILS.finditer(answer):
        before = answer[max(0, match.start() - 90):match.start()]
        offset = match.start() - len(before)
        cited = CITED_BEFORE.search(before)
        number = None
        if cited and title_before(cited.group(2))[0] == cited.group(2).strip():
            title, start = cited.group(2).strip(), offset + cited.start()
            number = int(cited.group(1))
            if not 1 <= number <= len(hits):
                number, start = None, offset + cited.start(2)  # the number is reported below as past the list
        else:
            title, at = title_before(before)
            start = offset + at
            number = hit_by_title(title, hits) if title else None
        if number is None:
            if title and not contains(source, title):
                add(start, match.end(), title, "no film given has this title")
                spans.append((start, match.end()))
            continue
        if entry_problem(hits[number - 1], title, match.group(1), match.group(2), cut=not match.group(0).endswith(")")):
            add(start, match.end(), answer[start:match.end()], f"[{number}] is {details_of(hits[number - 1])}")
        spans.append((start, match.end()))

    for match in CITATION.finditer(answer):
        number = int(match.group(1))
        if not 1 <= number <= len(hits):
            add(match.start(), match.end(), match.group(0),
                f"only {len(hits)} film{'s' if len(hits) != 1 else ''} were given" if hits else "no film was given")
    for match in DIRECTED.finditer(answer):
        name = match.group(1).rstrip(".")
        if not contains(source, name, cut=match.end(1) >= answer_end):
            add(match.start(1), match.end(1), name, "no film given names this director")
    for match in YEAR.finditer(answer):
        if match.group(1) not in source:
            add(match.start(), match.end(), match.group(1),
                f"no film given is from {match.group(1)}, and no plot given mentions it")
    for match in MARKED_TITLE.finditer(answer):
        title = match.group(1).strip()
        if len(title.split()) > 8 or title[-1:] in ".!?":
            continue  # a quoted sentence, not a title
        if not contains(source, title) and not CITATION.fullmatch(title):
            add(match.start(1), match.end(1), title, "no film given has this title")
    for match in NAME.finditer(answer):
        name = TRAILING_SMALL_WORDS.sub("", match.group(0))
        opens = SENTENCE_START.search(answer[:match.start()]) is not None
        left = unsupported_name(name, source, opens, cut=match.start() + len(name) >= answer_end)
        if left:
            at = match.start() + match.group(0).find(left)
            add(at, at + len(left), left, name_reason(left, hits))
    items = [Unsupported(said, why, tuple(where)) for said, (why, where) in found.items()]
    return sorted(items, key=lambda item: item.where[0])


def marked(answer: str, items: list[Unsupported]) -> str:
    """The answer with each thing the check found wrapped in <mark>, its reason as the mark's tooltip.

    >>> item = Unsupported("1975", "no film given is from 1975", ((9, 13),))
    >>> marked("Jaws, in 1975.", [item])
    'Jaws, in <mark title="no film given is from 1975">1975</mark>.'
    """
    places = sorted((start, end, item.why) for item in items for start, end in item.where)
    out, done = [], 0
    for start, end, why in places:
        if start < done:
            continue  # overlaps a place already marked
        out += [answer[done:start], f'<mark title="{html.escape(why)}">', answer[start:end], "</mark>"]
        done = end
    return "".join(out) + answer[done:]


def check_markdown(items: list[Unsupported], most: int = 8) -> str:
    """The check's line under an answer: the first `most` things it found, and how many more there are.

    >>> check_markdown([])
    'Checked against the films given: found no film number, title, name, year, genre or director they lack.'
    >>> check_markdown([Unsupported("1963", "no film given is from 1963")])
    '**Not in the films given:** `1963` (no film given is from 1963)'
    >>> check_markdown([Unsupported(str(year), "not given") for year in range(1990, 2000)], most=2)
    '**Not in the films given:** `1990` (not given) · `1991` (not given) · and 8 more'
    """
    if not items:
        return ("Checked against the films given: found no film number, title, name, year, genre or director they "
                "lack.")
    shown = [item.markdown() for item in items[:most]]
    if len(items) > most:
        shown.append(f"and {len(items) - most} more")
    return "**Not in the films given:** " + " · ".join(shown)


def prompt_text(prompt: Any) -> str:
    """A prompt as text, whether TRL passed a string or chat messages.

    >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Films: ..."}])
    'Be brief.\\nFilms: ...'
    """
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in prompt)
    return "" if prompt is None else str(prompt)


def names_a_given_film(answer: str, films: Sequence[Film]) -> bool:
    """Whether the answer cites a film given by its number ("[2]") or names one by its title.

    >>> films = [GivenFilm("Psycho", 1960, "Horror", "-"), GivenFilm("Vertigo", 1958, "Thriller", "-")]
    >>> names_a_given_film("It is [2].", films), names_a_given_film("psycho", films), names_a_given_film("[3]", films)
    (True, True, False)
    """
    if any(1 <= int(m.group(1)) <= len(films) for m in CITATION.finditer(answer)):
        return True
    return any(fold(film.title) and contains(answer, film.title) for film in films)


class FilmDetails:
    """1.0 when the answer names one of the films its prompt lists (by number or title) and states no film number,
    title, name, year, genre or director that those films lack (`check_answer`); 0.0 otherwise, so an answer that
    names no film earns nothing. For prompts that list numbered films as the RAG tab does (Movie questions).

    With `right_film`, the film named must be the one the question is about (the row's `answer` among its
    `candidates`): copying any listed film's line faithfully earns nothing.

    With `penalty`, only what is invented counts: -1.0 for an answer the check flags, 0.0 for any other, so a
    faithful answer earns nothing over a wrong one and the other rewards alone decide which film to name.

    >>> prompt = [{"role": "user", "content": "[1] Psycho (1960, Horror, dir. Alfred Hitchcock): A clerk steals.\\n"
    ...                                       "[2] Jaws (1975, Thriller, dir. Steven Spielberg): A shark."}]
    >>> answers = ["[1] Psycho (1960, Horror, dir. Alfred Hitchcock)", "[1] Psycho (1962)", "No idea.",
    ...            "[1] Psycho, dir. Alfred Hitch", "[2] Jaws (1975)"]
    >>> FilmDetails()(answers, prompts=[prompt] * 5)
    [1.0, 0.0, 0.0, 1.0, 1.0]
    >>> FilmDetails(right_film=True)(answers, prompts=[prompt] * 5, answer=["Jaws"] * 5,
    ...                              candidates=[["Psycho", "Jaws"]] * 5)
    [0.0, 0.0, 0.0, 0.0, 1.0]
    >>> FilmDetails(penalty=True)(answers, prompts=[prompt] * 5)
    [0.0, -1.0, 0.0, 0.0, 0.0]
    """

    def __init__(self, right_film: bool = False, penalty: bool = False, name: str = "film_details"):
        if right_film and penalty:
            raise ValueError("right_film and penalty don't combine: a penalty scores only what an "
                             "answer invents, whichever film it names.")
        self.right_film, self.penalty, self.__name__ = bool(right_film), bool(penalty), name
        self.max_value = 0.0 if self.penalty else 1.0

    def __call__(self, completions, prompts=None, **kwargs) -> list[float]:
        count = len(completions)
        answers, options = kwargs.get("answer") or [None] * count, kwargs.get("candidates") or [None] * count
        out = []
        for completion, prompt, wanted, candidates in zip(completions, prompts or [None] * count, answers, options):
            source = prompt_text(prompt)
            films, answer = films_in_prompt(source), completion_text(completion)
            if self.penalty:
                out.append(-1.0 if check_answer(answer, films, source) else 0.0)
                continue
            if self.right_film:  # only the film the question is about may be named
                if not candidates or wanted not in candidates or candidates.index(wanted) >= len(films):
                    out.append(0.0)
                    continue
                number = candidates.index(wanted) + 1
                true = contains(answer, films[number - 1].title) or any(
                    int(m.group(1)) == number for m in CITATION.finditer(answer))
            else:
                true = names_a_given_film(answer, films)
            out.append(1.0 if true and not check_answer(answer, films, source) else 0.0)
        return out
