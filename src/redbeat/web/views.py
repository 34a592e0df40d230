"""The pages: entries (and bulk actions on them), one entry (and its actions), the entry
form (create, edit, preview), the timeline, the nodes.

Each handler reads through ``redbeat.browse`` / ``redbeat.manage`` and hands plain
values to a template; nothing here talks to Redis itself. Every link is built with
``url_for``, so the view works mounted under a prefix of another app.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any

import redis.exceptions
from celery import Celery
from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    url_for,
)
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from .. import audit, browse, guards, manage
from .. import labels as label_rules
from ..entry import InvalidEntry, RedBeatSchedulerEntry
from ..failures import Failures, read_failures
from ..keys import CHANGED, CREATED, MISFIRES
from ..lock import Holder, expiry_words
from ..nextrun import score_time
from ..redaction import redact
from ..run_buckets import RUN_CAP
from ..runs import summary as run_summary
from ..schedule_text import describe, seconds_text
from ..settings import ensure_conf
from . import form as entry_form
from .actions import ACTIONS, BULK_ACTIONS, applicable, needs_confirmation, refused_statics
from .security import WebSettings
from .times import absolute, stamp

blueprint = Blueprint("redbeat", __name__)
#: The timeline's chart: one column per ten minutes, its geometry in pixels.
COLUMN_MINUTES, COLUMN_WIDTH, AXIS_WIDTH, CHART_HEIGHT = 10, 8, 44, 160
#: Entries read per round trip when a bulk action collects every match of a filter,
#: and the names a confirmation page lists.
BULK_PAGE, SHOWN_NAMES = 500, 20
#: The filter fields a bulk action carries (the entries page's query string).
FILTER_FIELDS = ("order", "state", "name", "task", "label", "from", "to", "runs")


@dataclass(frozen=True)
class Context:
    celery_app: Celery
    settings: WebSettings
    zone: tzinfo
    #: the task names the app registers, or None when unknown (the standalone command,
    #: which has no app: then any name is accepted, as the CLI accepts it)
    registered_tasks: Callable[[], Collection[str] | None]


def _context() -> Context:
    context: Context = current_app.extensions["redbeat"]
    return context


def when(moment: datetime | None, zone: tzinfo | None = None) -> str:
    return absolute(moment, zone or _context().zone)


@blueprint.app_context_processor
def page_globals() -> dict[str, Any]:
    now = time.time()
    zone = _context().zone

    def shown(moment: datetime | None, in_zone: tzinfo | None = None) -> Any:
        return stamp(moment, in_zone or zone, now)
    return {"stamp": shown, "zone_name": str(zone)}


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
    return redirect(url_for(".entries"))


# -- the table -------------------------------------------------------------------------


#: The times a ``from``/``to`` may name, epoch seconds: up to the end of year 9999, the
#: last a page can print. Another value (NaN, inf, 1e20) is ignored: Redis refused NaN
#: (a 503), and printing the band of any of them failed (a 500).
TIME_RANGE = (0.0, 253402300799.0)


def _float_arg(args: Any, name: str) -> float | None:
    try:
        value = float(args[name])
    except (KeyError, ValueError):
        return None
    low, high = TIME_RANGE
    return value if low <= value <= high else None


def _query(args: Any) -> browse.Query:
    order = args.get("order", "next")
    state = args.get("state", "")
    try:
        start = max(int(args.get("start", "0")), 0)
    except ValueError:
        start = 0
    return browse.Query(order=order if order in browse.ORDERS else "next",
                        state=state if state in browse.STATES else "",
                        name=args.get("name", "")[:200], task=args.get("task", "")[:200],
                        labels=_label_arg(args),
                        due_from=_float_arg(args, "from"), due_to=_float_arg(args, "to"),
                        runs=args.get("runs") == "1", start=start)


def _label_arg(args: Any) -> tuple[str, ...]:
    """The label filter (one label); none when it is not a label (nothing matches a
    label that cannot exist, so a bad one filters nothing out rather than erring)."""
    try:
        return label_rules.normalized(args.get("label", "")[:200] or None)
    except ValueError:
        return ()


def _filter_args(query: browse.Query, **changes: Any) -> dict[str, Any]:
    values = {"order": query.order, "state": query.state, "name": query.name,
              "task": query.task, "label": query.labels[0] if query.labels else None,
              "from": query.due_from, "to": query.due_to,
              "runs": 1 if query.runs else None, "start": query.start, **changes}
    return {key: value for key, value in values.items()
            if value is not None and value != "" and value != 0}


def _link(query: browse.Query, **changes: Any) -> str:
    return url_for(".entries", **_filter_args(query, **changes))


def _entry_link(name: str) -> str:
    return url_for(".entry_page", name=name)


def _row(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    failures = read_failures(info.fields)
    last_run = entry.last_run_at if entry is not None and entry.total_run_count else None
    return {
        "name": info.name, "link": _entry_link(info.name),
        "task": entry.task if entry else "?",
        "schedule": describe(entry.schedule) if entry else "?",
        "next": info.next_run, "last": last_run,
        "runs": entry.total_run_count if entry else "-",
        "failed": failures.count if failures else 0,
        "state": info.shown_state, "static": info.static, "labels": info.labels,
    }


@blueprint.route("/entries")
def entries() -> str:
    query = _query(request.args)
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
        filter_fields=_filter_args(query, start=None), bulk_actions=BULK_ACTIONS,
        action_words=ACTIONS,
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


def _moment(value: Any) -> datetime | None:
    """A time from a record: ISO 8601 text, or epoch milliseconds."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(value / 1000, tz=timezone.utc)
        moment = datetime.fromisoformat(str(value))
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def _outcome_words(record: dict[str, Any]) -> str:
    """A worker's report on one run, in words: "success in 0.42 s on w1@host"."""
    words = str(record.get("outcome") or "?")
    if record.get("runtime") is not None:
        words += f" in {float(record['runtime']):.2f} s"
    if record.get("worker"):
        words += f" on {record['worker']}"
    if record.get("error"):
        words += f": {record['error']}"
    return words


def _history(info: manage.EntryInfo, failures: Failures | None,
             outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each dispatch: when it was sent (claimed), the slot it was for, the node, and
    what came of it: what the worker reported (with redbeat_worker_outcomes), else
    sent, or the reason Celery or the broker refused it."""
    failed = failures.task_ids() if failures else {}
    reported = {str(record.get("task_id")): record for record in outcomes}
    rows = []
    for record in info.history:
        task_id = str(record.get("task_id"))
        failure, report = failed.get(task_id), reported.get(task_id)
        if failure:
            outcome, kind = f"refused: {failure.reason}", "failing"
        elif report:
            outcome = _outcome_words(report)
            kind = "sent" if report.get("outcome") == "success" else (
                "failing" if report.get("outcome") in ("failure", "lost") else "unscheduled")
        else:
            outcome, kind = "sent", "sent"
        rows.append({"task_id": task_id, "sent": _moment(record.get("claimed_at")),
                     "slot": _moment(record.get("due")), "slot_text": str(record.get("due")),
                     "node": str(record.get("node")), "outcome": outcome, "kind": kind,
                     "failed": kind == "failing"})
    return rows


def _runs(info: manage.EntryInfo, lost_after: float) -> dict[str, Any]:
    """The latest run in words and the recent outcomes, as workers with
    ``redbeat_worker_outcomes`` report them (docs/outcomes.md); read-only."""
    policy_bound = info.entry.policy.lost_after if info.entry is not None else None
    latest = run_summary(info.run, time.time(), policy_bound or lost_after) \
        if info.run is not None else None
    return {"latest": latest,
            "recent": [{**record, "finished": _moment(record.get("finished"))}
                       for record in info.outcomes]}


def _change(raw: str | None) -> dict[str, Any] | None:
    """A ``created``/``changed`` record as when, who, through what and from where; None
    when there is none, and the stored text as it is when it is not what redbeat
    writes."""
    if not raw:
        return None
    change = audit.read(raw)
    if change is None:
        return {"raw": raw}
    return {"at": change.at, "actor": change.actor, "through": change.through or "?",
            "node": change.node or "?", "raw": None}


def _misfires(raw: str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        record = json.loads(raw)
        return {"skipped": int(record.get("skipped", 0)),
                "last": _moment(record.get("last_skipped")), "raw": None}
    except (ValueError, TypeError, AttributeError, RecursionError):
        return {"raw": raw}


def _policy(entry: RedBeatSchedulerEntry) -> list[tuple[str, str]]:
    """The policy as words, each field that differs from the defaults."""
    policy, zone = entry.policy, browse.evaluation_zone(entry)
    words = []
    if policy.start_time or policy.end_time:
        words.append(("Window", f"from {when(policy.start_time, zone)} "
                                f"to {when(policy.end_time, zone)}"))
    if policy.misfire_grace_time is not None:
        words.append(("Misfire grace", seconds_text(policy.misfire_grace_time)))
    if not policy.coalesce:
        words.append(("Missed runs", f"each one (up to {policy.max_catch_up})"))
    if policy.jitter:
        words.append(("Jitter", seconds_text(policy.jitter)))
    if policy.ttl is not None:
        words.append(("Kept once finished", seconds_text(policy.ttl)))
    return words


def _definition(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    if entry is None:
        return {}
    runs, short = browse.next_runs(entry, 10, info.score) if entry.enabled else ([], "disabled")
    zone = browse.evaluation_zone(entry)
    return {
        "task": entry.task, "schedule": describe(entry.schedule), "zone": zone,
        "args": _json_text(entry.args), "kwargs": _json_text(entry.kwargs),
        "options": _json_text(entry.options) if entry.options else None,
        "enabled": entry.enabled, "runs": entry.total_run_count,
        "last_run": entry.last_run_at if entry.total_run_count else None,
        "next_runs": runs, "short": short, "policy": _policy(entry),
    }


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
        history=_history(info, failures, info.outcomes),
        runs=_runs(info, ensure_conf(_context().celery_app).lost_after),
        failures=[{"task_id": failure.task_id, "at": failure.at, "reason": failure.reason}
                  for failure in failures.recent] if failures else [],
        failed=failures.count if failures else 0,
        misfires=_misfires(info.fields.get(MISFIRES)), change=_change(info.fields.get(CHANGED)),
        created=_change(info.fields.get(CREATED)),
        raw=_raw_json(info.fields.get("definition")) if info.entry is None else None,
        actions=applicable(info.shown_state, info.entry is not None), action_words=ACTIONS,
    )


# -- actions, one entry or many ---------------------------------------------------------


def _configured_statics() -> Collection[str]:
    """The names the app's ``beat_schedule`` gives (statics a leader has not written
    yet are statics too); none for the standalone command's app."""
    return _context().celery_app.conf.beat_schedule or {}


def _targets(form: Any) -> tuple[list[str], bool]:
    """The names an action is for, and whether they are every match of a filter."""
    if form.get("scope") == "filter":
        query = dataclasses.replace(_query(form), start=0, size=BULK_PAGE)
        names: list[str] = []
        while True:
            page = browse.read_page(_context().celery_app, query)
            names += [info.name for info in page.rows]
            if page.next_start is None:
                return names, True
            query = dataclasses.replace(query, start=page.next_start)
    return [name for name in form.getlist("names") if name][:10_000], False


def _apply(app: Celery, action: str, name: str) -> str | None:
    """Do ``action`` to one entry; returns the run-now task id, or None."""
    if action in ("enable", "disable"):
        manage.set_enabled(app, name, action == "enable", changed_by=f"web ({action})",
                           actor=_actor())
    elif action == "release":
        release = manage.release_quarantined(app, names=[name], changed_by="web (release)")
        if release.kept:
            raise InvalidEntry(name, release.kept[0][1])
    elif action == "run":
        return manage.run_now(app, name)
    else:
        manage.delete_entry(app, name)
    return None


def _actor() -> str | None:
    """Who a change made here is recorded as: the user the host application signed in
    (``REMOTE_USER``, when mounted behind its login), else the HTTP basic user; None
    (the web process's own user) for a bearer token or no credentials."""
    user = request.environ.get("REMOTE_USER")
    if not user and request.authorization is not None:
        user = request.authorization.username
    return str(user) if user else None


def _back(names: list[str], action: str, form: Any) -> str:
    """Where an action returns (``"cancel"``: where its confirmation's Cancel goes):
    the entry's page for one entry, unless it was deleted; else the list it came from."""
    if len(names) == 1 and form.get("scope") != "filter" and action != "delete":
        return _entry_link(names[0])
    return url_for(".entries", **{name: form[name] for name in FILTER_FIELDS
                                  if form.get(name)})


@blueprint.route("/entries/act", methods=["POST"])
def act() -> Response | str:
    """One action on one entry, a selection, or every entry matching a filter. A
    disable or delete, and any change of a static entry, is first shown on a page that
    says what it does to how many entries (no script needed); static entries are left
    alone unless that page's "force" box is ticked, as the CLI asks for --force."""
    app = _context().celery_app
    form = request.form
    action = form.get("action", "")
    if action not in ACTIONS:
        abort(400, "unknown action")
    names, everything = _targets(form)
    if not names:
        flash("nothing selected: tick entries, or choose every entry matching the filter",
              "error")
        return redirect(_back([], action, form))
    statics = guards.statics_among(names, manage.store_for(app).static_names(),
                                   _configured_statics())
    forced = form.get("force") == "1"
    if form.get("confirm") != "1" and any(needs_confirmation(action, name in statics,
                                                             everything)
                                          for name in names):
        return render_template(
            "confirm.html", action=action, words=ACTIONS[action], count=len(names),
            names=names[:SHOWN_NAMES], everything=everything, statics=statics,
            static_message=guards.static_message(sorted(statics), forced=False)
            if statics and action in ("enable", "disable", "delete") else None,
            hidden=[(name, form[name]) for name in ("scope", *FILTER_FIELDS)
                    if form.get(name)] + ([] if everything else
                                          [("names", name) for name in names]),
            back=_back(names, "cancel", form))
    left = set(refused_statics(action, statics, forced))
    done, failed, task_ids = [], [], []
    for name in names:
        if name in left:
            continue
        try:
            task_id = _apply(app, action, name)
            done.append(name)
            if task_id:
                task_ids.append(task_id)
        except KeyError:
            failed.append(f"{name}: no such entry")
        except InvalidEntry as exc:
            failed.append(f"{name}: {exc.reason}")
    _report(action, done, failed, sorted(left), task_ids)
    return redirect(_back(names, action, form))


def _report(action: str, done: list[str], failed: list[str], left: list[str],
            task_ids: list[str]) -> None:
    past = {"run": "queued", "enable": "enabled", "disable": "disabled",
            "release": "released", "delete": "deleted"}[action]
    if len(done) == 1 and task_ids:
        flash(f"queued {done[0]} as {task_ids[0]}; the leader sends it at its next tick",
              "ok")
    elif len(done) == 1:
        flash(f"{past} {done[0]}", "ok")
    elif done:
        flash(f"{past} {len(done)} entries", "ok")
    if left:
        flash(f"left alone: {guards.static_message(left, forced=False)}", "error")
    for line in failed[:SHOWN_NAMES]:
        flash(f"not {past}: {line}", "error")


# -- the entry form ---------------------------------------------------------------------


def _preview(parts: entry_form.Parts, old: RedBeatSchedulerEntry | None
             ) -> tuple[list[datetime], str, tzinfo | None]:
    """The next runs of the entry the form describes, in its zone, as beat would send
    them (from the stored last run, for an edit)."""
    if parts.schedule is None or parts.policy is None:
        return [], "", None
    try:
        entry = RedBeatSchedulerEntry(
            parts.name or "preview", parts.task or "preview", parts.schedule,
            app=_context().celery_app, policy=parts.policy,
            last_run_at=old.last_run_at if old else None,
            total_run_count=old.total_run_count if old else 0)
        runs, short = browse.next_runs(entry, 5)
        return runs, short, browse.evaluation_zone(entry)
    except (ValueError, OverflowError) as exc:
        return [], f"cannot be computed: {exc}", None


def _render_form(form: entry_form.EntryForm, editing: manage.EntryInfo | None,
                 parts: entry_form.Parts | None = None, status: int = 200) -> tuple[str, int]:
    old = editing.entry if editing else None
    runs, short, zone = _preview(parts, old) if parts else ([], "", None)
    static = editing is not None and (editing.static or editing.name in _configured_statics())
    return render_template(
        "entry_form.html", form=form, editing=editing, kinds=entry_form.KINDS,
        label=entry_form.label, preview=runs, preview_short=short, preview_zone=zone,
        previewed=parts is not None, static=static,
        static_message=guards.static_message([editing.name], forced=False)
        if static and editing else None), status


@blueprint.route("/entries/new")
def new_entry() -> tuple[str, int]:
    return _render_form(entry_form.EntryForm.empty(), None)


@blueprint.route("/entry/edit")
def edit_page() -> tuple[str, int]:
    info = _existing(request.args.get("name", ""))
    if info.entry is None:
        abort(400, f"{info.name!r} cannot be read ({info.error}): delete it, or write it "
                   "again with `redbeat add`")
    return _render_form(entry_form.from_entry(info.entry, _context().zone), info)


def _existing(name: str) -> manage.EntryInfo:
    try:
        return manage.get_entry(_context().celery_app, name)
    except KeyError:
        abort(404, f"no entry named {name!r}")


@blueprint.route("/entry/save", methods=["POST"])
def save_entry() -> Response | tuple[str, int]:
    """Create or edit an entry from the form: every field read as the CLI reads its
    option, each mistake shown beside its field with the input kept; "Preview" shows
    the next runs without writing anything."""
    context = _context()
    app = context.celery_app
    editing = _existing(request.form["editing"]) if request.form.get("editing") else None
    form = entry_form.EntryForm.submitted(request.form)
    if editing is not None:
        form.values["name"] = editing.name  # the name is the key: not edited here
    old = editing.entry if editing else None
    parts = entry_form.read(form, entry_form.default_policy(old.policy if old else None),
                            context.registered_tasks(), request.form.get("accept_task") == "1",
                            getattr(context.zone, "key", None))
    if editing is None and parts.name and "name" not in form.errors:
        _check_new_name(app, parts.name, form)
    static = editing is not None and (editing.static or editing.name in _configured_statics())
    if static and request.form.get("force") != "1":
        form.errors["force"] = guards.static_message([editing.name], forced=False).replace(
            "give --force", "tick the box to change it anyway")
    if form.errors or request.form.get("op") == "preview":
        return _render_form(form, editing, parts, 400 if form.errors else 200)
    try:
        if editing is not None:
            changed = _changed_fields(old, parts)
            manage.edit_entry(app, editing.name,
                              changed_by=f"web (edit: {', '.join(changed) or 'nothing'})",
                              actor=_actor(), task=parts.task, schedule=parts.schedule,
                              args=parts.args, kwargs=parts.kwargs, options=parts.options,
                              policy=parts.policy, labels=parts.labels)
        else:
            RedBeatSchedulerEntry(parts.name, parts.task, parts.schedule, args=parts.args,
                                  kwargs=parts.kwargs, options=parts.options,
                                  enabled=request.form.get("disabled") != "1", app=app,
                                  policy=parts.policy, labels=parts.labels,
                                  ).save(changed_by="web (create)", actor=_actor())
    except (ValueError, InvalidEntry) as exc:
        form.errors["form"] = f"not saved: {exc}"
        return _render_form(form, editing, parts, 400)
    flash(f"saved {parts.name}", "ok")
    return redirect(_entry_link(parts.name))


def _check_new_name(app: Celery, name: str, form: entry_form.EntryForm) -> None:
    try:
        manage.get_entry(app, name)
    except KeyError:
        if name in _configured_statics():
            form.errors["name"] = (f"Name: {name!r} is in beat_schedule, which a beat writes "
                                   "back when it takes the lead: change it there")
        return
    form.errors["name"] = f"Name: an entry named {name!r} exists: edit it on its own page"


def _changed_fields(old: RedBeatSchedulerEntry | None, parts: entry_form.Parts) -> list[str]:
    if old is None:
        return []
    pairs = {"task": (old.task, parts.task), "schedule": (old.schedule, parts.schedule),
             "args": (list(old.args or []), parts.args),
             "kwargs": (dict(old.kwargs or {}), parts.kwargs),
             "options": (old.options or None, parts.options),
             "policy": (old.policy, parts.policy),
             "labels": (tuple(old.labels or ()), parts.labels)}
    return [name for name, (before, after) in pairs.items() if before != after]


# -- timeline and nodes ----------------------------------------------------------------


def _column(buckets: list[browse.Bucket], zone: tzinfo, x: int) -> dict[str, Any]:
    """One column of the chart: the runs of ``buckets`` (ten minutes) beside the steady
    load, and the busiest minute among them (what the bar's height shows)."""
    busiest = max(buckets, key=lambda bucket: bucket.bursts)
    start, end = buckets[0].start, buckets[-1].end
    return {"x": x, "runs": sum(bucket.bursts for bucket in buckets),
            "peak": busiest.bursts, "peak_label": browse.minute_label(busiest.start, zone),
            "label": f"{browse.minute_label(start, zone)}–{browse.minute_label(end, zone)}",
            "link": url_for(".entries", **{"from": repr(start), "to": repr(end), "runs": 1})}


@blueprint.route("/timeline")
def timeline_page() -> str:
    """Runs due over the next 24 hours, readable whatever the schedule: one column per
    ten minutes (144 links, not 1,440), each as high as its busiest minute on a labelled
    scale; entries that run every minute or more often are the steady load, stated
    apart instead of raising every bar."""
    context = _context()
    timeline = browse.timeline(context.celery_app, time.time())
    buckets = timeline.buckets
    columns = [_column(buckets[at:at + COLUMN_MINUTES], context.zone,
                       AXIS_WIDTH + at // COLUMN_MINUTES * COLUMN_WIDTH)
               for at in range(0, len(buckets), COLUMN_MINUTES)]
    peak = max((column["peak"] for column in columns), default=0)
    scale = (CHART_HEIGHT - 10) / peak if peak else 0
    for column in columns:
        column["height"] = max(round(column["peak"] * scale), 2) if column["peak"] else 0
    steady = [bucket.steady for bucket in buckets]
    busiest = sorted((bucket for bucket in buckets if bucket.bursts),
                     key=lambda bucket: -bucket.bursts)[:10]
    return render_template(
        "timeline.html", timeline=timeline, columns=columns, peak=peak,
        ticks=[{"y": CHART_HEIGHT - round(value * scale), "value": value}
               for value in sorted({0, peak // 2, peak})] if peak else [],
        busiest=[{"label": browse.minute_label(bucket.start, context.zone),
                  "count": bucket.bursts, "steady": bucket.steady,
                  "link": url_for(".entries", **{"from": repr(bucket.start),
                                                 "to": repr(bucket.end), "runs": 1})}
                 for bucket in busiest],
        total=sum(bucket.count for bucket in buckets),
        bursts=sum(bucket.bursts for bucket in buckets),
        steady_low=min(steady, default=0), steady_high=max(steady, default=0),
        width=AXIS_WIDTH + len(columns) * COLUMN_WIDTH, column_width=COLUMN_WIDTH - 1,
        axis=AXIS_WIDTH, refresh=browse.TIMELINE_REFRESH, cap=RUN_CAP, height=CHART_HEIGHT,
        start=datetime.fromtimestamp(buckets[0].start, tz=timezone.utc),
        hours=[column for at, column in enumerate(columns) if at % 18 == 0],  # 3 hours
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


@blueprint.route("/schedule/pause", methods=["POST"])
def pause_page() -> Response | str:
    """Pause the whole schedule (asked first) or resume it."""
    app = _context().celery_app
    op = request.form.get("op")
    if op == "resume":
        manage.resume(app)
        flash("resumed the schedule: the leader sends what is due at its next tick", "ok")
    elif op == "pause" and request.form.get("confirm") == "1":
        manage.pause(app, by="web")
        flash("paused the schedule: the leader sends nothing until it is resumed", "ok")
    elif op == "pause":
        return render_template("pause.html", entries=manage.status(app, upcoming=0).entries)
    else:
        abort(400, "unknown operation")
    return redirect(url_for(".nodes_page"))


@blueprint.route("/nodes")
def nodes_page() -> str:
    context = _context()
    app = context.celery_app
    state = manage.status(app)
    now = time.time()
    nodes = [{"node": str(Holder.parse(node)), "token": node, "role": role,
              # the age on Redis's clock (the fleet's), shown from this host's now
              "beat": datetime.fromtimestamp(at + now - state.server_time, tz=timezone.utc),
              "leader": node == state.lock_holder}
             for node, (role, at) in sorted(state.nodes.items())]
    held_count, held = browse.held_slots(app)
    config = ensure_conf(app)
    return render_template(
        "nodes.html", state=state, nodes=nodes,
        leader=str(Holder.parse(state.lock_holder)) if state.lock_holder else None,
        lock_expiry=expiry_words(state.lock_ttl_ms), held_count=held_count,
        held=held, redis_url=redact(config.redis_url), prefix=config.key_prefix,
        next_due=[(name, score_time(score)) for name, score in state.next_due],
    )
