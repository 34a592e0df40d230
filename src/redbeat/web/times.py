"""Times as the view shows them: absolute in one stated zone, and relative to now ("in
3 min", "2 h ago"), which the page's script keeps current between loads."""

from __future__ import annotations

from datetime import datetime, tzinfo

from markupsafe import Markup, escape

#: (the most seconds shown in this unit, the unit's size, its name), smallest first.
UNITS = ((90, 1, "s"), (90 * 60, 60, "min"), (36 * 3600, 3600, "h"), (float("inf"), 86400, "d"))


def absolute(moment: datetime | None, zone: tzinfo) -> str:
    if moment is None:
        return "-"
    try:
        return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (OverflowError, ValueError):  # year 1 or 9999 in a zone that moves it out
        return moment.isoformat()


def relative(seconds: float) -> str:
    """``seconds`` from now in words: "in 3 min", "2 h ago", "now" within a second."""
    if abs(seconds) < 1:
        return "now"
    for most, size, unit in UNITS:
        if abs(seconds) < most:
            amount = f"{abs(seconds) / size:.0f} {unit}"
            return f"in {amount}" if seconds > 0 else f"{amount} ago"
    raise AssertionError("unreachable: the last unit has no bound")


def stamp(moment: datetime | None, zone: tzinfo, now: float) -> Markup:
    """A ``<time>`` with the absolute time and, beside it, the relative one; the epoch
    seconds ride along in ``data-epoch`` for the script to update the words."""
    if moment is None:
        return Markup("-")
    try:
        epoch = moment.timestamp()
    except (OverflowError, ValueError, OSError):
        return Markup(escape(absolute(moment, zone)))
    return Markup('<time datetime="{iso}" data-epoch="{epoch:.3f}">{text}</time> '
                  '<span class="rel" data-epoch="{epoch:.3f}">{words}</span>').format(
        iso=moment.isoformat(), epoch=epoch, text=absolute(moment, zone),
        words=relative(epoch - now))
