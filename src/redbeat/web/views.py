"""The pages: entries, one entry (and its actions), the timeline, the nodes.

Each handler reads through ``redbeat.browse`` / ``redbeat.manage`` and hands plain
values to a template; nothing here talks to Redis itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any
from urllib.parse import urlencode

import redis.exceptions
from celery import Celery
from flask import Blueprint, abort, current_app, flash, redirect, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from .. import browse, manage
from ..entry import InvalidEntry
from ..failures import Failures, read_failures
from ..keys import MISFIRES
from ..lock import Holder, expiry_words
from ..nextrun import score_time
from ..redaction import redact
from ..run_buckets import RUN_CAP
from ..schedule_text import (
    as_options,
    describe,
    parse_cron,
    parse_every,
    parse_json,
    parse_rrule,
    parse_time,
    parse_zone,
)
from ..schedules import clocked
from ..settings import ensure_conf
from .security import WebSettings

blueprint = Blueprint("redbeat", __name__)
ACTIONS = ("enable", "disable", "run", "delete")
#: The schedule kinds the edit form writes, as the CLI's ``add`` options name them.
SCHEDULE_KINDS = ("every", "cron", "rrule", "at")
#: Timeline bar chart geometry (pixels): one bar per minute.
CHART_HEIGHT, BAR_WIDTH = 160, 1


@dataclass(frozen=True)
class Context:
    celery_app: Celery
    settings: WebSettings
    zone: tzinfo


def _context() -> Context:
    context: Context = current_app.extensions["redbeat"]
    return context


def when(moment: datetime | None, zone: tzinfo | None = None) -> str:
    if moment is None:
        return "-"
    try:
        return moment.astimezone(zone or _context().zone).strftime("%Y-%m-%d %H:%M:%S %Z")
    except OverflowError:  # year 1 or 9999 in a zone that would move it out of range
        return moment.isoformat()


@blueprint.app_errorhandler(redis.exceptions.RedisError)
def redis_failed(exc: Exception) -> tuple[str, int]:
    # redis-py's messages can quote the URL: never show its password
    misplaced = manage.store_for(_context().celery_app).misplaced_types(exc)
    return render_template("error.html",
                           message=f"Redis: {misplaced or redact(str(exc))}"), 503


def http_error(exc: HTTPException) -> tuple[str, int]:
    """A refused request (400, 403, 404) as a page saying why."""
    return render_template("error.html", message=str(exc.description)), exc.code or 500


for _code in (400, 403, 404):
    blueprint.app_errorhandler(_code)(http_error)


@blueprint.route("/")
def home() -> Response:
    return redirect("/entries")


# -- the table -------------------------------------------------------------------------


#: The times a ``from``/``to`` may name, epoch seconds: up to the end of year 9999, the
#: last a page can print. Another value (NaN, inf, 1e20) is ignored: Redis refused NaN
#: (a 503), and printing the band of any of them failed (a 500).
TIME_RANGE = (0.0, 253402300799.0)


def _float_arg(name: str) -> float | None:
    try:
        value = float(request.args[name])
    except (KeyError, ValueError):
        return None
    low, high = TIME_RANGE
    return value if low <= value <= high else None


def _query() -> browse.Query:
    args = request.args
    order = args.get("order", "next")
    state = args.get("state", "")
    try:
        start = max(int(args.get("start", "0")), 0)
    except ValueError:
        start = 0
    return browse.Query(order=order if order in browse.ORDERS else "next",
                        state=state if state in browse.STATES else "",
                        name=args.get("name", "")[:200], task=args.get("task", "")[:200],
                        due_from=_float_arg("from"), due_to=_float_arg("to"),
                        runs=args.get("runs") == "1", start=start)


def _link(query: browse.Query, **changes: Any) -> str:
    values = {"order": query.order, "state": query.state, "name": query.name,
              "task": query.task, "from": query.due_from, "to": query.due_to,
              "runs": 1 if query.runs else None, "start": query.start, **changes}
    return "/entries?" + urlencode({key: value for key, value in values.items()
                                    if value is not None and value != "" and value != 0})


def _row(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    failures = read_failures(info.fields)
    last_run = entry.last_run_at if entry is not None and entry.total_run_count else None
    return {
        "name": info.name, "link": "/entry?" + urlencode({"name": info.name}),
        "task": entry.task if entry else "?",
        "schedule": describe(entry.schedule) if entry else "?",
        "next": when(info.next_run), "last": when(last_run),
        "runs": entry.total_run_count if entry else "-",
        "failed": failures.count if failures else 0,
        "state": info.shown_state, "static": info.static,
    }


@blueprint.route("/entries")
def entries() -> str:
    query = _query()
    started = time.perf_counter()
    page = browse.read_page(_context().celery_app, query)
    elapsed = time.perf_counter() - started
    previous = None
    if query.start and not query.filtered:
        previous = _link(query, start=max(query.start - query.size, 0))
    return render_template(
        "entries.html", query=query, page=page, rows=[_row(info) for info in page.rows],
        orders=browse.ORDERS, states=browse.STATES, elapsed_ms=elapsed * 1000,
        first=_link(query, start=0) if query.start else None, previous=previous,
        following=_link(query, start=page.next_start) if page.next_start is not None
        else None,
        sort_links={order: _link(query, order=order, start=0) for order in browse.ORDERS},
        band=(when(datetime.fromtimestamp(query.due_from, tz=timezone.utc))
              if query.due_from is not None else None),
    )


# -- one entry -------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _raw_json(text: str | None) -> str:
    if text is None:
        return "-"
    try:
        return _json_text(json.loads(text))
    except (ValueError, RecursionError):
        return text


def _history(info: manage.EntryInfo, failures: Failures | None) -> list[dict[str, str]]:
    failed = failures.task_ids() if failures else {}
    rows = []
    for record in info.history:
        failure = failed.get(str(record.get("task_id")))
        rows.append({"task_id": str(record.get("task_id")), "due": str(record.get("due")),
                     "node": str(record.get("node")),
                     "failure": failure.reason if failure else ""})
    return rows


def _definition(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    if entry is None:
        return {}
    runs, short = browse.next_runs(entry, 10, info.score) if entry.enabled else ([], "disabled")
    zone = browse.evaluation_zone(entry)
    policy = {name: value for name, value in vars(entry.policy).items()
              if value != getattr(type(entry.policy)(), name)}
    return {
        "task": entry.task, "schedule": describe(entry.schedule), "zone": str(zone),
        "args": _json_text(entry.args), "kwargs": _json_text(entry.kwargs),
        "options": _json_text(entry.options), "enabled": entry.enabled,
        "runs": entry.total_run_count,
        "last_run": when(entry.last_run_at if entry.total_run_count else None),
        "next_runs": [when(moment, zone) for moment in runs], "short": short,
        "policy": _json_text(policy) if policy else "defaults",
        "form": _edit_form(entry),
    }


def _edit_form(entry: Any) -> dict[str, str] | None:
    """The edit form's values: the task, the arguments as JSON, and the schedule in the
    CLI's syntax (None for a schedule the form cannot write, such as solar)."""
    options = as_options(entry.schedule)
    if not options:
        return None
    given = dict(zip(options[0::2], options[1::2], strict=True))
    kind = options[0][2:]
    return {"task": str(entry.task), "args": json.dumps(entry.args or []),
            "kwargs": json.dumps(entry.kwargs or {}), "kind": kind,
            "schedule": given[options[0]], "zone": given.get("--tz", "")}


@blueprint.route("/entry")
def entry_page() -> str:
    name = request.args.get("name", "")
    try:
        info = manage.get_entry(_context().celery_app, name)
    except KeyError:
        abort(404, f"no entry named {name!r}")
    failures = read_failures(info.fields)
    return render_template(
        "entry.html", info=info, state=info.shown_state, definition=_definition(info),
        history=_history(info, failures), next_run=when(info.next_run),
        failures=[{"task_id": failure.task_id, "at": when(failure.at),
                   "reason": failure.reason} for failure in failures.recent]
        if failures else [], failed=failures.count if failures else 0,
        misfires=_raw_json(info.fields.get(MISFIRES)) if info.fields.get(MISFIRES) else None,
        changed=_raw_json(info.fields.get("changed")),
        raw=_raw_json(info.fields.get("definition")) if info.entry is None else None,
        actions=ACTIONS, kinds=SCHEDULE_KINDS,
    )


@blueprint.route("/entry/action", methods=["POST"])
def entry_action() -> Response:
    app = _context().celery_app
    name, action = request.form.get("name", ""), request.form.get("action", "")
    if action not in ACTIONS:
        abort(400, "unknown action")
    try:
        if action in ("enable", "disable"):
            manage.set_enabled(app, name, action == "enable", changed_by="web")
            flash(f"{action}d {name}")
        elif action == "run":
            task_id = manage.run_now(app, name)
            flash(f"queued {name} as {task_id}; the leader sends it at its next tick")
        else:
            manage.delete_entry(app, name)
            flash(f"deleted {name}")
            return redirect("/entries")
    except KeyError:
        abort(404, f"no entry named {name!r}")
    except InvalidEntry as exc:
        flash(f"cannot {action} {name}: {exc.reason}")
    return redirect("/entry?" + urlencode({"name": name}))


def _schedule_field() -> Any:
    kind, text = request.form.get("kind", ""), request.form.get("schedule", "").strip()
    zone = parse_zone(request.form.get("zone", "").strip() or None, "zone")
    if kind == "every":
        return parse_every(text)
    if kind == "cron":
        return parse_cron(text, zone)
    if kind == "rrule":
        return parse_rrule(text, zone)
    if kind == "at":
        return clocked(parse_time(text, zone, "at"))
    raise ValueError(f"schedule kind must be one of {', '.join(SCHEDULE_KINDS)}")


@blueprint.route("/entry/edit", methods=["POST"])
def entry_edit() -> Response:
    """Change the task, the arguments and the schedule, validated as the CLI's ``edit``
    validates them; a mistake is shown and nothing is written."""
    app = _context().celery_app
    name = request.form.get("name", "")
    back = redirect("/entry?" + urlencode({"name": name}))
    try:
        info = manage.get_entry(app, name)
    except KeyError:
        abort(404, f"no entry named {name!r}")
    if info.static:
        flash(f"not saved: {name!r} comes from beat_schedule, which a beat writes back "
              "when it takes the lead: change it there")
        return back
    try:
        task = request.form.get("task", "").strip()
        if not task:
            raise ValueError("task: the task name is empty")
        manage.edit_entry(app, name, changed_by="web", task=task,
                          args=parse_json(request.form.get("args", ""), "args", list),
                          kwargs=parse_json(request.form.get("kwargs", ""), "kwargs", dict),
                          schedule=_schedule_field())
    except (ValueError, InvalidEntry) as exc:
        flash(f"not saved: {exc}")
        return back
    flash(f"saved {name}")
    return back


# -- timeline and nodes ----------------------------------------------------------------


@blueprint.route("/timeline")
def timeline_page() -> str:
    context = _context()
    timeline = browse.timeline(context.celery_app, time.time())
    buckets = timeline.buckets
    peak = max((bucket.count for bucket in buckets), default=0)
    scale = (CHART_HEIGHT - 10) / peak if peak else 0
    bars: list[dict[str, Any]] = [
        {"x": index * BAR_WIDTH, "height": max(round(bucket.count * scale), 3),  # visible
             "count": bucket.count,
             "label": browse.minute_label(bucket.start, context.zone),
             "link": "/entries?" + urlencode({"from": repr(bucket.start),
                                              "to": repr(bucket.end), "runs": 1})}
            for index, bucket in enumerate(buckets) if bucket.count]
    busiest = sorted(bars, key=lambda bar: -bar["count"])[:10]
    return render_template(
        "timeline.html", timeline=timeline, bars=bars, busiest=busiest, peak=peak,
        total=sum(bucket.count for bucket in buckets), width=len(buckets) * BAR_WIDTH,
        bar_width=BAR_WIDTH, refresh=browse.TIMELINE_REFRESH, cap=RUN_CAP,
        height=CHART_HEIGHT, start=when(datetime.fromtimestamp(buckets[0].start,
                                                              tz=timezone.utc)),
        hours=[{"x": index * BAR_WIDTH, "label": browse.minute_label(bucket.start,
                                                                     context.zone)}
               for index, bucket in enumerate(buckets) if index % 180 == 0],
    )


@blueprint.route("/metrics")
def metrics_page() -> Response:
    """The schedule-level gauges (redbeat.metrics.ScheduleCollector), read at each
    scrape; beat serves its own counters on ``redbeat_metrics_port``."""
    from prometheus_client.exposition import choose_encoder

    registry = current_app.extensions["redbeat.metrics"]
    # the text format, or OpenMetrics when the scraper asks for it, as prometheus_client
    # serves it itself
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return Response(encode(registry), content_type=content_type)


@blueprint.route("/nodes")
def nodes_page() -> str:
    context = _context()
    app = context.celery_app
    state = manage.status(app)
    nodes = [{"node": str(Holder.parse(node)), "token": node, "role": role,
              "age": f"{state.server_time - at:.1f}", "leader": node == state.lock_holder}
             for node, (role, at) in sorted(state.nodes.items())]
    held_count, held = browse.held_slots(app)
    config = ensure_conf(app)
    return render_template(
        "nodes.html", state=state, nodes=nodes,
        leader=str(Holder.parse(state.lock_holder)) if state.lock_holder else None,
        lock_expiry=expiry_words(state.lock_ttl_ms), held_count=held_count,
        held=[{"task_id": slot.task_id, "name": slot.name or "?", "due": when(slot.due),
               "reason": slot.reason} for slot in held],
        redis_url=redact(config.redis_url), prefix=config.key_prefix,
        next_due=[(name, when(score_time(score)))
                  for name, score in state.next_due],
    )
