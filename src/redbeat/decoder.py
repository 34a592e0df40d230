"""The JSON codec for entry definitions and meta: tagged values with ``__type__``.

One registry maps each ``__type__`` to the Python type it stands for, an encoder and a
decoder; adding a schedule type is one :func:`register` call. Shapes that
celery-redbeat 2.4.2 can express are written exactly as 2.4.2 writes them (same keys,
same order), so either package reads what the other wrote; the additions (a crontab's
``timezone``, an rrule's zone name, a weekday's ``n``, ``solar``) appear only on values
that use them. docs/data-format.md lists every shape.
"""

from __future__ import annotations

import calendar
import json
import zoneinfo  # noqa: F401  # 2.4.2's module had these names; public code imports them
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import schedules as celery_schedules
from celery.schedules import crontab, schedule  # noqa: F401  # 2.4.2's re-exports
from dateutil.rrule import weekday

from . import schedules
from .schedules import rrule  # noqa: F401  # 2.4.2's re-export

UTC = timezone.utc


@dataclass(frozen=True)
class TypeCodec:
    name: str
    type: type
    encode: Callable[[Any], dict[str, Any]]
    decode: Callable[[dict[str, Any]], Any]


_CODECS: list[TypeCodec] = []
_BY_NAME: dict[str, TypeCodec] = {}
_BY_TYPE: dict[type, TypeCodec] = {}


def register(codec: TypeCodec) -> None:
    """Add a type. Later registrations win for subclasses, so register specific last."""
    _CODECS.insert(0, codec)
    _BY_NAME[codec.name] = codec
    _BY_TYPE[codec.type] = codec


def codec_for(value: Any) -> TypeCodec | None:
    exact = _BY_TYPE.get(type(value))  # most values are exactly a registered type
    if exact is not None:
        return exact
    for codec in _CODECS:
        if isinstance(value, codec.type):
            return codec
    return None


def tagged(value: Any) -> dict[str, Any]:
    """``value`` as its tagged JSON object; TypeError for a type nobody registered."""
    codec = codec_for(value)
    if codec is None:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return {"__type__": codec.name, **codec.encode(value)}


class RedBeatJSONEncoder(json.JSONEncoder):
    def default(self, obj: Any) -> Any:  # 2.4.2's parameter name, for keyword callers
        return tagged(obj)


class RedBeatJSONDecoder(json.JSONDecoder):
    """Decodes tagged values. An unknown ``__type__`` stays a plain dict (as in 2.4.2), so
    a caller that expected a schedule can say precisely what it found."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("object_hook", decode_tagged)
        super().__init__(*args, **kwargs)

    @staticmethod
    def dict_to_object(d: dict[str, Any]) -> Any:
        """One JSON object as its value (2.4.2's name for the object hook)."""
        return decode_tagged(d)


def decode_tagged(value: dict[str, Any]) -> Any:
    codec = _BY_NAME.get(value.get("__type__"))  # type: ignore[arg-type]
    if codec is None:
        return value
    fields = {k: v for k, v in value.items() if k != "__type__"}
    return codec.decode(fields)


#: Schedule types whose objects never change once built, so entries with the same
#: schedule may share one (Celery's solar moves its observer's date as it computes; an
#: rrule keeps only what resuming it needs, the same for every entry).
SHAREABLE = frozenset({"interval", "crontab", "clocked", "rrule"})


class SharedSchedules:
    """Decodes JSON like :func:`loads`, building each distinct shareable schedule once.

    A thousand entries on ``crontab(minute=0)`` are a thousand equal schedules; Celery
    parses a crontab's fields on construction, which is most of the cost of decoding a
    definition the scheduler has not seen before. Only the scheduler's tick (which never
    changes a schedule) decodes through this; one instance per app, since a schedule
    carries its app (a crontab's default zone is the app's).
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.built: dict[tuple[Any, ...], Any] = {}
        self.decoder = json.JSONDecoder(object_hook=self.decode_tagged)

    def decode_tagged(self, value: dict[str, Any]) -> Any:
        name = value.get("__type__")
        if name not in SHAREABLE:
            return decode_tagged(value)
        # an rrule's BY-parts are lists: as tuples, equal rules share a signature
        signature = tuple((key, tuple(part) if isinstance(part, list) else part)
                          for key, part in value.items())
        try:
            return self.built[signature]
        except KeyError:
            pass
        except TypeError:  # a value that cannot be a key (a list): not shared
            return decode_tagged(value)
        if len(self.built) >= self.limit:
            self.built.clear()
        built = self.built[signature] = decode_tagged(value)
        return built

    def loads(self, text: str) -> Any:
        return self.decoder.decode(text)


# One instance each: building a JSON coder per call costs more than coding a small meta.
_ENCODER = RedBeatJSONEncoder()
_DECODER = RedBeatJSONDecoder()


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def loads(text: str | bytes) -> Any:
    return _DECODER.decode(text.decode() if isinstance(text, bytes) else text)


# -- datetime ------------------------------------------------------------------------


def zone_from_json(zone: Any) -> Any:
    """``"UTC"``/IANA name -> ZoneInfo; a number -> fixed offset of that many seconds."""
    if zone is None:
        return ZoneInfo("UTC")
    if isinstance(zone, (int, float)) and not isinstance(zone, bool):
        return timezone(timedelta(seconds=zone))
    if isinstance(zone, str):
        return ZoneInfo(zone)
    raise ValueError(f"datetime timezone must be a zone name or an offset, not {zone!r}")


def zone_to_json(moment: datetime) -> Any:
    if moment.tzinfo is None:
        return "UTC"
    name = getattr(moment.tzinfo, "key", None)
    if name:
        return name
    offset = moment.utcoffset()
    return offset.total_seconds() if offset is not None else "UTC"


def encode_datetime(moment: datetime) -> dict[str, Any]:
    fields = {
        "year": moment.year, "month": moment.month, "day": moment.day,
        "hour": moment.hour, "minute": moment.minute, "second": moment.second,
        "microsecond": moment.microsecond, "timezone": zone_to_json(moment),
    }
    if moment.fold:
        # the second 01:30 of a fall-back night; 2.4.2 passes the key to datetime() too
        fields["fold"] = 1
    return fields


def decode_datetime(fields: dict[str, Any]) -> datetime:
    zone = zone_from_json(fields.pop("timezone", "UTC"))
    return datetime(tzinfo=zone, **fields)


# -- schedules -----------------------------------------------------------------------


def encode_interval(value: celery_schedules.schedule) -> dict[str, Any]:
    schedules.check_interval(value)  # every save goes through here
    return {"every": value.run_every.total_seconds(), "relative": bool(value.relative)}


def decode_interval(fields: dict[str, Any]) -> celery_schedules.schedule:
    every = fields["every"]
    if isinstance(every, bool) or not isinstance(every, (int, float)) or every <= 0:
        raise ValueError(f"interval 'every' must be a positive number of seconds, not {every!r}")
    if not every >= schedules.MIN_INTERVAL:  # written raw: quarantined, not run
        raise ValueError(f"interval 'every' must be at least {schedules.MIN_INTERVAL} seconds, "
                         f"not {every!r}")
    return celery_schedules.schedule(run_every=float(every), relative=bool(fields.get("relative")))


CRONTAB_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")


def encode_crontab(value: celery_schedules.crontab) -> dict[str, Any]:
    fields = {name: getattr(value, f"_orig_{name}") for name in CRONTAB_FIELDS}
    zone = getattr(value, "timezone", None)
    if zone:
        fields["timezone"] = zone
    return fields


def decode_crontab(fields: dict[str, Any]) -> celery_schedules.crontab:
    unknown = set(fields) - set(CRONTAB_FIELDS) - {"timezone"}
    if unknown:
        raise ValueError(f"crontab has unknown fields: {', '.join(sorted(unknown))}")
    values = {name: fields.get(name, "*") for name in CRONTAB_FIELDS}
    if fields.get("timezone"):
        return schedules.crontab(**values, timezone=fields["timezone"])
    return celery_schedules.crontab(**values)


def encode_solar(value: celery_schedules.solar) -> dict[str, Any]:
    return {"event": value.event, "lat": value.lat, "lon": value.lon}


def decode_solar(fields: dict[str, Any]) -> celery_schedules.solar:
    return celery_schedules.solar(fields["event"], float(fields["lat"]), float(fields["lon"]))


def to_timestamp(dt: datetime) -> int:
    """Whole epoch seconds of ``dt`` (naive means UTC): how 2.4.2 stores rrule times.
    (Parameter names here are 2.4.2's, for keyword callers.)"""
    return calendar.timegm(dt.utctimetuple())


def get_utcoffset_minutes(dt: datetime) -> float | int:
    """The UTC offset of ``dt`` in minutes (0 for naive)."""
    offset = dt.utcoffset()
    return offset.total_seconds() / 60 if offset else 0


def from_timestamp(seconds: float, tz_minutes: float = 0) -> datetime:
    """Epoch seconds as an aware datetime at a fixed offset of ``tz_minutes``."""
    zone = timezone(timedelta(minutes=tz_minutes)) if tz_minutes else UTC
    return datetime.fromtimestamp(seconds, tz=zone)


def encode_rrule(value: schedules.rrule) -> dict[str, Any]:
    fields: dict[str, Any] = {"freq": value.freq, "interval": value.interval}
    fields.update(value.rules)
    fields["dtstart"] = to_timestamp(value.dtstart)
    fields["dtstart_tz"] = get_utcoffset_minutes(value.dtstart)
    if value.until is not None:
        fields["until"] = to_timestamp(value.until)
        fields["until_tz"] = get_utcoffset_minutes(value.until)
    if value.named_zone:
        fields["timezone"] = value.named_zone
    return fields


def _moment_from_json(epoch: Any, offset_minutes: Any, zone: Any) -> datetime | None:
    if epoch is None:
        return None
    if zone is not None:
        return datetime.fromtimestamp(float(epoch), tz=UTC).astimezone(zone)
    return from_timestamp(float(epoch), float(offset_minutes or 0))


def decode_rrule(fields: dict[str, Any]) -> schedules.rrule:
    zone = schedules.as_zone(fields.pop("timezone", None))
    dtstart = _moment_from_json(fields.pop("dtstart", None), fields.pop("dtstart_tz", 0), zone)
    until = _moment_from_json(fields.pop("until", None), fields.pop("until_tz", 0), zone)
    freq = fields.pop("freq")
    return schedules.rrule(freq, dtstart=dtstart, until=until, **fields)


def encode_weekday(value: weekday) -> dict[str, Any]:
    fields: dict[str, Any] = {"wkday": value.weekday}
    if value.n:
        fields["n"] = value.n
    return fields


def decode_weekday(fields: dict[str, Any]) -> weekday:
    return weekday(int(fields["wkday"]), fields.get("n"))


def encode_clocked(value: schedules.clocked) -> dict[str, Any]:
    return {"run_at": tagged(value.run_at)}


def decode_clocked(fields: dict[str, Any]) -> schedules.clocked:
    run_at = fields["run_at"]
    if not isinstance(run_at, datetime):
        raise ValueError("clocked 'run_at' must be a tagged datetime")
    return schedules.clocked(run_at)


# Registered general first, specific last (a later registration is tried first).
for _codec in (
    TypeCodec("datetime", datetime, encode_datetime, decode_datetime),
    TypeCodec("weekday", weekday, encode_weekday, decode_weekday),
    TypeCodec("interval", celery_schedules.schedule, encode_interval, decode_interval),
    TypeCodec("crontab", celery_schedules.crontab, encode_crontab, decode_crontab),
    TypeCodec("solar", celery_schedules.solar, encode_solar, decode_solar),
    TypeCodec("rrule", schedules.rrule, encode_rrule, decode_rrule),
    TypeCodec("clocked", schedules.clocked, encode_clocked, decode_clocked),
):
    register(_codec)
