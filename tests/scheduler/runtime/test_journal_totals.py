"""The journal's totals (schema 4): set, read back, restored; a schema-3 journal migrated."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from scheduler.runtime.exporter import SchedulerMetrics
from scheduler.runtime.journal import SCHEMA_VERSION, Journal, JournalState
from scheduler.runtime.journaled_counters import JournaledCounter, Tally
from tests.scheduler.runtime.test_journal_resizes import SCHEMA_2

# A schema-3 journal as a scheduler of that version left it: two resizes with the
# parts before them (a shrink 4 -> 2 and an expand 2 -> 3), no totals table.
SCHEMA_3 = (
    SCHEMA_2.replace(
        "kind TEXT NOT NULL, detail TEXT", "kind TEXT NOT NULL, detail TEXT, before TEXT"
    )
    .replace(
        "detail TEXT, PRIMARY KEY",
        "detail TEXT, cpus_before INTEGER, cpus_after INTEGER, PRIMARY KEY",
    )
    .replace("VALUES ('schema', '2')", "VALUES ('schema', '3')")
    + """
INSERT INTO events(at, job_id, kind, detail, before)
    VALUES (2.0, 'm', 'resized', '[["m",2]]', '[["m",3],["n",1]]');
INSERT INTO events(at, job_id, kind, detail, before)
    VALUES (3.0, 'm', 'resized', '[["m",3]]', '[["m",2]]');
"""
)

REJECTIONS = "accordion_scheduler_rejections"
RESIZES = "accordion_job_resizes"


def test_totals_are_set_not_added_and_read_back(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        assert journal.totals() == {}
        journal.record_totals({(REJECTIONS, (("reason", "too_wide"),)): 2})
        journal.record_totals({(REJECTIONS, (("reason", "too_wide"),)): 3})  # a later count
        journal.record_totals({("accordion_scheduler_agents_suspect", ()): 1})
        journal.record_totals({})
    with Journal(tmp_path / "j.sqlite") as journal:
        assert journal.totals() == {
            ("accordion_scheduler_agents_suspect", ()): 1,
            (REJECTIONS, (("reason", "too_wide"),)): 3,
        }
        assert journal.load().totals == journal.totals()


def test_a_rolled_back_batch_takes_its_totals_with_it(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:

        def failing_batch() -> None:
            with journal.transaction():
                journal.record_totals({(REJECTIONS, (("reason", "invalid"),)): 1})
                raise RuntimeError("the batch failed")

        with pytest.raises(RuntimeError):
            failing_batch()
        assert journal.totals() == {}


def test_a_schema_3_journal_gains_totals_seeded_with_its_resizes(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_3)
    with Journal(path) as journal:
        # The schema-2 row has no parts before it: its direction is unknown, not counted.
        assert journal.totals() == {
            (RESIZES, (("direction", "expand"),)): 1,
            (RESIZES, (("direction", "shrink"),)): 1,
        }
        journal.record_totals({(RESIZES, (("direction", "shrink"),)): 2})
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    with Journal(path) as journal:  # opened again: seeded once, not twice
        assert journal.totals()[(RESIZES, (("direction", "shrink"),))] == 2
        # The exporter reads the seeded family under the name it counts resizes by.
        metrics = SchedulerMetrics(CollectorRegistry())
        metrics.restore(journal.load())
    sample = metrics.registry.get_sample_value
    assert sample("accordion_job_resizes_total", {"direction": "shrink"}) == 2
    assert sample("accordion_job_resizes_total", {"direction": "expand"}) == 1


def counted() -> SchedulerMetrics:
    metrics = SchedulerMetrics(CollectorRegistry())
    metrics.rejections.labels(reason="too_wide").inc(3)
    metrics.rejections.labels(reason="walltime").inc()
    metrics.submissions.labels(result="rejected").inc(4)
    metrics.submissions.labels(result="duplicate").inc(2)
    metrics.submissions.labels(result="accepted").inc(9)  # the job rows tell this one
    metrics.bad_messages.labels(reason="not_msgpack").inc(5)
    metrics.agents_lost.labels(reason="silence").inc(2)
    metrics.agents_suspect.inc(3)
    metrics.stale_reports.inc()
    metrics.job_resizes.labels(direction="expand").inc(7)
    return metrics


JOURNALED_SAMPLES = [
    ("accordion_scheduler_rejections_total", {"reason": "too_wide"}, 3),
    ("accordion_scheduler_rejections_total", {"reason": "walltime"}, 1),
    ("accordion_scheduler_rejections_total", {"reason": "invalid"}, 0),
    ("accordion_scheduler_submissions_total", {"result": "rejected"}, 4),
    ("accordion_scheduler_submissions_total", {"result": "duplicate"}, 2),
    ("accordion_scheduler_bad_messages_total", {"reason": "not_msgpack"}, 5),
    ("accordion_scheduler_agents_lost_total", {"reason": "silence"}, 2),
    ("accordion_scheduler_agents_suspect_total", None, 3),
    ("accordion_scheduler_stale_reports_total", None, 1),
    ("accordion_job_resizes_total", {"direction": "expand"}, 7),
]


def test_unsaved_totals_are_what_changed_since_the_last_call() -> None:
    metrics = counted()
    first = metrics.unsaved_totals()
    assert first[(REJECTIONS, (("reason", "too_wide"),))] == 3
    assert ("accordion_scheduler_submissions", (("result", "accepted"),)) not in first
    assert metrics.unsaved_totals() == {}
    metrics.bad_messages.labels(reason="invalid").inc()
    assert metrics.unsaved_totals() == {
        ("accordion_scheduler_bad_messages", (("reason", "invalid"),)): 1
    }


def test_restored_totals_equal_the_journaled_ones(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.record_totals(counted().unsaved_totals())
        state = journal.load()
    restored = SchedulerMetrics(CollectorRegistry())
    restored.restore(state)
    sample = restored.registry.get_sample_value
    for name, labels, value in JOURNALED_SAMPLES:
        assert sample(name, labels) == value, (name, labels)
    # Accepted submissions come from the job rows (none here), not from the totals.
    assert sample("accordion_scheduler_submissions_total", {"result": "accepted"}) == 0
    assert restored.unsaved_totals() == {}  # nothing new to write back


def test_a_total_this_scheduler_does_not_count_is_named_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = SchedulerMetrics(CollectorRegistry())
    state = JournalState(
        None,
        [],
        {
            ("accordion_scheduler_gone", ()): 4,
            (REJECTIONS, (("why", "too_wide"),)): 2,
            (REJECTIONS, (("reason", "walltime"),)): 1,
        },
    )
    with caplog.at_level(logging.WARNING, logger="scheduler.runtime.exporter"):
        metrics.restore(state)
    assert "accordion_scheduler_gone" in caplog.text
    assert "labels differ" in caplog.text
    sample = metrics.registry.get_sample_value
    assert sample("accordion_scheduler_rejections_total", {"reason": "walltime"}) == 1


def test_a_journaled_counter_is_its_counter_plus_a_tally() -> None:
    registry = CollectorRegistry()
    tally = Tally()
    rejected = JournaledCounter(
        Counter("x_rejections", "test", ["reason"], registry=registry),
        tally,
        untallied=[(("reason", "ignored"),)],
    )
    plain = JournaledCounter(Counter("x_suspect", "test", registry=registry), tally)
    rejected.labels(reason="wide").inc(2)
    rejected.labels(reason="ignored").inc(5)  # Prometheus only
    plain.inc()
    assert registry.get_sample_value("x_rejections_total", {"reason": "wide"}) == 2
    assert registry.get_sample_value("x_rejections_total", {"reason": "ignored"}) == 5
    assert tally.take_changed() == {
        ("x_rejections", (("reason", "wide"),)): 2,
        ("x_suspect", ()): 1,
    }
    assert tally.take_changed() == {}
    # What client_python refuses changes neither the counter nor the tally.
    with pytest.raises(ValueError, match="negative"):
        rejected.labels(reason="wide").inc(-1)
    with pytest.raises(ValueError, match="label names"):
        rejected.labels(why="wide")
    with pytest.raises(ValueError, match="missing label values"):
        rejected.inc()  # it has labels
    assert tally.take_changed() == {}
    assert tally.totals()[("x_rejections", (("reason", "wide"),))] == 2
