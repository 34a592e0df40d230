"""redbeat.metrics units: the port setting's validation, the recorder's counters and
the tick decorator's leadership accounting. (Real scrapes during a real beat run are in
test_web_beat.py.)"""

from __future__ import annotations

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from redbeat.metrics import Recorder, measured_tick
from redbeat.settings import RedBeatConfig, SettingError


def config(**conf: object) -> RedBeatConfig:
    app = Celery("metrics-test", set_as_current=False)
    app.conf.update(redbeat_redis_url="redis://127.0.0.1:6379/0", **conf)
    return RedBeatConfig(app)


@pytest.mark.parametrize(("value", "port"), [
    (None, None), (9100, 9100), ("9100", 9100), (1, 1), (65535, 65535)])
def test_metrics_port_accepted(value: object, port: int | None) -> None:
    conf = {} if value is None else {"redbeat_metrics_port": value}
    assert config(**conf).metrics_port == port


@pytest.mark.parametrize("value", [0, -1, 65536, "nine", 9100.5, True])
def test_metrics_port_refused(value: object) -> None:
    with pytest.raises(SettingError, match="redbeat_metrics_port"):
        config(redbeat_metrics_port=value)


def test_metrics_address_defaults_to_loopback() -> None:
    assert config().metrics_address == "127.0.0.1"
    assert config(redbeat_metrics_address="0.0.0.0").metrics_address == "0.0.0.0"


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                     float]:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


class Ticking:
    """A scheduler's shape as the decorator sees it: ``metrics`` and ``leading``."""

    def __init__(self, recorder: Recorder) -> None:
        self.metrics = recorder
        self.leading = False
        self.script: list[bool] = []

    @measured_tick
    def tick(self) -> float:
        self.leading = self.script.pop(0)
        return 1.0


def test_ticks_and_leadership_changes_are_counted() -> None:
    registry = CollectorRegistry()
    scheduler = Ticking(Recorder(registry))
    scheduler.script = [True, True, False, True]
    for _ in range(4):
        assert scheduler.tick() == 1.0
    values = samples(registry)
    assert values[("redbeat_tick_duration_seconds_count", ())] == 4
    assert values[("redbeat_leadership_changes_total", ())] == 3  # took, lost, took
    assert values[("redbeat_leader", ())] == 1


def test_outcomes_start_at_zero_and_count() -> None:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    recorder.dispatched("sent", 3)
    recorder.dispatched("skipped", 0)
    values = samples(registry)
    assert values[("redbeat_dispatches_total", (("outcome", "sent"),))] == 3
    for outcome in ("held", "failed", "skipped"):
        assert values[("redbeat_dispatches_total", (("outcome", outcome),))] == 0


def test_an_inert_recorder_holds_nothing() -> None:
    recorder = Recorder()
    recorder.dispatched("sent")
    recorder.ticked(0.1, True)
    assert recorder.registry is None and not hasattr(recorder, "dispatches")


def test_a_scrape_while_redis_is_away_answers_schedule_up_0_without_retrying() -> None:
    import time

    from conftest import make_app
    from redbeat.metrics import schedule_registry

    app = make_app("redis://127.0.0.1:1/0")  # nothing listens there
    started = time.monotonic()
    values = samples(schedule_registry(app))
    assert values == {("redbeat_schedule_up", ()): 0.0}
    # the scheduler's retry policy would have kept the scrape for its 10 s retry period
    assert time.monotonic() - started < 9  # not the 10-s retry period
