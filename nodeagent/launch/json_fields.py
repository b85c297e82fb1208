"""Reading the fields of a small JSON record with checks: the agent's own files.

The agent writes a few records for its job processes and for its next
incarnation (a command's plan, ``nodeagent.launch.command_plan``; a part's
record, ``nodeagent.survival.state``) and reads them back trusting nothing: a
field of the wrong type is a ``TypeError`` naming it, which each reader turns
into its own error (the record does not read, so it is no record). A JSON
``true`` is never an integer here, though Python's ``bool`` is one.
"""

from __future__ import annotations

from typing import Any


def typed(raw: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``raw[name]`` if it is of ``kind`` (a bool only where ``kind`` is ``bool``)."""
    value = raw.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TypeError(f"{name} is {value!r}")
    return value


def optional(raw: dict[str, Any], name: str, kind: type) -> Any:
    """``raw[name]`` if it is of ``kind``, or None if it is missing or null."""
    return None if raw.get(name) is None else typed(raw, name, kind)


def items(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return value


def strs(value: object) -> list[str]:
    found = items(value)
    if not all(isinstance(v, str) for v in found):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return found


def ints(value: object) -> list[int]:
    found = items(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in found):
        raise TypeError(f"expected a list of integers, got {value!r}")
    return found


def pair(value: object) -> tuple[str, str]:
    found = strs(value)
    if len(found) != 2:
        raise TypeError(f"expected a name and a value, got {value!r}")
    return found[0], found[1]
