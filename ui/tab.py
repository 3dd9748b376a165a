"""The contract every tab module in ui/ keeps: `build(ctx: TabContext) -> Tab`, called inside the app's
`gr.Tabs()`. The context carries what tabs share; the result names what the page does on load. No gradio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pipeline.run_folder.owners import Actor

if TYPE_CHECKING:  # type names only: the app builds its page before these load anything heavy
    from pipeline.training.generate import ModelCache
    from retrieval.store import MovieStore


@dataclass(frozen=True)
class TabContext:
    """What the app shares with every tab."""

    cache: "ModelCache"              # loaded models, shared by Chat, RAG and the reward bench (at most two)
    store: "MovieStore"              # the movie-plot table, shared by every session
    allow_custom_rewards: bool = False  # --allow-custom-rewards: rewards written as Python are offered
    operators: frozenset[str] = frozenset()  # --operators: logins that may act on every user's runs


def acting(request: Any, operators=()) -> Actor:
    """Who sent a request (a Gradio request: its login name under --auth, None without one), as the run
    owner rules in pipeline/run_folder/owners.py see them."""
    return Actor.of(getattr(request, "username", None), operators)


@dataclass(frozen=True)
class PageLoad:
    """One `demo.load` event: a page load (or reload) runs `fn(*inputs)` into `outputs`."""

    fn: Callable[..., Any]
    inputs: Sequence = ()
    outputs: Sequence = ()


@dataclass(frozen=True)
class Tab:
    """What a tab's build() hands back to the app: its page-load events, and browser scripts to run on load
    (registered after every tab's events, in order)."""

    loads: tuple[PageLoad, ...] = ()
    scripts: tuple[str, ...] = ()
