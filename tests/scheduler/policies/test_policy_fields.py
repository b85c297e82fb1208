"""Every policy parameter is a field of the policy (a frozen, keyword-only dataclass),
with the paper's default, checked when the policy is built."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.policies.dpsa import DEFAULT_BUDGET, Dpsa
from scheduler.policies.flexible import FlexibleBackfill
from scheduler.policies.registry import POLICIES, build_policy, policy_options
from scheduler.policies.tabu import DEFAULT_MAX_ITERATIONS, DEFAULT_TABU_SIZE, EgEdfTabu
from scheduler.priority.flexible_score import AGE_FACTOR, BOOST_VALUE, MAX_SCORE, MIN_SCORE, K
from tests.compiled_build import COMPILED


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_is_a_frozen_keyword_only_dataclass(name: str) -> None:
    policy = build_policy(name)
    assert dataclasses.is_dataclass(policy)
    params = type(policy).__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen
    assert all(f.kw_only for f in dataclasses.fields(policy) if f.init)


def test_defaults_are_the_papers() -> None:
    flexible = FlexibleBackfill()
    assert (flexible.age_factor, flexible.k, flexible.max_score) == (AGE_FACTOR, K, MAX_SCORE)
    assert (flexible.min_score, flexible.boost_value) == (MIN_SCORE, BOOST_VALUE)
    assert (AGE_FACTOR, K, MAX_SCORE, MIN_SCORE, BOOST_VALUE) == (0.01, 2.0, 20.0, 0.1, 2.0)
    tabu = EgEdfTabu()
    assert (tabu.tabu_size, tabu.max_iterations) == (DEFAULT_TABU_SIZE, DEFAULT_MAX_ITERATIONS)
    assert Dpsa().budget == DEFAULT_BUDGET


def test_a_field_set_from_outside_reaches_the_code_that_uses_it() -> None:
    flexible = FlexibleBackfill(age_factor=0.5, k=3.0, max_score=30.0, boost_value=4.0)
    score = flexible.priority
    assert (score.age_factor, score.k, score.max_score, score.boost_value) == (0.5, 3.0, 30.0, 4.0)
    tabu = EgEdfTabu(tabu_size=3, max_iterations=7)
    assert (tabu.tabu.tabu_size, tabu.tabu.max_iterations) == (3, 7)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: EgEdfTabu(tabu_size=0), "tabu_size must be a whole number >= 1"),
        (lambda: EgEdfTabu(max_iterations=-1), "max_iterations must be a whole number >= 0"),
        pytest.param(
            lambda: EgEdfTabu(tabu_size=2.5),
            "tabu_size must be a whole number",
            marks=pytest.mark.skipif(
                COMPILED, reason="compiled, a float for an int is a TypeError"
            ),
        ),
        (lambda: FlexibleBackfill(k=0.0), "k must be > 0"),
        (lambda: FlexibleBackfill(age_factor=-1.0), "age_factor must be >= 0"),
        (lambda: FlexibleBackfill(max_score=0.0), "max_score"),
        (lambda: FlexibleBackfill(boost_value=float("nan")), "boost_value must be finite"),
        (lambda: Dpsa(budget=0), "budget must be >= 1"),
        (lambda: Dpsa(variant="x"), "variant must be"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_value_is_a_one_line_error_naming_the_field(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        build()  # type: ignore[operator]
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("spec", "key", "kind"),
    [
        ("dpsa-p", "time_budget", "float | None"),
        ("easy:fairshare", "priority.by", "'user' | 'group'"),
        ("easy:multifactor", "priority.max_qos", "int | None"),
    ],
)
def test_options_whose_types_are_not_classes_are_options_on_both_builds(
    spec: str, key: str, kind: str
) -> None:
    """A union or a Literal is ``type`` in a compiled class's annotations; the
    registry reads it from the source, so the compiled pass has the same options."""
    assert (key, kind) in {(o.key, o.kind) for o in policy_options(spec)}
