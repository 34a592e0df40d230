"""The batched publish: the slots of a tick built with Celery's own message API and
written to the broker in one go.

Celery's per-message ``apply_async`` costs a Redis broker one client object and one
``LPUSH`` round trip per message (about 450 us each here), which for a burst of a
thousand slots is most of what a user waits for. This module builds the same messages
(``app.amqp.create_task_message`` for the app's protocol, the app's router and
``task_routes``, queue, exchange, priority, headers, ``expires``, ``eta``/``countdown``,
the ``before_task_publish``/``after_task_publish`` signals) and writes them

- to a Redis broker: in one pipeline, in the layout kombu's Redis transport reads
  (the message JSON with its base64 body and delivery tag, ``LPUSH``ed to the queue or
  to its priority sub-queue, queues found through the ``_kombu.binding.*`` tables);
- to RabbitMQ: on one channel in confirm mode, the confirms collected once per batch.

A slot counts as published only once its broker accepted it (the pipeline answered,
or RabbitMQ acked it). Whatever this module does not reproduce exactly raises
:class:`Unsupported`, and the scheduler sends that slot through Celery's own path.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

import celery
from amqp import spec
from celery import Celery, signals
from celery.app.routes import MapRoute, Router
from celery.app.task import Task
from celery.backends.base import Backend
from celery.beat import BeatLazyFunc, _evaluate_entry_args, _evaluate_entry_kwargs
from celery.utils.collections import lpmerge
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from celery.utils.time import maybe_make_aware
from kombu import Exchange, Queue
from kombu.common import Broadcast, maybe_declare
from kombu.compression import compress
from kombu.entity import maybe_delivery_mode
from kombu.serialization import dumps, registry
from kombu.transport import pyamqp
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json
from redis.exceptions import ResponseError

try:  # Celery >= 5.5: eta/countdown on quorum queues take a delayed-delivery route
    from celery.utils.quorum_queues import detect_quorum_queues
except ImportError:  # pragma: no cover - older Celery has no such route
    detect_quorum_queues = None

#: What the installed Celery's own send puts in a message and earlier releases do not
#: (the batched message must be the one this release sends): since 5.7 its beat marks
#: each message with ``celery_beat_task``, ``send_task`` leaves ``ignore_result`` None
#: instead of False when not asked, and ``task_repr_maxlevels`` sets how deep
#: ``argsrepr``/``kwargsrepr`` go (before, ``saferepr``'s default depth, 3).
CELERY_5_7 = celery.VERSION >= (5, 7)
BEAT_HEADERS: dict[str, Any] = {"celery_beat_task": True} if CELERY_5_7 else {}
IGNORE_RESULT_UNSET = None if CELERY_5_7 else False
REPR_MAXLEVELS = 3

#: Options (of an entry, or of its registered task) this module reproduces exactly.
OPTIONS = frozenset(
    {
        "queue",
        "exchange",
        "routing_key",
        "exchange_type",
        "priority",
        "headers",
        "expires",
        "eta",
        "countdown",
        "time_limit",
        "soft_time_limit",
        "serializer",
        "compression",
        "delivery_mode",
        "ignore_result",
    }
)
#: What may be left once the router has merged its route into the options.
ROUTED = frozenset(
    {
        "queue",
        "exchange",
        "routing_key",
        "exchange_type",
        "priority",
        "headers",
        "serializer",
        "compression",
        "delivery_mode",
    }
)


class Unsupported(Exception):
    """This slot needs Celery's per-message path: an option, a setting or a task class
    whose effect this module does not reproduce."""


@dataclass(slots=True)
class Draft:
    """A message built and addressed, not yet announced (``before_task_publish``) nor
    serialised: what can be made while Redis still runs the commit that claims it."""

    name: str
    body: Any
    headers: dict[str, Any]
    properties: dict[str, Any]
    exchange: str | Exchange
    routing_key: str | None
    queue: Queue | None
    priority: int | None
    delivery_mode: Any
    serializer: str
    compression: str | None
    expiration: float | None


@dataclass(slots=True)
class Outgoing:
    """One message ready for the wire, and what the signals report about it."""

    task_id: str
    name: str
    body: Any  # the task body as Celery built it (the signals get this)
    payload: bytes | str  # serialised (and compressed) body
    content_type: str
    content_encoding: str
    headers: dict[str, Any]
    properties: dict[str, Any]
    priority: int | None
    exchange: str
    routing_key: str
    queue: Queue | None  # declared before the first publish to it
    #: its record for a Redis broker (the JSON text) and that record's priority, once
    #: :func:`encode_redis` made them
    wire: tuple[str, int] | None = None


def batch_transport(connection: Any) -> str | None:
    """``"redis"`` or ``"amqp"`` when the connection's transport is exactly kombu's
    Redis or py-amqp one (a subclass or another transport may store messages
    differently), else None."""
    transport = type(connection.transport)
    if transport is kombu_redis.Transport:
        return "redis"
    if transport is pyamqp.Transport:
        return "amqp"
    return None


#: Stand-ins for what differs between two messages of one entry: a template is an
#: entry's Redis record built with these, and each message swaps its own in.
TEMPLATE_TASK_ID = "redbeat-template-task-id"
TEMPLATE_TAG = "redbeat-template-delivery-tag"
_STAND_INS = re.compile(f"({TEMPLATE_TASK_ID}|{TEMPLATE_TAG})")


@dataclass(slots=True)
class Template:
    """One entry's message for a Redis broker, made once and kept while its definition
    is unchanged: the record's text cut where the task id and the delivery tag go."""

    #: what it was made from (Builder.template_objects): the entry's ``args``,
    #: ``kwargs`` and ``options`` objects, their items and the task object, compared by
    #: identity on each use
    objects: tuple[Any, ...]
    message: Outgoing  # built with the stand-ins
    #: the record's text, the stand-ins as pieces of their own; None when its messages
    #: are built each time (they carry times)
    pieces: list[str] | None
    #: where in ``pieces`` the task id goes (each place) and the delivery tag
    id_at: tuple[int, ...]
    tag_at: int
    #: the headers and properties that carry the task id (id, root_id, correlation_id)
    id_headers: list[str]
    id_properties: list[str]


class Templates:
    """Templates by entry, kept from tick to tick: from one slot to the next only the
    task id and the delivery tag change (nothing else of the message depends on the
    slot when the entry has no ``eta``, ``countdown`` or ``expires``), so a burst of
    known entries skips building, addressing, serialising and encoding each message.

    An entry's parts come from the definition cache (entry.py), which nobody mutates:
    an edited entry is new text, so new objects and a new template. A template is used
    only where the message cannot depend on anything else: protocol 2 (the task id is
    not in the body), Celery's router with ``task_routes`` maps only (a routing function
    may route each call its own way), no lazy argument, a task class that does not
    compute its own shadow name, and nobody listening to ``before_task_publish`` (the
    caller's check: a receiver may change each message). The table is emptied when it
    reaches ``size``."""

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self.known: dict[str, Template] = {}
        #: the builder settings (Builder.template_settings) every known template was
        #: made under: compared once per batch, and the table emptied when they change
        self.settings: tuple[Any, ...] | None = None

    def outgoing(
        self, builder: Builder, channel: Any, entry: Any, task_id: str, tag: str
    ) -> Outgoing:
        """``entry``'s message for ``task_id``, its record encoded for kombu Redis
        ``channel`` with delivery tag ``tag``: what ``encode_redis(channel,
        [builder.seal(builder.draft(entry, task_id))])`` makes. Raises what those raise
        (:class:`Unsupported` among them)."""
        settings = builder.template_settings
        if settings is not None and settings is not self.settings:
            if settings != self.settings:
                self.known.clear()
            self.settings = settings
        objects = builder.template_objects(entry) if settings is not None else None
        template = self.known.get(entry.name) if objects is not None else None
        if objects is not None and (template is None or not _same(template.objects, objects)):
            template = self._make(builder, channel, entry, objects)
        if template is None or template.pieces is None:
            message = builder.seal(builder.draft(entry, task_id))
            message.wire = _redis_wire(channel, message, tag)
            return message
        message = template.message
        parts = template.pieces.copy()
        task_text = JSON.encode(task_id)[1:-1]
        for at in template.id_at:
            parts[at] = task_text
        parts[template.tag_at] = tag
        headers = message.headers.copy()
        for name in template.id_headers:
            headers[name] = task_id
        properties = message.properties.copy()
        for name in template.id_properties:
            properties[name] = task_id
        return Outgoing(
            task_id,
            message.name,
            message.body,
            message.payload,
            message.content_type,
            message.content_encoding,
            headers,
            properties,
            message.priority,
            message.exchange,
            message.routing_key,
            message.queue,
            ("".join(parts), message.wire[1] if message.wire else 0),
        )

    def _make(
        self, builder: Builder, channel: Any, entry: Any, objects: tuple[Any, ...]
    ) -> Template:
        """``entry``'s template, kept; one without pieces when its message depends on
        more than the task id and the tag (the times it carries, the id elsewhere), so
        that such an entry's messages are built each time, once each."""
        message = builder.seal(builder.draft(entry, TEMPLATE_TASK_ID))
        headers = message.headers
        message.wire = _redis_wire(channel, message, TEMPLATE_TAG)
        pieces: list[str] | None = _STAND_INS.split(message.wire[0])
        id_at = tuple(at for at, piece in enumerate(pieces) if piece == TEMPLATE_TASK_ID)
        tag_at = [at for at, piece in enumerate(pieces) if piece == TEMPLATE_TAG]
        id_headers = [key for key, value in headers.items() if value == TEMPLATE_TASK_ID]
        id_properties = [
            key for key, value in message.properties.items() if value == TEMPLATE_TASK_ID
        ]
        if (
            headers.get("eta")
            or headers.get("expires")
            or "expiration" in message.properties
            or "id" not in id_headers
            or (len(id_at), len(tag_at)) != (len(id_headers) + len(id_properties), 1)
        ):
            pieces = None  # (the id elsewhere too: an argument that holds the stand-in)
        if len(self.known) >= self.size:
            self.known.clear()
        template = Template(
            objects, message, pieces, id_at, tag_at[0] if tag_at else -1, id_headers, id_properties
        )
        self.known[entry.name] = template
        return template


def app_supports_batch(app: Celery) -> bool:
    """Settings whose per-message effects this module does not reproduce: sent events,
    the deprecated ``task_sent`` signal, eager mode, a result backend that acts on every
    send (rpc://)."""
    conf = app.conf
    if conf.task_send_sent_event or conf.task_always_eager or signals.task_sent.receivers:
        return False
    return type(app.backend).on_task_call is Backend.on_task_call


class Reprs:
    """``argsrepr``/``kwargsrepr`` (Celery's ``saferepr`` of an entry's arguments, a
    third of a message's build) kept from tick to tick, by the identity of the entry's
    ``args`` and ``kwargs``.

    The tick's entries share their arguments through the definition cache (entry.py),
    which nobody mutates: an edited entry is new text, so new objects and a new repr.
    An entry someone rebinds or changes at its top level (``entry.args[0] = 5``) is seen
    too (the items are compared by identity); lazy arguments (``BeatLazyFunc``) are
    evaluated per message and never kept. The references held keep ids from being
    reused; the table is emptied when it reaches ``size``."""

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self.known: dict[tuple[int, int], tuple[Any, ...]] = {}

    def get(
        self, entry: Any, args: list[Any], kwargs: dict[str, Any], limits: tuple[int, int, int]
    ) -> tuple[str, str]:
        """The reprs Celery's ``as_task_v2`` would compute for ``args`` and ``kwargs``
        (``entry``'s, evaluated), with ``limits``: its argsrepr and kwargsrepr maximum
        sizes and ``task_repr_maxlevels``."""
        raw_args, raw_kwargs = entry.args, entry.kwargs
        key = (id(raw_args), id(raw_kwargs))
        known = self.known.get(key)
        if (
            known is not None
            and known[0] is raw_args
            and known[1] is raw_kwargs
            and known[2] == limits
            and _same(known[3], args)
            and _same(known[4], kwargs.values())
            and known[5] == list(kwargs)
        ):
            return known[6], known[7]
        # as_task_v2 reprs ``args or ()``: no arguments read "()", not "[]"
        argsrepr = saferepr(args or (), limits[0], maxlevels=limits[2])
        kwargsrepr = saferepr(kwargs or {}, limits[1], maxlevels=limits[2])
        if _same(raw_args or (), args) and _same((raw_kwargs or {}).values(), kwargs.values()):
            if len(self.known) >= self.size:
                self.known.clear()
            self.known[key] = (
                raw_args,
                raw_kwargs,
                limits,
                tuple(args),
                tuple(kwargs.values()),
                list(kwargs),
                argsrepr,
                kwargsrepr,
            )
        return argsrepr, kwargsrepr


def _same(these: Any, those: Any) -> bool:
    """The same objects, one for one (no lazy argument evaluated into another)."""
    these, those = tuple(these), tuple(those)
    return len(these) == len(those) and all(map(operator.is_, these, those))


class Builder:
    """Builds the messages of one batch; the settings it needs are read once per batch
    (``app.conf`` lookups cost more than the rest of a message's addressing)."""

    def __init__(self, app: Celery, reprs: Reprs | None = None) -> None:
        conf = app.conf
        self.reprs = reprs if reprs is not None else Reprs()
        self.app = app
        self.amqp = app.amqp
        self.thread_oid = app.thread_oid
        self.delivery_mode = conf.task_default_delivery_mode
        self.routing_key = conf.task_default_routing_key
        self.serializer = conf.task_serializer
        self.compression = conf.task_compression
        self.retry_policy = dict(conf.task_publish_retry_policy or {})
        self.default_queue = conf.task_default_queue
        self.default_route: dict[str, Any] | None = None
        # read through a lock on each access otherwise (kombu's cached_property), and
        # the origin Celery derives from the host name and pid for every message
        self.router = self.amqp.router
        self.queues = self.amqp.queues
        self.tasks = app.tasks
        self.create_task_message = self.amqp.create_task_message
        self.origin = anon_nodename()
        # protocol 1 has no reprs (it ignores them)
        self.limits = (
            (
                self.amqp.argsrepr_maxsize,
                self.amqp.kwargsrepr_maxsize,
                conf.get("task_repr_maxlevels", REPR_MAXLEVELS),
            )
            if conf.task_protocol == 2
            else None
        )

    def prepare(self, entry: Any, task_id: str) -> Outgoing:
        """Build the message Celery's ``Scheduler.apply_async`` would publish for
        ``entry`` with ``task_id``, and send ``before_task_publish`` for it, as Celery
        does before a publish. Raises :class:`Unsupported` for what needs Celery's own
        path."""
        return self.seal(self.draft(entry, task_id))

    def draft(self, entry: Any, task_id: str) -> Draft:
        """:meth:`prepare` up to the signal: no side effect, so it may run before the
        slot's claim is known to be committed."""
        app, name = self.app, entry.task
        args = _evaluate_entry_args(entry.args)
        kwargs = _evaluate_entry_kwargs(entry.kwargs)
        options = {key: value for key, value in entry.options.items() if key != "task_id"}
        options["headers"] = {**(options.get("headers") or {}), **BEAT_HEADERS}
        _check(options, OPTIONS, "option")
        task = self.tasks.get(name)
        shadow = None
        if task is not None:
            options, shadow = _task_options(task, args, kwargs, options)
        expires = options.pop("expires", None)
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        ignore_result = options.pop("ignore_result", IGNORE_RESULT_UNSET)
        eta, countdown = options.pop("eta", None), options.pop("countdown", None)
        options = self._route(options, name, args, kwargs, task)
        _check(options, ROUTED, "routed option")
        if (eta or countdown) and self.quorum:
            raise Unsupported("eta/countdown on quorum queues")
        argsrepr = kwargsrepr = None
        if self.limits is not None:
            argsrepr, kwargsrepr = self.reprs.get(entry, args, kwargs, self.limits)
        message = self.create_task_message(
            task_id,
            name,
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            expires=expires,
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            origin=self.origin,
            reply_to=self.thread_oid,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            shadow=shadow,
            ignore_result=ignore_result,
        )
        return self._address(name, message, options, _expiration(app, expires))

    @cached_property
    def template_settings(self) -> tuple[Any, ...] | None:
        """This batch's settings a template depends on (compared by equality, once per
        batch: :class:`Templates`); None when no template can stand for a message of
        this batch (protocol 1, or a routing function, which may route each call its own
        way)."""
        router = self.router
        if (
            self.limits is None
            or type(router) is not Router
            or not all(type(route) is MapRoute for route in router.routes)
        ):
            return None
        return (
            self.serializer,
            self.compression,
            self.delivery_mode,
            self.routing_key,
            self.default_queue,
            self.origin,
            self.thread_oid,
            self.limits,
        )

    def template_objects(self, entry: Any) -> tuple[Any, ...] | None:
        """What ``entry``'s message is made from, when nothing else can change it (see
        :class:`Templates`): the objects, compared by identity; None when a template
        cannot stand for it. Asked only when :attr:`template_settings` is not None."""
        args, kwargs, options = entry.args or (), entry.kwargs or {}, entry.options
        if (args or kwargs) and any(
            isinstance(value, BeatLazyFunc) for value in (*args, *kwargs.values())
        ):
            return None  # evaluated anew for each message
        task = self.tasks.get(entry.task)
        if task is not None and type(task).shadow_name is not Task.shadow_name:
            return None
        return (
            entry.task,
            entry.args,
            entry.kwargs,
            options,
            task,
            *args,
            *kwargs.values(),
            *kwargs,
            *options.values(),
            *options,
        )

    @cached_property
    def quorum(self) -> bool:
        """Whether the app has a quorum queue on RabbitMQ (where Celery sends eta and
        countdown another way): asked once per batch, not once per message, as a new
        broker connection object is made to ask."""
        if detect_quorum_queues is None:
            return False
        driver_type = self.app.connection_for_write().transport.driver_type
        return bool(detect_quorum_queues(self.app, driver_type)[0])

    def _route(
        self, options: dict[str, Any], name: str, args: Any, kwargs: Any, task: Task | None
    ) -> dict[str, Any]:
        """Celery's ``Router.route``; without ``task_routes``, the default queue's
        destination is expanded once per batch (Celery reads the setting and looks the
        queue up for every message)."""
        router = self.router
        if type(router) is not Router or router.routes:
            return router.route(options, name, args, kwargs, task)
        options = router.expand_destination(options)
        if "queue" in options:
            return options
        if self.default_route is None:
            self.default_route = router.expand_destination(self.default_queue)
        return lpmerge(dict(self.default_route), options)

    def _address(
        self, name: str, message: Any, options: dict[str, Any], expiration: float | None
    ) -> Draft:
        """Celery's ``send_task_message`` and kombu's ``Producer.publish`` up to the
        signal: the queue, exchange, routing key and delivery mode."""
        headers, properties, body, _ = message
        headers.update(options.pop("headers", None) or {})
        queue = options.pop("queue", None)
        exchange = options.pop("exchange", None)
        routing_key = options.pop("routing_key", None)
        exchange_type = options.pop("exchange_type", None)
        priority = options.pop("priority", None)
        qname = queue
        if queue is None and exchange is None:
            queue = self.amqp.default_queue
        if isinstance(queue, str):
            qname, queue = queue, self.queues[queue]
        elif queue is not None:
            qname = queue.name
        if isinstance(queue, Broadcast):
            raise Unsupported("broadcast queue")
        delivery_mode = (
            options.pop("delivery_mode", None)
            or getattr(getattr(queue, "exchange", None), "delivery_mode", None)
            or self.delivery_mode
        )
        if exchange_type is None:
            exchange_type = getattr(getattr(queue, "exchange", None), "type", "direct")
        if exchange_type == "fanout":
            raise Unsupported("fanout exchange")
        if (not exchange or not routing_key) and exchange_type == "direct":
            exchange, routing_key = "", qname
        elif exchange is None:
            exchange = queue.exchange.name or self.amqp.default_exchange
            routing_key = routing_key or queue.routing_key or self.routing_key
        return Draft(
            name=name,
            body=body,
            headers=headers,
            properties=properties,
            exchange=exchange,
            routing_key=routing_key,
            queue=queue,
            priority=priority,
            delivery_mode=delivery_mode,
            serializer=options.pop("serializer", None) or self.serializer,
            compression=options.pop("compression", None) or self.compression,
            expiration=expiration,
        )

    def seal(self, draft: Draft) -> Outgoing:
        """``before_task_publish`` for ``draft``, then its body serialised (after the
        signal, as kombu does: a receiver may still change the message)."""
        headers, properties, exchange = draft.headers, draft.properties, draft.exchange
        delivery_mode = draft.delivery_mode
        signals.before_task_publish.send(
            sender=draft.name,
            body=draft.body,
            exchange=exchange,
            routing_key=draft.routing_key,
            declare=[draft.queue] if draft.queue is not None else [],
            headers=headers,
            properties=properties,
            retry_policy=dict(self.retry_policy),
        )
        if isinstance(exchange, Exchange):
            exchange_name = exchange.name
            delivery_mode = delivery_mode or exchange.delivery_mode
        else:
            exchange_name = exchange or ""
        properties["delivery_mode"] = maybe_delivery_mode(delivery_mode)
        if draft.expiration is not None:
            properties["expiration"] = str(int(draft.expiration * 1000))
        content_type, content_encoding, payload = serialise(draft.body, draft.serializer)
        if draft.compression:
            payload, headers["compression"] = compress(payload, draft.compression)
        return Outgoing(
            name=draft.name,
            task_id=headers.get("id") or properties["correlation_id"],
            body=draft.body,
            payload=payload,
            content_type=content_type,
            content_encoding=content_encoding,
            headers=headers,
            properties=properties,
            priority=draft.priority,
            exchange=exchange_name,
            routing_key=draft.routing_key or "",
            queue=draft.queue,
        )


#: kombu's JSON encoder, made once: ``kombu.utils.json.dumps`` (what kombu's ``json``
#: serializer and its Redis transport call) builds a new one for every message, and
#: ``json.dumps`` with no other options is exactly ``encoder.encode``.
JSON = kombu_json.JSONEncoder()


def serialise(body: Any, serializer: str) -> tuple[str, str, str | bytes]:
    """kombu's ``dumps(body, serializer=serializer)``: for its own ``json`` serializer
    (not one an application registered in its place), one shared encoder; anything
    else, and any error (kombu raises its EncodeError), through kombu."""
    codec = registry._encoders.get(serializer) if serializer == "json" else None
    if codec is not None and codec.encoder is kombu_json.dumps:
        try:
            return codec.content_type, codec.content_encoding, JSON.encode(body)
        except Exception:  # noqa: S110 - kombu's own call below raises it its way
            pass
    return dumps(body, serializer=serializer)


def _check(options: dict[str, Any], known: frozenset[str], what: str) -> None:
    if options.keys() <= known:
        return  # nothing to refuse, nothing to drop: most messages
    unknown = sorted(
        key
        for key, value in options.items()
        if key not in known and value is not None and value is not False
    )
    if unknown:
        raise Unsupported(f"{what}s {unknown}")
    for key in [key for key in options if key not in known]:
        del options[key]  # None or False: the same as not given


def _task_options(
    task: Task, args: Any, kwargs: Any, options: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """What ``Task.apply_async`` adds for a registered task: its argument check, its
    shadow name and its execution options (the entry's own win)."""
    if type(task).apply_async is not Task.apply_async or getattr(task, "__v2_compat__", False):
        raise Unsupported(f"task class of {task.name} overrides apply_async")
    if getattr(task, "_dump_pydantic_arguments", None) is not None:
        raise Unsupported(f"task {task.name} takes pydantic arguments")
    if task.soft_time_limit and task.time_limit and task.soft_time_limit > task.time_limit:
        raise ValueError("soft_time_limit must be less than or equal to time_limit")
    if task.typing:
        check_arguments = getattr(task, "__header__", None)
        if check_arguments is not None:
            check_arguments(*(args or ()), **(kwargs or {}))
    merged = {key: value for key, value in task._get_exec_options().items() if value is not None}
    merged.update(options)
    merged.setdefault("ignore_result", task.ignore_result)
    _check(merged, OPTIONS, "task option")
    return merged, task.shadow_name(args, kwargs, merged)


def _expiration(app: Celery, expires: Any) -> float | None:
    """The message TTL (seconds) Celery's ``send_task`` derives from ``expires``."""
    if expires is None:
        return None
    if isinstance(expires, str):
        expires = datetime.fromisoformat(expires)
    if isinstance(expires, datetime):
        seconds = (maybe_make_aware(expires) - app.now()).total_seconds()
    else:
        seconds = float(expires)
    return max(seconds, 0.0)


def published(messages: Sequence[Outgoing]) -> None:
    """``after_task_publish`` for each message its broker accepted."""
    for message in messages:
        signals.after_task_publish.send(
            sender=message.name,
            body=message.body,
            headers=message.headers,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )


def declare(
    channel: Any, messages: Sequence[Outgoing], refused: dict[str, BaseException] | None = None
) -> None:
    """Declare each destination queue once per connection (kombu remembers), as the
    per-message path does before its first publish to a queue. Given ``refused``, a
    queue whose declaration the broker answered with an error (on a Redis broker: its
    key holds a string, WRONGTYPE) is put there by name instead of raising, so the
    messages for the other queues still go; an error reaching the broker raises."""
    seen: set[str] = set()
    for message in messages:
        if message.queue is not None and message.queue.name not in seen:
            seen.add(message.queue.name)
            try:
                maybe_declare(message.queue, channel)
            except ResponseError as exc:  # a reply: the connection answers
                if refused is None:
                    raise
                refused[message.queue.name] = exc


def write_redis(channel: Any, messages: Sequence[Outgoing]) -> list[BaseException | None]:
    """Write ``messages`` through kombu Redis ``channel``'s pool in one pipeline, in the
    layout its ``basic_publish`` writes; per message, None or the error Redis answered
    it with. A connection error is raised: then nothing counts as written.

    Consecutive messages bound for the same lists go in one ``LPUSH`` per list: it
    pushes its values in order, so each list ends as one ``LPUSH`` per message leaves
    it (a burst is mostly one task to one queue: one command instead of hundreds). A
    refused push refuses the messages it carried, each reported, and so does a refused
    declaration those for its queue (they are not written)."""
    undeclared: dict[str, BaseException] = {}
    declare(channel, messages, undeclared)
    refusals: list[BaseException | None] = [
        undeclared.get(message.queue.name) if message.queue is not None else None
        for message in messages
    ]
    writing = [index for index, refusal in enumerate(refusals) if refusal is None]
    if undeclared:
        messages = [messages[index] for index in writing]
    queues = _redis_queues(channel, messages)
    encode_redis(channel, [message for message in messages if message.wire is None])
    runs: list[tuple[tuple[str, ...], list[str], list[int]]] = []
    for index, (message, destinations) in enumerate(zip(messages, queues, strict=True)):
        text, priority = message.wire or ("", 0)  # encoded above
        lists = tuple(channel._q_for_pri(queue, priority) for queue in destinations)
        if not runs or runs[-1][0] != lists or queues[runs[-1][2][-1]] != destinations:
            runs.append((lists, [], []))
        runs[-1][1].append(text)
        runs[-1][2].append(index)
    # the queues' x-expires, which kombu's Redis transport keeps since 5.5 (and sets
    # again on each put); an earlier kombu expires no queue
    expires = getattr(channel, "_expires", {})
    with channel.conn_or_acquire() as client:
        pipe = client.pipeline(transaction=False)
        spans = []
        for lists, texts, indexes in runs:
            before = len(pipe)
            for queue, key in zip(queues[indexes[0]], lists, strict=True):
                pipe.lpush(key, *texts)
                ttl = expires.get(queue)
                if ttl is not None:
                    for step in channel.priority_steps:
                        pipe.pexpire(channel._q_for_pri(queue, step), ttl)
            spans.append((before, len(pipe), indexes))
        replies = pipe.execute(raise_on_error=False) if len(pipe) else []
    for start, end, indexes in spans:
        refusal = next(
            (reply for reply in replies[start:end] if isinstance(reply, Exception)), None
        )
        for index in indexes:
            refusals[writing[index]] = refusal
    return refusals


def _redis_queues(channel: Any, messages: Sequence[Outgoing]) -> list[list[str]]:
    """The queues each message goes to, the exchange tables read once per batch."""
    found: dict[tuple[str, str], list[str]] = {}
    result = []
    for message in messages:
        key = (message.exchange, message.routing_key)
        if key not in found:
            found[key] = list(channel._lookup(*key))
        result.append(found[key])
    return result


def encode_redis(channel: Any, messages: Sequence[Outgoing]) -> None:
    """Give each message its record for kombu Redis ``channel`` (``wire``): what
    :func:`write_redis` pushes. Pure (no I/O), so it can be done ahead of the write."""
    for message, tag in zip(messages, delivery_tags(len(messages)), strict=True):
        message.wire = _redis_wire(channel, message, tag)


def _redis_wire(channel: Any, message: Outgoing, tag: str) -> tuple[str, int]:
    """``message``'s record for kombu Redis ``channel`` as text, and its priority."""
    record = _redis_record(channel, message, tag)
    return JSON.encode(record), channel._get_message_priority(record, reverse=False)


def delivery_tags(count: int) -> list[str]:
    """``count`` delivery tags as kombu makes them (``str(uuid.uuid4())``: random
    version-4 UUIDs), from one read of the OS's random source instead of one read and
    one UUID object per message."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes(byte & 0x0F | 0x40 for byte in raw[6::16])  # version 4
    raw[8::16] = bytes(byte & 0x3F | 0x80 for byte in raw[8::16])  # the RFC 4122 variant
    text = raw.hex()
    return [
        f"{text[at : at + 8]}-{text[at + 8 : at + 12]}-{text[at + 12 : at + 16]}-"
        f"{text[at + 16 : at + 20]}-{text[at + 20 : at + 32]}"
        for at in range(0, 32 * count, 32)
    ]


def _redis_record(channel: Any, message: Outgoing, tag: str) -> dict[str, Any]:
    record: dict[str, Any] = channel.prepare_message(
        message.payload,
        message.priority,
        message.content_type,
        message.content_encoding,
        message.headers,
        dict(message.properties),
    )
    record["body"], body_encoding = channel.encode_body(record["body"], channel.body_encoding)
    properties = record["properties"]
    properties["body_encoding"] = body_encoding
    properties["delivery_tag"] = tag
    properties["delivery_info"].update(exchange=message.exchange, routing_key=message.routing_key)
    return record


def write_amqp(
    connection: Any, messages: Sequence[Outgoing], timeout: float
) -> list[BaseException | None]:
    """Publish ``messages`` on a channel of their own in confirm mode and wait (at most
    ``timeout`` seconds) for RabbitMQ to ack them all; per message, None or the nack.
    Unconfirmed messages raise: the caller cannot know whether they arrived."""
    channel = connection.channel()
    try:
        declare(channel, messages)
        channel.confirm_select()
        pending = object()  # not settled yet
        outcome: list[Any] = [pending] * len(messages)
        low = [0]  # every tag at or below low[0] is settled

        def settle(tag: int, multiple: bool, verdict: BaseException | None) -> None:
            first = low[0] if multiple else tag - 1
            for index in range(first, tag):
                if outcome[index] is pending:
                    outcome[index] = verdict
            while low[0] < len(outcome) and outcome[low[0]] is not pending:
                low[0] += 1

        channel.events["basic_ack"].add(lambda tag, multiple: settle(tag, multiple, None))
        channel.events["basic_nack"].add(
            lambda tag, multiple: settle(tag, multiple, MessageNacked())
        )
        # py-amqp's basic_publish polls the socket for a connection.blocked notice
        # before each message: once per batch is enough
        _poll(channel.connection)
        for message in messages:
            channel.send_method(
                spec.Basic.Publish,
                "Bssbb",
                (0, message.exchange, message.routing_key, False, False),
                channel.prepare_message(
                    message.payload,
                    message.priority,
                    message.content_type,
                    message.content_encoding,
                    message.headers,
                    dict(message.properties),
                ),
            )
        while low[0] < len(outcome):
            channel.wait([spec.Basic.Ack, spec.Basic.Nack], timeout=timeout)
        return outcome
    finally:
        try:
            channel.close()
        except Exception:  # noqa: S110 - the connection is dropped by the caller anyway
            pass


def _poll(connection: Any) -> None:
    """Handle what RabbitMQ sent unasked (a connection.blocked notice), without waiting."""
    try:
        connection.drain_events(timeout=0)
    except (TimeoutError, OSError):
        pass


class MessageNacked(Exception):
    """RabbitMQ refused this message (a nack)."""
