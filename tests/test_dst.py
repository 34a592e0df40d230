"""Daylight-saving transitions through the real tick with a controlled clock.

The rule (docs/semantics.md): a wall time that does not exist runs once, shifted
forward by the length of the gap; a wall time that happens twice runs once, at its
first occurrence, unless the crontab runs every hour, which then runs at both.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import crontab, rrule
from support.recording import Recording

UTC = timezone.utc


def sent_slots(scheduler: Recording) -> list[tuple[str, datetime]]:
    """Each slot sent: the entry's name and the due time its task id carries."""
    return [(name, datetime.fromtimestamp(int(task_id.rsplit(":", 1)[1]) / 1000, tz=UTC))
            for name, task_id in scheduler.sent]


def run_between(app, start: datetime, end: datetime, restart_at: datetime | None = None,
                step: timedelta = timedelta(minutes=5)) -> list[tuple[str, datetime]]:
    """Tick every ``step`` from ``start`` to ``end``; optionally a new beat midway."""
    now = [start.timestamp()]
    scheduler = Recording(app, clock=lambda: now[0])
    sent: list[tuple[str, datetime]] = []
    moment = start
    while moment <= end:
        if restart_at is not None and moment >= restart_at:
            sent += sent_slots(scheduler)
            scheduler.close()
            scheduler = Recording(app, clock=lambda: now[0])
            restart_at = None
        now[0] = moment.timestamp()
        for _ in range(5):  # 0.0: the lease was just taken, or more is due now: again
            if scheduler.tick() != 0.0:
                break
        moment += step
    sent += sent_slots(scheduler)
    scheduler.close()
    return sent


def local(zone: str, *fields: int, fold: int = 0) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


def save(app, name, schedule, start):
    RedBeatSchedulerEntry(name, "tasks.dst", schedule, app=app,
                          last_run_at=start - timedelta(seconds=1)).save()


LONDON, NEW_YORK = "Europe/London", "America/New_York"
#: a tick every quarter of an hour: on each wall time these tests schedule (:00, :15, :30,
#: :45), and each tick in a gap or a repeated hour
QUARTER = timedelta(minutes=15)
CASES = [
    # zone, transition day (local), wall time in the gap or overlap, expected run(s)
    (LONDON, "spring", (2026, 3, 29), (1, 30), [(LONDON, (2026, 3, 29, 2, 30))]),
    (LONDON, "autumn", (2026, 10, 25), (1, 30), [(LONDON, (2026, 10, 25, 1, 30))]),
    (NEW_YORK, "spring", (2026, 3, 8), (2, 30), [(NEW_YORK, (2026, 3, 8, 3, 30))]),
    (NEW_YORK, "autumn", (2026, 11, 1), (1, 30), [(NEW_YORK, (2026, 11, 1, 1, 30))]),
    ("Australia/Lord_Howe", "spring", (2026, 10, 4), (2, 15),
     [("Australia/Lord_Howe", (2026, 10, 4, 2, 45))]),
    ("Australia/Lord_Howe", "autumn", (2026, 4, 5), (1, 45),
     [("Australia/Lord_Howe", (2026, 4, 5, 1, 45))]),
]


@pytest.mark.parametrize(("zone", "season", "day", "wall", "expected"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
@pytest.mark.parametrize("kind", ["crontab", "rrule"])
def test_daily_job_on_transition_night_runs_exactly_once(redis_server, zone, season, day,
                                                         wall, expected, kind):
    app = make_app(redis_server.url)
    # the runs of the transition day (local) are compared: from an hour before it to an
    # hour after, every quarter of an hour (each wall time compared is on one)
    start = local(zone, *day, 0, 0) - timedelta(hours=1)
    end = start + timedelta(hours=26)
    hour, minute = wall
    if kind == "crontab":
        schedule = crontab(minute=minute, hour=hour, timezone=zone)
    else:
        schedule = rrule("DAILY", dtstart=datetime(2026, 1, 1, hour, minute), timezone=zone)
    save(app, "daily", schedule, start)
    sent = [due for name, due in run_between(app, start, end, step=QUARTER)
            if name == "daily"]
    day_of = datetime(*day).date()
    transition = [due for due in sent if due.astimezone(ZoneInfo(zone)).date() == day_of]
    assert transition == [local(z, *fields) for z, fields in expected]


GAPS = [
    # every wall time inside the gap runs once, shifted forward by the gap's length; a
    # shifted time that falls on a real wall time of the schedule (02:00 -> 03:00 EDT)
    # is one run
    (crontab(minute="*/20", hour="1-2", timezone=NEW_YORK), (2027, 3, 14), NEW_YORK,
     [(1, 0), (1, 20), (1, 40), (3, 0), (3, 20), (3, 40)]),
    (crontab(minute="*/20", hour="2-3", timezone=NEW_YORK), (2027, 3, 14), NEW_YORK,
     [(3, 0), (3, 20), (3, 40)]),
    (crontab(minute="0,30", hour=1, timezone=LONDON), (2027, 3, 28), LONDON,
     [(2, 0), (2, 30)]),
    # the same rule for rrules
    (rrule("MINUTELY", interval=20, byhour=[1, 2], dtstart=datetime(2027, 1, 1),
           timezone=NEW_YORK), (2027, 3, 14), NEW_YORK,
     [(1, 0), (1, 20), (1, 40), (3, 0), (3, 20), (3, 40)]),
    (rrule("MINUTELY", interval=20, byhour=[2, 3], dtstart=datetime(2027, 1, 1),
           timezone=NEW_YORK), (2027, 3, 14), NEW_YORK, [(3, 0), (3, 20), (3, 40)]),
    (rrule("DAILY", byhour=1, byminute=[0, 30], dtstart=datetime(2027, 1, 1),
           timezone=LONDON), (2027, 3, 28), LONDON, [(2, 0), (2, 30)]),
]


@pytest.mark.parametrize(("schedule", "day", "zone", "walls"), GAPS,
                         ids=[f"{kind}-{case}" for kind in ("crontab", "rrule")
                              for case in ("new-york-1-2", "new-york-2-3", "london-1")])
def test_every_wall_time_in_a_spring_forward_gap_runs_once(redis_server, schedule, day, zone,
                                                           walls):
    """Issue 12, item 1: only the first wall time in the gap ran."""
    app = make_app(redis_server.url)
    start = local(zone, *day, 0, 0) - timedelta(hours=2)
    save(app, "gap", schedule, start)
    sent = [due for name, due in run_between(app, start, start + timedelta(hours=8),
                                             step=timedelta(minutes=10)) if name == "gap"]
    assert sent == [local(zone, *day, *wall) for wall in walls]


@pytest.mark.parametrize(("zone", "spring", "autumn"), [
    ("Europe/London", (2026, 3, 29), (2026, 10, 25)),
    ("America/New_York", (2026, 3, 8), (2026, 11, 1)),
])
def test_hourly_job_stays_hourly_in_real_time(redis_server, zone, spring, autumn):
    app = make_app(redis_server.url)
    for day, season in ((spring, "spring"), (autumn, "autumn")):
        start = local(zone, *day, 0, 0) - timedelta(hours=3)
        end = start + timedelta(hours=8)
        name = f"hourly-{season}"
        save(app, name, crontab(minute=30, timezone=zone), start)
        sent = sorted(due for n, due in run_between(app, start, end, step=QUARTER)
                      if n == name)
        gaps = {b - a for a, b in zip(sent, sent[1:], strict=False)}
        assert gaps == {timedelta(hours=1)}, (season, sent)
        assert len(sent) == 8


def test_restart_in_the_middle_of_a_fall_back_hour_neither_repeats_nor_skips(redis_server):
    app = make_app(redis_server.url)
    zone = "Europe/London"
    start = local(zone, 2026, 10, 24, 22, 0)
    end = local(zone, 2026, 10, 25, 4, 0)
    save(app, "hourly", crontab(minute="*/20", timezone=zone), start)
    save(app, "daily", crontab(minute=30, hour=1, timezone=zone), start)
    restart = local(zone, 2026, 10, 25, 1, 35, fold=1)  # inside the second 01:xx
    sent = run_between(app, start, end, restart_at=restart)
    hourly = sorted(due for name, due in sent if name == "hourly")
    assert len(hourly) == len(set(hourly))
    assert {b - a for a, b in zip(hourly, hourly[1:], strict=False)} == {timedelta(minutes=20)}
    assert [due for name, due in sent if name == "daily"] == [local(zone, 2026, 10, 25, 1, 30)]


def test_intervals_ignore_dst(redis_server):
    app = make_app(redis_server.url, timezone="Europe/London")
    start = local("Europe/London", 2026, 3, 28, 22, 0)
    end = start + timedelta(hours=6)
    save(app, "every-hour", 3600.0, start)
    sent = sorted(due for name, due in run_between(app, start, end) if name == "every-hour")
    assert {b - a for a, b in zip(sent, sent[1:], strict=False)} == {timedelta(hours=1)}


@pytest.mark.parametrize("enable_utc", [True, False])
def test_relative_intervals_round_on_the_app_zones_clock(redis_server, enable_utc):
    """Issue 12, item 3: as in Celery, a relative interval is rounded in the app's zone
    (it was rounded in UTC): hourly on Kolkata's hour (:30 UTC), daily at its midnight."""
    from celery.schedules import schedule

    zone = "Asia/Kolkata"
    app = make_app(redis_server.url, timezone=zone, enable_utc=enable_utc)
    start = local(zone, 2027, 5, 4, 9, 10)
    save(app, "hourly", schedule(timedelta(hours=1), relative=True), start)
    save(app, "daily", schedule(timedelta(days=1), relative=True), start)
    # every 10 minutes from 09:10: a tick on each hour, as on each slot
    sent = run_between(app, start, start + timedelta(hours=40), step=timedelta(minutes=10))
    hourly = [due for name, due in sent if name == "hourly"]
    assert hourly[:3] == [local(zone, 2027, 5, 4, hour, 0) for hour in (10, 11, 12)]
    assert len(hourly) == 40 and {due.minute for due in hourly} == {30}  # in UTC
    assert [due for name, due in sent if name == "daily"] == [local(zone, 2027, 5, day, 0, 0)
                                                              for day in (5, 6)]


def test_app_timezone_crontab_follows_the_app_zone(redis_server):
    app = make_app(redis_server.url, timezone="America/New_York", enable_utc=True)
    start = local("America/New_York", 2026, 3, 7, 12, 0)
    from celery.schedules import crontab as celery_crontab

    save(app, "app-tz", celery_crontab(minute=30, hour=2, app=app), start)
    sent = [due for name, due in run_between(app, start, start + timedelta(hours=30),
                                             step=QUARTER) if name == "app-tz"]
    assert sent == [local("America/New_York", 2026, 3, 8, 3, 30)]


@pytest.mark.parametrize("season", ["spring", "autumn"])
@pytest.mark.parametrize("kind", ["crontab", "rrule"])
def test_london_0230_runs_once_on_both_transition_nights(redis_server, season, kind):
    # London changes at 01:00 local, so 02:30 exists once on both nights: the job must
    # neither move nor repeat (a UTC-offset rrule would run at 01:30 or 03:30 instead).
    app = make_app(redis_server.url)
    day = (2026, 3, 29) if season == "spring" else (2026, 10, 25)
    start = local(LONDON, *day, 0, 0) - timedelta(hours=3)
    if kind == "crontab":
        schedule = crontab(minute=30, hour=2, timezone=LONDON)
    else:
        schedule = rrule("DAILY", dtstart=datetime(2026, 1, 1, 2, 30), timezone=LONDON)
    save(app, "daily", schedule, start)
    sent = [due for name, due in run_between(app, start, start + timedelta(hours=8),
                                             step=QUARTER) if name == "daily"]
    assert sent == [local(LONDON, *day, 2, 30)]


def test_lord_howe_hourly_runs_every_wall_clock_half_hour(redis_server):
    # Lord Howe moves by 30 minutes: in spring 02:00 jumps to 02:30, in autumn 02:00
    # falls back to 01:30. An every-hour crontab runs at each wall-clock :30 that
    # happens, so both 01:30s run in autumn and 02:30 follows 01:30 by 30 min in spring.
    app = make_app(redis_server.url)
    zone = "Australia/Lord_Howe"
    for name, day in (("spring", (2026, 10, 4)), ("autumn", (2026, 4, 5))):
        start = local(zone, *day, 0, 0)
        save(app, name, crontab(minute=30, timezone=zone), start)
        end = local(zone, *day, 3, 45)
        sent = sorted(due for n, due in run_between(app, start, end) if n == name)
        walls = [(due.astimezone(ZoneInfo(zone)).strftime("%H:%M"),
                  due.astimezone(ZoneInfo(zone)).utcoffset()) for due in sent]
        gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
        if name == "spring":
            assert [w for w, _ in walls] == ["00:30", "01:30", "02:30", "03:30"]
            assert gaps == [timedelta(hours=1), timedelta(minutes=30), timedelta(hours=1)]
        else:
            assert [w for w, _ in walls] == ["00:30", "01:30", "01:30", "02:30", "03:30"]
            assert walls[1][1] != walls[2][1]  # the two 01:30s are different instants
            assert gaps == [timedelta(hours=1), timedelta(minutes=30), timedelta(hours=1),
                            timedelta(hours=1)]


@pytest.mark.parametrize("kind", ["crontab", "rrule"])
def test_leap_day_rule_runs_only_on_february_29(redis_server, kind):
    app = make_app(redis_server.url)
    zone = NEW_YORK
    start = local(zone, 2027, 2, 1, 0, 0)
    if kind == "crontab":
        schedule = crontab(minute=30, hour=2, day_of_month=29, month_of_year=2, timezone=zone)
    else:
        schedule = rrule("YEARLY", dtstart=datetime(2027, 1, 1, 2, 30), bymonth=2,
                         bymonthday=29, timezone=zone)
    save(app, "leap", schedule, start)
    # one tick a week for 14 months (2027-03-01 and 2028-02-28 among them): 2027 has no
    # Feb 29, 2028 has one; a run falsely due in between would be sent by the next tick
    sent = [due for name, due in run_between(app, start, local(zone, 2028, 4, 1, 0, 0),
                                             step=timedelta(days=7)) if name == "leap"]
    assert sent == [local(zone, 2028, 2, 29, 2, 30)]


def test_month_end_rules(redis_server):
    app = make_app(redis_server.url)
    zone = "Australia/Lord_Howe"
    start = local(zone, 2028, 1, 1, 0, 0)
    # bymonthday=-1 is every month's last day; a crontab's 31 skips the shorter months
    save(app, "last-day", rrule("MONTHLY", dtstart=datetime(2028, 1, 1, 2, 30),
                                bymonthday=-1, timezone=zone), start)
    save(app, "the-31st", crontab(minute=30, hour=2, day_of_month=31, timezone=zone), start)
    # a tick a week: a run falsely due in between would be sent by the next tick
    sent = run_between(app, start, local(zone, 2028, 7, 1, 12, 0), step=timedelta(days=7))
    last_day = [due.astimezone(ZoneInfo(zone)).date().isoformat()
                for name, due in sent if name == "last-day"]
    the_31st = [due.astimezone(ZoneInfo(zone)).date().isoformat()
                for name, due in sent if name == "the-31st"]
    assert last_day == ["2028-01-31", "2028-02-29", "2028-03-31", "2028-04-30",
                        "2028-05-31", "2028-06-30"]
    assert the_31st == ["2028-01-31", "2028-03-31", "2028-05-31"]
    # the wall time holds across Lord Howe's April change (+11 -> +10:30)
    assert {due.astimezone(ZoneInfo(zone)).strftime("%H:%M") for name, due in sent
            if name in ("last-day", "the-31st")} == {"02:30"}


# -- issue 24 through the real tick ----------------------------------------------------

TROLL, LORD_HOWE = "Antarctica/Troll", "Australia/Lord_Howe"
ISSUE_24_GAPS = [
    (rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone=LONDON), LONDON,
     (2027, 3, 28), [(0, 0), (0, 45), (2, 15), (2, 30), (3, 0), (3, 45), (4, 30)]),
    (rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone=NEW_YORK),
     NEW_YORK, (2027, 3, 14), [(0, 0), (0, 45), (1, 30), (3, 0), (3, 15), (3, 45), (4, 30)]),
    (crontab(minute="10,20,30", hour=2, timezone=LORD_HOWE), LORD_HOWE, (2027, 10, 3),
     [(2, 30), (2, 40), (2, 50)]),
    (crontab(minute="*/25", hour="2-4", timezone=TROLL), TROLL, (2027, 3, 28),
     [(3, 0), (3, 25), (3, 50), (4, 0), (4, 25), (4, 50)]),
]


@pytest.mark.parametrize(("schedule", "zone", "day", "walls"), ISSUE_24_GAPS,
                         ids=["london-rrule-45", "new-york-rrule-45", "lord-howe-crontab",
                              "troll-crontab"])
def test_real_wall_times_after_a_gap_are_sent(redis_server, schedule, zone, day, walls):
    """Issue 24, item 1: a real wall time just after a gap was never sent when a shifted
    wall of the gap came after it (02:15 BST, 03:00 EDT, Lord Howe's 02:30, Troll's
    03:00, 03:25 and 03:50)."""
    app = make_app(redis_server.url)
    start = local(zone, *day, 0, 0) - timedelta(minutes=1)
    save(app, "gap", schedule, start)
    sent = [due for name, due in run_between(app, start, local(zone, *day, 4, 59),
                                             step=timedelta(minutes=5)) if name == "gap"]
    assert sent == [local(zone, *day, *wall) for wall in walls]


def run_with_downtime(app, start: datetime, down: datetime, back: datetime,
                      end: datetime) -> list[tuple[str, datetime]]:
    """Ticks every minute from ``start`` to ``end``, none from ``down`` to ``back``
    (beat was down), a new beat from ``back`` on."""
    before = run_between(app, start, down - timedelta(minutes=1), step=timedelta(minutes=1))
    return before + run_between(app, back, end, step=timedelta(minutes=1))


@pytest.mark.parametrize(("schedule", "policy", "zone", "down", "back", "caught_up"), [
    # fall back, coalesced: one run for the downtime, the latest (01:59 BST); 01:34 BST
    # was sent, then 01:59 BST at the next tick
    (rrule("MINUTELY", interval=25, dtstart=datetime(2027, 10, 31, 0, 19), timezone=LONDON),
     {}, LONDON, datetime(2027, 10, 31, 0, 10, tzinfo=UTC),
     datetime(2027, 10, 31, 1, 40, tzinfo=UTC), [(1, 59, 0)]),
    # spring forward, each slot: the walls of the gap, run shifted, were lost
    (rrule("MINUTELY", interval=7, dtstart=datetime(2027, 1, 1), timezone=NEW_YORK),
     {"coalesce": False, "max_catch_up": 100}, NEW_YORK,
     datetime(2027, 3, 14, 6, 35, tzinfo=UTC), datetime(2027, 3, 14, 7, 35, tzinfo=UTC),
     [(1, 35, 0), (1, 42, 0), (1, 49, 0), (1, 56, 0), (3, 3, 0), (3, 6, 0), (3, 10, 0), (3, 13, 0),
      (3, 17, 0), (3, 20, 0), (3, 24, 0), (3, 27, 0), (3, 31, 0), (3, 34, 0)]),
], ids=["london-fall-back-coalesced", "new-york-spring-forward-each"])
def test_a_catch_up_across_a_transition_sends_the_runs_of_the_downtime(
        redis_server, schedule, policy, zone, down, back, caught_up):
    """Issue 24, item 2, through the tick: beat down across the transition."""
    app = make_app(redis_server.url)
    start = down - timedelta(minutes=30)
    RedBeatSchedulerEntry("catch-up", "tasks.dst", schedule, app=app,
                          last_run_at=start - timedelta(seconds=1), **policy).save()
    sent = run_with_downtime(app, start, down, back, back + timedelta(minutes=1))
    at_back = [due for name, due in sent if name == "catch-up" and due >= down]
    day = back.astimezone(ZoneInfo(zone))
    assert at_back == [local(zone, day.year, day.month, day.day, hour, minute, fold=fold)
                       for hour, minute, fold in caught_up]


def test_a_one_off_before_its_window_is_sent_when_the_window_opens(redis_server):
    """Issue 24, item 3: clocked(17:00) with start_time 18:00 was sent at 17:00."""
    from redbeat.schedules import clocked

    app = make_app(redis_server.url)
    five, six = datetime(2027, 1, 1, 17, tzinfo=UTC), datetime(2027, 1, 1, 18, tzinfo=UTC)
    RedBeatSchedulerEntry("once", "tasks.dst", clocked(five), app=app, start_time=six).save()
    sent = run_between(app, five - timedelta(minutes=10), six + timedelta(minutes=10))
    assert sent == [("once", six)]


def test_a_crontab_years_away_is_scheduled_for_then(redis_server):
    """Issue 24, item 4: Feb 29 on a Friday, saved in 2027, was parked as finished
    (score -1) with no error; it runs on 2036-02-29, as Celery says."""
    from celery.schedules import crontab as celery_crontab

    app = make_app(redis_server.url)
    entry = RedBeatSchedulerEntry(
        "leap-friday", "tasks.dst",
        celery_crontab(0, 0, day_of_month=29, month_of_year=2, day_of_week="fri", app=app),
        app=app, last_run_at=datetime(2027, 6, 1, tzinfo=UTC))
    entry.save()
    score = redis_server.client().zscore(entry.config.keys.schedule, entry.key)
    assert score == datetime(2036, 2, 29, tzinfo=UTC).timestamp()
