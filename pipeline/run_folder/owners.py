"""Who may act on a run when the app asks for a login: the user who started it, and the operators
(`--operators`). Everyone may watch a run and chat with it; stopping, resuming, deleting, exporting,
pushing and evaluating it are its owner's. Without a login there is one user and nothing is refused.
The owner is recorded once, at creation, in the run folder's owner.json (docs/run-files.md); a run
without one (made before owners were kept, or without a login) is nobody's: anyone may act on it.
No torch or gradio import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.run_folder import run_files
from pipeline.run_folder.jsonio import _read_json, write_json_atomic




@dataclass(frozen=True)
class Actor:
    """The user behind a request: their login name (None without a login) and whether they are an operator."""

    user: str | None = None
    operator: bool = False

    @classmethod
    def of(cls, user: str | None, operators=()) -> "Actor":
        """The actor for a login name, an operator when the name is in `operators`.

        >>> Actor.of("alice", {"alice"}), Actor.of(None, {"alice"})
        (Actor(user='alice', operator=True), Actor(user=None, operator=False))
        """
        return cls(user or None, bool(user) and user in set(operators or ()))


def parse_operators(text: str | None) -> frozenset[str]:
    """`--operators alice,bob` as a set of login names.

    >>> sorted(parse_operators(" alice, bob ,,"))
    ['alice', 'bob']
    """
    return frozenset(name.strip() for name in (text or "").split(",") if name.strip())


def may_act(owner: str | None, actor: Actor | None) -> bool:
    """The rule: a run with no owner is anyone's; without a login (no user) there is one user; an operator
    may act on every run; everyone else only on their own.

    >>> may_act("alice", Actor("alice")), may_act("alice", Actor("bob")), may_act("alice", Actor("bob", True))
    (True, False, True)
    >>> may_act(None, Actor("bob")), may_act("alice", Actor(None)), may_act("alice", None)
    (True, True, True)
    """
    if owner is None or actor is None or actor.user is None or actor.operator:
        return True
    return actor.user == owner


def refusal_message(run_name: str, owner: str, action: str) -> str:
    """What a user who may not act on a run reads: whose run it is, and what they can still do.

    >>> refusal_message("r1", "alice", "delete it")
    "Run 'r1' belongs to alice: only alice or an operator may delete it. You can still watch it and chat with it."
    """
    return (f"Run '{run_name}' belongs to {owner}: only {owner} or an operator may {action}. "
            "You can still watch it and chat with it.")


def run_owner(run_dir: str | Path) -> str | None:
    """The login that started the run; None when none was recorded (anyone may act on it)."""
    user = (_read_json(Path(run_dir) / run_files.OWNER) or {}).get("user")
    return user if isinstance(user, str) and user else None


def record_owner(run_dir: str | Path, user: str | None) -> None:
    """Write owner.json when a run folder is created (once; a run without a login gets none)."""
    if user:
        write_json_atomic(Path(run_dir) / run_files.OWNER, {"user": user, "created_at": time.time()})


def refusal(run_dir: str | Path, actor: Actor | None, action: str) -> str | None:
    """Why `actor` may not `action` ("delete it", "stop it", ...) the run at `run_dir`; None when they may."""
    owner = run_owner(run_dir)
    return None if may_act(owner, actor) else refusal_message(Path(run_dir).name, owner, action)
