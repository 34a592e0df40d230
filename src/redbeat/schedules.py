"""Schedule types Celery does not ship: ``rrule`` and a ``crontab`` with its own zone.

Both are ordinary Celery schedules (``is_due``/``remaining_estimate`` work as Celery's
beat expects) whose next run is computed by :mod:`redbeat.nexttime`, so the scheduler,
the CLI and Celery's own API agree on when an entry runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo

from celery import schedules as celery_schedules
from celery.schedules import BaseSchedule as schedule  # noqa: F401  # 2.4.2's names here
from celery.schedules import schedstate  # noqa: F401

# dateutil's frequency constants, and its rrule class under 2.4.2's name for it,
# importable from here as from celery-redbeat 2.4.2.
from dateutil.rrule import DAILY, HOURLY, MINUTELY, MONTHLY, SECONDLY, WEEKLY, YEARLY
from dateutil.rrule import rrule as dateutil_rrule

from . import compat

UTC = timezone.utc


FREQUENCIES = {
    "YEARLY": YEARLY, "MONTHLY": MONTHLY, "WEEKLY": WEEKLY, "DAILY": DAILY,
    "HOURLY": HOURLY, "MINUTELY": MINUTELY, "SECONDLY": SECONDLY,
}
FREQUENCY_NAMES = {value: name for name, value in FREQUENCIES.items()}

RRULE_FIELDS = (
    "wkst", "count", "bysetpos", "bymonth", "bymonthday", "byyearday", "byeaster",
    "byweekno", "byweekday", "byhour", "byminute", "bysecond",
)
#: The BY-parts: rules that pick runs inside a period (everything but wkst and count).
BY_PARTS = RRULE_FIELDS[2:]

#: The shortest interval schedule stored (seconds). A slot's task id is
#: ``<name>:<due epoch ms>`` and scores are milliseconds, so under 1 ms two slots share an
#: id; a tick costs one to three Redis round trips (about a millisecond each on a LAN,
#: more across zones), so a faster interval only measures how fast beat can loop. 0.1 s
#: leaves two orders of magnitude to both, and is still far below what beat is for.
MIN_INTERVAL = 0.1
#: An rrule computation passes over at most this many runs that are not its answer
#: (see :mod:`redbeat.nexttime`); a rule with ``count`` above it must have one run per
#: period, so that the runs before a moment are counted, not walked.
MAX_RRULE_STEPS = 100_000


def check_interval(schedule: Any) -> None:  # noqa: F811  # the parameter, not the name
    """ValueError for an interval schedule shorter than :data:`MIN_INTERVAL`: checked
    where entries are built and where intervals are encoded or decoded, so none is
    stored and none written raw into Redis is run."""
    if isinstance(schedule, celery_schedules.schedule):
        every = schedule.run_every.total_seconds()
        if not every >= MIN_INTERVAL:  # also refuses NaN
            raise ValueError(f"interval must be at least {MIN_INTERVAL} seconds, not {every!r}")


def as_zone(zone: str | Any | None) -> Any:
    """A tzinfo from an IANA name (or a tzinfo passed through); None stays None."""
    if zone is None or not isinstance(zone, str):
        return zone
    return ZoneInfo(zone)


def zone_name(tz: Any) -> str | None:
    """The IANA name of a named zone (ZoneInfo), else None (fixed offsets have none)."""
    return getattr(tz, "key", None)


class _ScheduleProtocol(celery_schedules.BaseSchedule):
    """Celery's schedule protocol answered from :mod:`redbeat.nexttime`."""

    @compat.own  # Celery's answer, computed by nexttime: not a subclass's own estimate
    def remaining_estimate(self, last_run_at: datetime) -> timedelta | None:
        from .nexttime import next_after

        upcoming = next_after(self, self.maybe_make_aware(last_run_at))
        if upcoming is None:
            return None
        return upcoming - self.maybe_make_aware(self.now())

    def is_due(self, last_run_at: datetime) -> celery_schedules.schedstate:
        from .nexttime import next_after

        now = self.maybe_make_aware(self.now())
        upcoming = next_after(self, self.maybe_make_aware(last_run_at))
        if upcoming is None:
            return celery_schedules.schedstate(False, None)
        if upcoming <= now:
            following = next_after(self, now)
            wait = None if following is None else (following - now).total_seconds()
            return celery_schedules.schedstate(True, wait)
        return celery_schedules.schedstate(False, (upcoming - now).total_seconds())


def on_the_clock(rules: dict[str, Any]) -> dict[str, Any]:
    """``rules`` with the fields smaller than the smallest one they name set to 0: an
    hour without a minute is on the hour, an hour or a minute without a second is on
    the minute. What a person means by "at 9"; dateutil would take the minute and
    second from the rule's start (pure)."""
    named = [name for name in ("byhour", "byminute") if rules.get(name) is not None]
    if not named:
        return rules
    filled = dict(rules)
    if "byhour" in named and rules.get("byminute") is None:
        filled["byminute"] = 0
    if rules.get("bysecond") is None:
        filled["bysecond"] = 0
    return filled


class rrule(_ScheduleProtocol):
    """A Celery schedule over dateutil's rrule (RFC 5545 recurrences).

    ``freq`` is a name (``"DAILY"``) or dateutil's constant; the positional order of the
    arguments is celery-redbeat 2.4.2's (and dateutil's). ``dtstart`` defaults to now,
    cut to the second, as in 2.4.2; dateutil fills a field the rule leaves open from
    ``dtstart``, so without :func:`on_the_clock` ``rrule("DAILY", byhour=9)`` made at
    09:32:46 ran at 09:32:46. A rule given no ``dtstart`` that names an hour or a minute
    runs on it: the smaller fields it leaves open are 0 (``byhour=9`` is 09:00:00,
    ``byminute=15`` is second 0), stored as such, so 2.4.2 reads the same rule. With a
    ``dtstart`` (and for every stored rule, which always has one) dateutil's rule stands.
    A naive ``dtstart``/``until`` is read in ``timezone`` (default UTC). Keeping a
    named zone (``Europe/Paris``) makes a weekly 09:00 rule stay at 09:00 local time
    across daylight-saving changes, which a fixed UTC offset cannot do.
    """

    #: 2.4.2's name for :data:`FREQUENCIES`.
    FREQ_MAP = FREQUENCIES

    def __init__(
        self,
        freq: int | str,
        dtstart: datetime | None = None,
        interval: int = 1,
        wkst: Any = None,
        count: int | None = None,
        until: datetime | None = None,
        *positional_rules: Any,
        timezone: str | Any | None = None,
        nowfun: Any = None,
        app: Any = None,
        **rules: Any,
    ) -> None:
        if len(positional_rules) > len(RRULE_FIELDS) - 2:
            raise TypeError("rrule() got too many positional arguments")
        rules.update(zip(RRULE_FIELDS[2:], positional_rules, strict=False))  # bysetpos...
        rules.update(wkst=wkst, count=count)
        unknown = set(rules) - set(RRULE_FIELDS)
        if unknown:
            raise TypeError(f"rrule() got unexpected arguments: {', '.join(sorted(unknown))}")
        super().__init__(nowfun=nowfun, app=app)
        frequency: Any = FREQUENCIES[freq.upper()] if isinstance(freq, str) else int(freq)
        self.freq = frequency
        if self.freq not in FREQUENCY_NAMES:
            raise ValueError(f"rrule freq must be one of {sorted(FREQUENCIES)}, not {freq!r}")
        zone = as_zone(timezone)
        self.interval = int(interval)
        if self.interval < 1:  # 0 makes dateutil repeat one moment forever
            raise ValueError(f"rrule interval must be a positive integer, not {interval!r}")
        if dtstart is None:
            dtstart = datetime.now(zone or UTC).replace(microsecond=0)
            rules = on_the_clock(rules)
        self.dtstart = self._localize(dtstart, zone)
        self.until = None if until is None else self._localize(until, zone or self.dtstart.tzinfo)
        self.rules = {name: rules.get(name) for name in RRULE_FIELDS}
        self._check_bounded()
        # Not cached: redbeat.nexttime never iterates this object (it resumes the rule
        # near the moment asked), and a cache would keep every run it ever produced.
        self.rrule = dateutil_rrule(
            frequency, dtstart=self.dtstart, interval=self.interval, until=self.until,
            **{k: v for k, v in self.rules.items() if v is not None},
        )

    @property
    def one_per_period(self) -> bool:
        """Whether every period of the rule holds exactly one run, its dtstart's place in
        it: no BY-parts, and a monthly or yearly rule starts on a day every month has.
        Then the runs before a moment are counted by arithmetic, however old the rule."""
        if any(self.rules[name] is not None for name in BY_PARTS):
            return False
        return self.freq not in (YEARLY, MONTHLY) or self.dtstart.day <= 28

    def _check_bounded(self) -> None:
        """Refuse, when built, the rules whose next run could not be found in bounded
        work: rather than an entry that hangs the tick (or is quarantined) later."""
        count = self.rules["count"]
        if count is not None and count > MAX_RRULE_STEPS and not self.one_per_period:
            raise ValueError(
                f"rrule count above {MAX_RRULE_STEPS} needs one run per period (no BY-parts): "
                "the runs before a moment would have to be walked from dtstart")
        positions = self.rules["bysetpos"]
        if positions is None or self.freq < DAILY:
            return
        # Daily and finer, every period is one day (or less) with the same times: a
        # position outside them selects nothing, ever, and dateutil would search forever.
        size = 1
        for name, level in (("byhour", DAILY), ("byminute", HOURLY), ("bysecond", MINUTELY)):
            values = self.rules[name]
            if self.freq <= level and values is not None:
                size *= len(set(values)) if isinstance(values, (list, tuple, set)) else 1
        positions = positions if isinstance(positions, (list, tuple, set)) else (positions,)
        if not any(-size <= position <= size for position in positions if position):
            raise ValueError(f"rrule bysetpos {positions!r} selects none of the {size} run(s) "
                             "of each period: the rule would never run")

    @staticmethod
    def _localize(moment: datetime, zone: Any) -> datetime:
        if moment.tzinfo is None:
            return moment.replace(tzinfo=zone or UTC)
        return moment.astimezone(zone) if zone is not None else moment

    @property
    def zone(self) -> Any:
        return self.dtstart.tzinfo

    @property
    def named_zone(self) -> str | None:
        """The IANA name of the rule's zone, as stored and written by the CLI; None for
        UTC and for fixed offsets, which are stored as the offset (as 2.4.2 stores every
        zone)."""
        name = zone_name(self.zone)
        return name if name != "UTC" else None

    def __getattr__(self, name: str) -> Any:
        # rrule.byhour etc., as dateutil and celery-redbeat 2.4.2 expose them
        rules = self.__dict__.get("rules")
        if rules is not None and name in rules:
            return rules[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<rrule: {FREQUENCY_NAMES[self.freq]} every {self.interval} from {self.dtstart}>"

    @cached_property
    def effective_until(self) -> datetime | None:
        """``until`` when it ends the rule's runs, None when ``count`` ends them first
        (its count-th run falls at or before ``until``, so no run is after it): then the
        two spellings run exactly alike. Worked out once, on first use: nothing changes
        a rule once built (:mod:`redbeat.nexttime` keeps its plan on it too). A rule whose
        runs cannot be found within the bounds of :mod:`redbeat.nexttime` keeps its
        ``until``."""
        from .nexttime import ScheduleBoundError, next_after

        if self.until is None or self.rules["count"] is None:
            return self.until
        without_until = rrule(self.freq, dtstart=self.dtstart, interval=self.interval,
                              **self.rules)
        try:
            ends_first = next_after(without_until, self.until) is None
        except ScheduleBoundError:
            return self.until
        return None if ends_first else self.until

    def _runs_alike(self) -> tuple[Any, ...]:
        # The zone as stored: a named zone moves the runs' instants with its daylight
        # saving, a fixed offset does not, though both may start at the same instant.
        zone = self.named_zone or self.dtstart.utcoffset()
        return (self.freq, self.interval, self.dtstart, zone, self.effective_until, self.rules)

    def __eq__(self, other: object) -> bool:
        """Equal when both run at the same moments as far as their fields say: the same
        freq, interval, start, zone and rules, and the same :attr:`effective_until`.
        Like Celery's schedules an rrule has no hash (its attributes can be assigned)."""
        if not isinstance(other, rrule):
            return NotImplemented
        return self._runs_alike() == other._runs_alike()

    def __reduce__(self) -> Any:
        return (_rebuild_rrule, (self.freq, self.dtstart, self.interval, self.until, self.rules))


def _rebuild_rrule(freq: int, dtstart: datetime, interval: int, until: Any, rules: dict) -> rrule:
    return rrule(freq, dtstart=dtstart, interval=interval, until=until, **rules)


class crontab(_ScheduleProtocol, celery_schedules.crontab):
    """Celery's crontab, evaluated in its own IANA ``timezone`` instead of the app's.

    Without ``timezone`` it behaves as Celery's crontab (the app's zone) and is stored
    exactly as celery-redbeat 2.4.2 stores a crontab.
    """

    def __init__(self, *args: Any, timezone: str | None = None, **kwargs: Any) -> None:
        celery_schedules.crontab.__init__(self, *args, **kwargs)
        self.timezone = timezone
        if timezone is not None:
            ZoneInfo(timezone)  # fail now, not at the first tick

    @property
    def tz(self) -> Any:
        return ZoneInfo(self.timezone) if self.timezone else self.app.timezone

    def __eq__(self, other: object) -> bool:
        same = celery_schedules.crontab.__eq__(self, other)
        if same is NotImplemented or not same:
            return same
        return getattr(other, "timezone", None) == self.timezone

    def __reduce__(self) -> Any:
        fields = (self._orig_minute, self._orig_hour, self._orig_day_of_week,
                  self._orig_day_of_month, self._orig_month_of_year)
        return (_rebuild_crontab, (fields, self.timezone))


def _rebuild_crontab(fields: tuple, zone: str | None) -> crontab:
    return crontab(*fields, timezone=zone)


class clocked(_ScheduleProtocol):
    """Run once, at ``run_at``; then the entry is finished (parked, never read by ticks).

    A ``run_at`` that passed while no scheduler ran still runs once when one starts
    (unless the entry's misfire grace time says it is too late).
    """

    def __init__(self, run_at: datetime, nowfun: Any = None, app: Any = None) -> None:
        super().__init__(nowfun=nowfun, app=app)
        self.run_at = run_at if run_at.tzinfo else run_at.replace(tzinfo=UTC)

    def __repr__(self) -> str:
        return f"<clocked: {self.run_at.isoformat()}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, clocked):
            return NotImplemented
        return self.run_at == other.run_at

    def __reduce__(self) -> Any:
        return (clocked, (self.run_at,))
