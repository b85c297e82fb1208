"""broker.auth without a broker: accounts, hashes, ACL grants, the identity topics."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.auth import (
    Account,
    AuthError,
    acl_file,
    agent_account,
    cluster_accounts,
    grants,
    hash_password,
    identity_of,
    main,
    user_accounts,
    write_auth_files,
)
from broker.topics import Topics, matches

TOPICS = Topics("acl/v1")
names = st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True)


def test_hash_verifies_as_pbkdf2_sha512() -> None:
    h = hash_password("pw")
    _, seven, iterations, salt, digest = h.split("$")
    assert (seven, iterations) == ("7", "101")
    raw_salt = base64.b64decode(salt)
    assert len(raw_salt) == 12
    expected = hashlib.pbkdf2_hmac("sha512", b"pw", raw_salt, 101)
    assert base64.b64decode(digest) == expected
    assert hash_password("pw") != h  # a fresh salt each time


@pytest.mark.parametrize(
    "kwargs",
    [
        {"login": "a:b", "role": "user", "identity": "a"},
        {"login": "a b", "role": "user", "identity": "a"},
        {"login": "a", "role": "user", "identity": "x/y"},
        {"login": "a", "role": "user", "identity": "#"},
        {"login": "a", "role": "root", "identity": "a"},
        {"login": "", "role": "user", "identity": "a"},
    ],
)
def test_bad_accounts_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(AuthError):
        Account(password="pw", **kwargs)  # type: ignore[arg-type]


def test_a_password_with_a_newline_is_refused() -> None:
    with pytest.raises(AuthError, match="newline"):
        Account("a", "user", "a", "p\nw")


def test_user_logins_speak_for_one_identity() -> None:
    logins = user_accounts("alice", logins=3)
    assert [a.login for a in logins] == ["alice", "alice~2", "alice~3"]
    assert {a.identity for a in logins} == {"alice"}
    assert len({a.password for a in logins}) == 3
    with pytest.raises(AuthError):
        user_accounts("alice", logins=0)


def _writes(account: Account) -> list[str]:
    return [t for access, t in grants(account, TOPICS) if "write" in access]


def _reads(account: Account) -> list[str]:
    return [t for access, t in grants(account, TOPICS) if "read" in access]


@given(names, names)
def test_a_user_may_write_and_read_nothing_of_another_user(a: str, b: str) -> None:
    if a == b:
        return
    (ua,) = user_accounts(a, logins=1)
    theirs = [
        TOPICS.user_requests(b),
        TOPICS.user_replies(b, "cli"),
        TOPICS.user_events(b),
        TOPICS.admin_requests(a),
        TOPICS.agent_commands(b),
        TOPICS.agent_state(b),
        TOPICS.agent_events(b),
        TOPICS.agent_job_control(b, "j"),
        TOPICS.events,
    ]
    for topic in theirs:
        assert not any(matches(f, topic) for f in _writes(ua)), topic
        assert not any(matches(f, topic) for f in _reads(ua)) or topic == TOPICS.cluster, topic
    assert TOPICS.requester_of(TOPICS.user_requests(a)) == (a, False)


@given(names, names)
def test_an_agent_speaks_only_on_its_own_topics(a: str, b: str) -> None:
    if a == b:
        return
    agent = agent_account(a)
    for topic in (
        TOPICS.agent_state(b),
        TOPICS.agent_events(b),
        TOPICS.agent_commands(a),  # only the scheduler commands agents
        TOPICS.agent_job_control(b, "j"),
        TOPICS.user_requests(a),
        TOPICS.user_replies(a, "c"),
    ):
        assert not any(matches(f, topic) for f in _writes(agent)), topic


def test_only_the_scheduler_writes_commands_and_replies() -> None:
    accounts = cluster_accounts(["n1", "n2"], ["alice"], ["root"])
    for topic in (TOPICS.agent_commands("n1"), TOPICS.user_replies("alice", "c")):
        writers = {a.role for a in accounts if any(matches(f, topic) for f in _writes(a))}
        assert writers == {"scheduler"}, topic


def test_the_acl_file_has_one_section_per_login() -> None:
    accounts = cluster_accounts(["n1"], ["alice"], ["root"])
    text = acl_file(accounts, TOPICS)
    users = [line.split()[1] for line in text.splitlines() if line.startswith("user ")]
    assert users == [a.login for a in accounts]
    assert "pattern" not in text  # everything explicit, per login
    for account in accounts:
        assert account.password not in text


def test_requester_of_other_topics_is_none() -> None:
    assert TOPICS.requester_of(TOPICS.requests) is None
    assert TOPICS.requester_of(TOPICS.agent_state("a")) is None
    assert TOPICS.requester_of(f"{TOPICS.root}/scheduler/requests/a/b") is None
    assert TOPICS.requester_of(TOPICS.admin_requests("root")) == ("root", True)
    assert TOPICS.agent_job_control("n1", "j1") == "acl/v1/agents/n1/jobs/j1/control"
    assert TOPICS.user_subtree("alice") == "acl/v1/users/alice/#"


def test_the_command_writes_files_and_prints_no_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dir", str(tmp_path), "--agent", "n1", "--user", "alice", "--logins", "1"]) == 0
    out = capsys.readouterr().out
    files = list((tmp_path / "secrets").iterdir())
    secrets = {p.name: p.read_text().strip() for p in files if p.suffix != ".env"}
    # The agent's probe login shares its secret (one password per agent).
    assert set(secrets) == {"scheduler", "agent-n1", "agent-n1~probe", "alice"}
    assert secrets["agent-n1"] == secrets["agent-n1~probe"]
    for secret in secrets.values():
        assert secret not in out
    assert (tmp_path / "passwd").read_text().count("$7$101$") == 4
    with pytest.raises(SystemExit):
        main(["--dir", str(tmp_path), "--user", "a/b"])


def test_a_login_env_file_names_the_secret_by_path(tmp_path: Path) -> None:
    accounts = cluster_accounts(["n1"], ["alice"], ["root"], logins=2)
    files = write_auth_files(tmp_path, accounts, TOPICS)
    for account in accounts:
        env = files.env_files[account.login]
        assert env.stat().st_mode & 0o077 == 0
        lines = dict(line.split("=", 1) for line in env.read_text().splitlines())
        expected = {
            "ACCORDION_MQTT_USERNAME": account.login,
            "ACCORDION_MQTT_PASSWORD_FILE": str(files.secret_of(account.login).resolve()),
            "ACCORDION_ROLE": account.role,
        }
        if account.login == "agent-n1":  # an agent names its probe's login too
            expected["ACCORDION_MQTT_PROBE_USERNAME"] = "agent-n1~probe"
        assert lines == expected
        assert account.password not in env.read_text()
        assert identity_of(account.login) == account.identity or account.role == "agent"


def test_an_agent_relays_job_topics_but_no_user_may() -> None:
    accounts = cluster_accounts(["n1"], ["alice"], [])
    job_topics = (TOPICS.job_control("j1"), f"{TOPICS.root}/jobs/j1/ranks/0")
    for account in accounts:
        for topic in job_topics:
            may = any(matches(f, topic) for f in _writes(account))
            assert may == (account.role == "agent"), (account.login, topic)
