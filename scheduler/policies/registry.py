"""Policy names as the CLI spells them, and how to build each.

A policy spec is ``POLICY[:PRIORITY]``: ``easy``, ``easy:fairshare``,
``fcfs:multifactor``. The queue policies take any priority source; the
placement rule applies to every policy that places jobs itself.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.core.snapshot import Policy
from scheduler.planning.placement import Placement, PlacementRule
from scheduler.policies.conservative import ConservativeBackfill
from scheduler.policies.dpsa import Dpsa
from scheduler.policies.easy import EasyBackfill
from scheduler.policies.eg_edf import EgEdf
from scheduler.policies.fcfs import Fcfs
from scheduler.policies.fcfs_malleable import FcfsMalleable
from scheduler.policies.fifo_backfill import FifoBackfill
from scheduler.policies.flexible import FlexibleBackfill
from scheduler.policies.tabu import EgEdfTabu
from scheduler.priority import PrioritySource
from scheduler.priority.fairshare import FairShare
from scheduler.priority.fifo import Fifo
from scheduler.priority.multifactor import MultiFactor


class UnknownPolicyError(ValueError):
    """A policy or priority name nobody registered (the message lists the valid ones)."""


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    summary: str
    build: Callable[[PrioritySource, Placement, str], Policy]
    #: False for policies whose paper fixes the order (Flexible backfilling's own
    #: priority, FCFS-malleable's arrival order): ``POLICY:PRIORITY`` is refused.
    takes_priority: bool = True
    #: True for policies that run a job on one machine only (EG-EDF's model).
    single_machine: bool = False


POLICIES: dict[str, PolicyInfo] = {
    "fcfs": PolicyInfo(
        "fcfs",
        "first come, first served",
        lambda pr, pl, name: Fcfs(priority=pr, placement=pl, name=name),
    ),
    "fifo-backfill": PolicyInfo(
        "fifo-backfill",
        "FIFO, any job that fits starts (no reservation)",
        lambda pr, pl, name: FifoBackfill(priority=pr, placement=pl, name=name),
    ),
    "easy": PolicyInfo(
        "easy",
        "EASY backfilling (one reservation)",
        lambda pr, pl, name: EasyBackfill(priority=pr, placement=pl, name=name),
    ),
    "conservative": PolicyInfo(
        "conservative",
        "conservative backfilling (a reservation for every job)",
        lambda pr, pl, name: ConservativeBackfill(priority=pr, placement=pl, name=name),
    ),
    "dpsa-p": PolicyInfo(
        "dpsa-p",
        "DPSA: EASY reservation + best-fill subset search, ties by priority",
        lambda pr, pl, name: Dpsa(variant="p", priority=pr, placement=pl, name=name),
    ),
    "dpsa-n": PolicyInfo(
        "dpsa-n",
        "DPSA, search presorted by size ascending (favours narrow jobs)",
        lambda pr, pl, name: Dpsa(variant="n", priority=pr, placement=pl, name=name),
    ),
    "dpsa-w": PolicyInfo(
        "dpsa-w",
        "DPSA, search presorted by size descending (favours wide jobs)",
        lambda pr, pl, name: Dpsa(variant="w", priority=pr, placement=pl, name=name),
    ),
    "flexible": PolicyInfo(
        "flexible",
        "Flexible backfilling: aging + deadline + wait priority, EASY reservation",
        lambda _pr, pl, name: FlexibleBackfill(placement=pl, name=name),
        takes_priority=False,
    ),
    "eg-edf": PolicyInfo(
        "eg-edf",
        "EG-EDF: earliest gap in the schedule, else EDF insertion; one machine per job",
        lambda _pr, _pl, name: EgEdf(name=name),
        takes_priority=False,
        single_machine=True,
    ),
    "eg-edf-tabu": PolicyInfo(
        "eg-edf-tabu",
        "EG-EDF, then Tabu search moving delayed jobs into earlier gaps",
        lambda _pr, _pl, name: EgEdfTabu(name=name),
        takes_priority=False,
        single_machine=True,
    ),
    "fcfs-malleable": PolicyInfo(
        "fcfs-malleable",
        "FCFS with virtual malleability (shrink to MPL 2, expand when the queue empties)",
        lambda _pr, pl, name: FcfsMalleable(placement=pl, name=name),
        takes_priority=False,
    ),
}

PRIORITIES: dict[str, Callable[[], PrioritySource]] = {
    "fifo": Fifo,
    "fairshare": FairShare,
    "multifactor": MultiFactor,
}


def policy_info(spec: str) -> PolicyInfo:
    """The registry entry of ``spec``'s policy name."""
    name = spec.strip().partition(":")[0]
    info = POLICIES.get(name)
    if info is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}"
        )
    return info


def build_policy(spec: str, *, placement: PlacementRule = PlacementRule.FASTEST) -> Policy:
    """Build the policy named by ``spec`` (``POLICY[:PRIORITY]``)."""
    name, _, prio = spec.strip().partition(":")
    info = POLICIES.get(name)
    if info is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}"
        )
    if prio and not info.takes_priority:
        raise UnknownPolicyError(
            f"policy {name!r} has its own order from its paper; drop ':{prio}'"
        )
    make_priority = PRIORITIES.get(prio or "fifo")
    if make_priority is None:
        raise UnknownPolicyError(
            f"unknown priority source {prio!r}; choose one of: {', '.join(sorted(PRIORITIES))}"
        )
    # The display name carries the priority source so compare tables stay unambiguous.
    return info.build(make_priority(), Placement(rule=placement), spec.strip())


# -- policy options (``--policy-opt KEY=VALUE``) --------------------------------------
#
# A policy's parameters are its dataclass fields (house rule 1), so the options
# are read off the built object with ``dataclasses.fields()``, recursing into
# fields that hold a dataclass (``tabu.tabu_size``, ``priority.decay``): whatever
# fields a policy has are settable without this module naming them. A field is
# an option when its type converts from text: bool, int, float, str, a Literal,
# an Enum, or one of those or None. Fields the registry sets itself are not.

#: Set by the registry or the command line, never by an option: the display name,
#: the placement (``--placement``), DPSA's variant (the policy name) and the clock.
RESERVED_FIELDS = frozenset({"name", "placement", "variant", "clock"})

#: The field that makes a policy read seconds from a ``clock`` field (DPSA's time
#: bound); see :func:`build_policy`.
SECONDS_BUDGET = "time_budget"

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


class PolicyOptionError(ValueError):
    """An option the policy does not have, or a value its field cannot take."""


@dataclass(frozen=True, slots=True)
class PolicyOption:
    """One settable parameter: its dotted key, its type as text, its default."""

    key: str
    kind: str
    default: object
    convert: Callable[[str], object]


def _converter(hint: object) -> tuple[str, Callable[[str], object]] | None:
    """``(type as text, text -> value)`` for a field type an option can set, else None."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(rest) == len(args):
            return None
        inner = _converter(rest[0])
        if inner is None:
            return None
        kind, convert = inner

        def optional(text: str) -> object:
            return None if text.strip().lower() == "none" else convert(text)

        return f"{kind} | None", optional
    if typing.get_origin(hint) is typing.Literal:
        by_text = {str(a): a for a in args}

        def literal(text: str) -> object:
            if text not in by_text:
                raise ValueError(f"expected one of {', '.join(by_text)}")
            return by_text[text]

        return " | ".join(repr(a) for a in args), literal
    if hint is bool:

        def boolean(text: str) -> bool:
            low = text.strip().lower()
            if low not in _TRUE | _FALSE:
                raise ValueError("expected true or false")
            return low in _TRUE

        return "bool", boolean
    if hint is int:
        return "int", lambda text: int(text.strip())
    if hint is float:
        return "float", lambda text: float(text.strip())
    if hint is str:
        return "str", str
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return " | ".join(str(m.value) for m in hint), hint
    return None


def _field_hints(cls: type) -> dict[str, object]:
    """``typing.get_type_hints(cls)``, also for a class of the compiled build (the
    ``compiled`` package): mypyc keeps a class as the annotation of a field and ``type``
    for any other (``float | None``, a ``Literal``), which no option converts from.
    Those fields' annotations are read from the class's source instead and evaluated
    in its module, as ``get_type_hints`` evaluates them."""
    hints: dict[str, object] = typing.get_type_hints(cls)
    erased = {name for name, hint in hints.items() if hint is type}
    if not erased:
        return hints
    texts = {name: text for name, text in _source_annotations(cls).items() if name in erased}
    # A stand-in class in the same module: get_type_hints evaluates its string
    # annotations in that module's namespace, as it would the source's.
    stand_in = type(cls.__name__, (), {"__annotations__": texts, "__module__": cls.__module__})
    return hints | typing.get_type_hints(stand_in)


def _source_annotations(cls: type) -> dict[str, str]:
    """The annotations of ``cls``'s fields as written in its source, found through its
    package, whose ``__init__`` the compiled build leaves pure (so its ``__path__`` is
    the checkout's)."""
    package, _, leaf = cls.__module__.rpartition(".")
    found: dict[str, str] = {}
    for folder in getattr(sys.modules[package], "__path__", ()):
        path = Path(folder) / f"{leaf}.py"
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name == cls.__qualname__:
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        found[item.target.id] = ast.unparse(item.annotation)
        break
    return found


def _options_of(obj: object, prefix: str = "") -> list[PolicyOption]:
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return []
    hints = _field_hints(type(obj))
    found: list[PolicyOption] = []
    for f in dataclasses.fields(obj):
        if not f.init or f.name.startswith("_") or f.name in RESERVED_FIELDS:
            continue
        value = getattr(obj, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found.extend(_options_of(value, key + "."))
            continue
        conv = _converter(hints.get(f.name))
        if conv is not None:
            found.append(PolicyOption(key, conv[0], value, conv[1]))
    return found


def policy_options(
    spec: str, *, placement: PlacementRule = PlacementRule.FASTEST
) -> tuple[PolicyOption, ...]:
    """Every option of ``spec``'s policy, with its default, in field order."""
    return tuple(_options_of(build_policy(spec, placement=placement)))


def parse_policy_opts(texts: Sequence[str]) -> dict[str, str]:
    """``["key=value", ...]`` as a mapping; the last of a key given twice wins."""
    options: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise PolicyOptionError(f"--policy-opt wants KEY=VALUE, got {text!r}")
        options[key.strip()] = value
    return options


def _replaced(obj: object, values: Mapping[tuple[str, ...], object]) -> object:
    """``obj`` with the dotted fields of ``values`` replaced, nested ones first."""
    direct: dict[str, object] = {}
    nested: dict[str, dict[tuple[str, ...], object]] = {}
    for path, value in values.items():
        if len(path) == 1:
            direct[path[0]] = value
        else:
            nested.setdefault(path[0], {})[path[1:]] = value
    for name, inner in nested.items():
        direct[name] = _replaced(getattr(obj, name), inner)
    return _with(obj, **direct)


def _with(obj: Any, **changes: object) -> Any:
    """``dataclasses.replace`` on a policy or a part of one (typed as the protocol)."""
    return dataclasses.replace(obj, **changes)


def build_policy_with(
    spec: str,
    options: Mapping[str, str],
    *,
    placement: PlacementRule = PlacementRule.FASTEST,
    clock: Callable[[], float] | None = None,
) -> Policy:
    """:func:`build_policy` with ``options`` (``key -> text``) set on its fields.

    Each value is converted by its field's type and checked by the policy's
    own validation; an unknown key or a bad value raises
    :class:`PolicyOptionError` naming the valid keys. A policy with a
    ``clock`` field and a :data:`SECONDS_BUDGET` set gets ``clock`` (the live
    scheduler passes ``time.monotonic``, as ``dpsa.py`` describes); without
    one (the twin, which stays deterministic) such an option is refused.
    """
    policy = build_policy(spec, placement=placement)
    if not options:
        return policy
    known = {o.key: o for o in _options_of(policy)}
    values: dict[tuple[str, ...], object] = {}
    for key, text in options.items():
        option = known.get(key)
        if option is None:
            valid = ", ".join(known) or "none"
            raise PolicyOptionError(f"{spec} has no option {key!r}; its options: {valid}")
        try:
            values[tuple(key.split("."))] = option.convert(text)
        except ValueError as exc:
            raise PolicyOptionError(
                f"{spec}: option {key}={text!r} is not of type {option.kind} ({exc})"
            ) from None
    try:
        policy = typing.cast(Policy, _replaced(policy, values))
    except ValueError as exc:
        # The policy's own validation of the values given, so the user's mistake.
        text = str(exc)
        name = spec.strip().partition(":")[0]
        raise PolicyOptionError(text if text.startswith(name) else f"{spec}: {text}") from exc
    has_clock = any(f.name == "clock" for f in dataclasses.fields(typing.cast(Any, policy)))
    if SECONDS_BUDGET in options and has_clock:
        if clock is None:
            raise PolicyOptionError(
                f"{spec}: {SECONDS_BUDGET} is seconds on the live scheduler's clock; the twin "
                "is deterministic and bounds the search by 'budget' (node expansions)"
            )
        if getattr(policy, SECONDS_BUDGET) is not None:
            policy = typing.cast(Policy, _with(policy, clock=clock))
    return policy


def options_for(spec: str, options: Mapping[str, str]) -> dict[str, str]:
    """The ``options`` that ``spec``'s policy has (compare applies each to every
    policy that has its key)."""
    keys = {o.key for o in policy_options(spec)}
    return {k: v for k, v in options.items() if k in keys}
