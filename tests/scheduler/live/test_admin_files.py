"""The limits file and the association file: defaults, checks, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.limits import MAX_MESSAGE_BYTES
from broker.messages import JobSpec
from broker.vocabulary import Rejection
from scheduler.live.associations import (
    Associations,
    AssociationsError,
    Refusal,
    associations_from_toml,
)
from scheduler.live.limits import DEFAULTS, Limits, LimitsError, limits_from_toml
from scheduler.runtime.admin_files import read_associations, read_limits


def test_the_defaults_are_the_documented_ones() -> None:
    assert (
        Limits(
            max_queued_per_user=10_000,
            max_jobs_per_request=10_000,
            max_user_cpus=None,
            max_request_bytes=MAX_MESSAGE_BYTES,
        )
        == DEFAULTS
    )


def test_a_file_sets_some_limits_and_options_override_it(tmp_path: Path) -> None:
    path = tmp_path / "limits.toml"
    path.write_text("[limits]\nmax_queued_per_user = 500\nmax_user_cpus = 64\n")
    limits = read_limits(path, max_user_cpus=32, max_jobs_per_request=None)
    assert limits == Limits(max_queued_per_user=500, max_user_cpus=32)
    assert read_limits(None) == DEFAULTS
    assert limits_from_toml("") == DEFAULTS


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[limits]\nmax_queued = 5\n", "unknown key 'max_queued'"),
        ("[limits]\nmax_user_cpus = 0\n", "max_user_cpus must be a whole number >= 1"),
        ("[limits]\nmax_queued_per_user = 'many'\n", "max_queued_per_user must be"),
        ("[limits]\nmax_queued_per_user = true\n", "max_queued_per_user must be"),
        ("[limits]\nmax_request_bytes = 20000000\n", "above the broker's message limit"),
        ("[limits]\nmax_jobs_per_request = 50000\n", "above 20000"),
        ("[other]\n", "unknown table or key 'other'"),
        ("limits = 3\n", "[limits] must be a table"),
        ("[limits\n", "not TOML"),
    ],
)
def test_a_bad_limits_file_is_one_line_naming_it(text: str, said: str) -> None:
    with pytest.raises(LimitsError) as caught:
        limits_from_toml(text, "site.toml")
    message = str(caught.value)
    assert message.startswith("site.toml: ")
    assert said in message
    assert "\n" not in message


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read the limits file .*missing\.toml"):
        read_limits(tmp_path / "missing.toml")
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        read_associations(binary)


TABLE = """
[default]
accounts = ["guests"]

[users.alice]
accounts = ["physics", "shared"]
max_qos = 10
"""


def job(**fields: object) -> JobSpec:
    return JobSpec(id="j", procs=1, walltime=10.0, work=5.0, **fields)  # type: ignore[arg-type]


def test_associations_admit_refuse_and_default_the_account() -> None:
    table = associations_from_toml(TABLE)
    assert table.admit(job(user="alice", group="shared", qos=10)) == job(
        user="alice", group="shared", qos=10
    )
    assert table.admit(job(user="alice")) == job(user="alice", group="physics")
    assert table.admit(job(user="carol")) == job(user="carol", group="guests")
    refused = table.admit(job(user="alice", group="biology"))
    assert isinstance(refused, Refusal)
    assert refused.code is Rejection.ACCOUNT
    assert "physics, shared" in refused.reason
    refused = table.admit(job(user="alice", qos=11))
    assert isinstance(refused, Refusal)
    assert refused.code is Rejection.QOS
    nobody = Associations({})
    refused = nobody.admit(job(user="alice"))
    assert isinstance(refused, Refusal)
    assert "no association" in refused.reason


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[users.a]\naccounts = []\n", "[users.a]: accounts is empty"),
        ("[users.a]\naccounts = [1]\n", "accounts must be a list of account names"),
        ("[users.a]\naccounts = ['x']\nmax_qos = -1\n", "max_qos -1 is not in"),
        ("[users.a]\naccounts = ['x']\nqos = 1\n", "unknown key 'qos'"),
        ("[users]\na = 3\n", "[users.a] must be a table"),
        ("[groups]\n", "unknown table 'groups'"),
    ],
)
def test_a_bad_association_file_is_one_line_naming_the_entry(text: str, said: str) -> None:
    with pytest.raises(AssociationsError) as caught:
        associations_from_toml(text, "assoc.toml")
    assert str(caught.value).startswith("assoc.toml")
    assert said in str(caught.value)
