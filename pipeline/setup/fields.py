"""What a run setting's metadata holds: its help (`_help`), and for a setting the Train form shows its label,
choices and range (`_form`); range_rule and range_problem read a range in words and check a value against it."""

from __future__ import annotations

from typing import Any


# A field's range, in its metadata: `minimum`/`maximum` are inclusive (the form's number box takes them too),
# `above`/`below` exclusive; `range_error` (optional) is the message when the value is outside, with {value}.
RANGE_KEYS = ("minimum", "maximum", "above", "below", "range_error")


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **{k: v for k, v in extra.items() if v is not None}}


def _form(label: str, text: str, choices: tuple[str, ...] = (), **bounds: Any) -> dict[str, Any]:
    """Metadata of a field the Train form shows: its label, its help (shown under it), for a dropdown its
    choices, and for a number its range (`minimum`, `maximum`, `above`, `below`, `range_error`); choices and
    range are what `RunConfig.problems` checks."""
    unknown = set(bounds) - set(RANGE_KEYS)
    if unknown:
        raise TypeError(f"_form() takes no {', '.join(sorted(unknown))}; a range is one of {', '.join(RANGE_KEYS)}")
    return _help(text, label=label, form=True, **({"choices": choices} if choices else {}), **bounds)


def range_rule(meta) -> str:
    """The allowed range of a field, in words.

    >>> range_rule({"minimum": 1}), range_rule({"minimum": 0}), range_rule({"above": 0, "maximum": 1})
    ('at least 1', 'not negative', 'in (0, 1]')
    >>> range_rule({"minimum": 0, "maximum": 10}), range_rule({"above": 0})
    ('between 0 and 10', 'above 0')
    """
    low, high = meta.get("minimum", meta.get("above")), meta.get("maximum", meta.get("below"))
    if high is None:
        if "above" in meta:
            return f"above {low}"
        return "not negative" if low == 0 else f"at least {low}"
    if low is None:
        return f"at most {high}" if "maximum" in meta else f"below {high}"
    if "minimum" in meta and "maximum" in meta:
        return f"between {low} and {high}"
    return f"in {'[' if 'minimum' in meta else '('}{low}, {high}{']' if 'maximum' in meta else ')'}"


def range_problem(name: str, meta, value) -> str | None:
    """What is wrong with `value` for a field with this metadata's range; None when it is inside (or the field
    has no range).

    >>> range_problem("save_steps", {"minimum": 1}, 0), range_problem("top_k", {"minimum": 0}, 3)
    ('save_steps must be at least 1 (got 0).', None)
    """
    if not any(key in meta for key in RANGE_KEYS[:4]):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # e.g. a string in a hand-written config
        return f"{name} must be a number (got {value!r})."
    inside = (("minimum" not in meta or value >= meta["minimum"])
              and ("maximum" not in meta or value <= meta["maximum"])
              and ("above" not in meta or value > meta["above"])
              and ("below" not in meta or value < meta["below"]))
    if inside:  # NaN is inside no bound, so a NaN in a ranged field is reported
        return None
    if "range_error" in meta:
        return meta["range_error"].format(value=value)
    rule = range_rule(meta)
    return f"{name} {'cannot be negative' if rule == 'not negative' else 'must be ' + rule} (got {value!r})."
