"""The broker side of beat: the :class:`Dispatcher` publishes the slots a tick claimed
and the slots held from earlier ticks, and says which of them the broker took.

It owns beat's broker connection and producer, the publishing thread
(``redbeat-publish``), whether the broker is up, the bounded wait of a tick on a send
and the sends that ended after their tick stopped waiting ("sent late"), and the two
ways out: the batched publish of :mod:`redbeat.publish`, or one message at a time
through the scheduler's ``send_slot`` (Celery's ``apply_async``). The scheduler asks it
to draft and send and reads back the task ids done with; it never reads the
dispatcher's state, and the dispatcher never imports the scheduler: what it needs of it
is given to its constructor (the store, the node's name, how one slot is sent, a
producer, and whether this node may still send, which the lease answers).

Sends run on one thread of their own (outside the per-entry path), and a tick waits for
each at most half a poll interval. A broker that hangs instead of refusing then costs
the tick that long once: until that send ends, every other send fails at once, so the
slots stay pending, ticks keep their pace (renewing the lease, and claiming each slot on
time rather than coalescing slots a stalled tick let pass) and the pending slots go out,
oldest first, once the broker answers. A send that ends after its tick gave up on it is
remembered and confirmed, so it is not sent twice.

A broker may refuse one queue and take the others (a RabbitMQ queue full under
reject-publish, a Redis key of another type where a queue's list goes): the entries
whose slots it refuses while answering are remembered (:attr:`Dispatcher.refusing`) and
logged once; their slots go after the others', one an entry a send, so such an entry
holds back its own slots only (and, through planning.held_backlog, its own claims).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import datetime
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from celery import Celery, signals
from kombu.common import ignore_errors
from kombu.exceptions import OperationalError

from . import publish
from .broker_errors import DROP, HOLD, cause_of, verdict
from .planning import (
    NO_BACKLOG,
    Claim,
    PendingMessage,
    held_backlog,
    held_grace,
    printable,
    read_pending,
)
from .settings import AT_LEAST_ONCE, RedBeatConfig

if TYPE_CHECKING:
    from .entry import RedBeatSchedulerEntry
    from .lock import Lease
    from .metrics import Recorder
    from .store import Fetch, ScheduleStore

logger = logging.getLogger("celery.beat")

#: A Redis broker is pinged before a send when it has not answered for this long: a
#: ping that hangs writes nothing, while a message written to a frozen broker is
#: ambiguous (it lands when the broker wakes, after the send was given up for failed).
PROBE_AFTER = 0.25
#: Slots written per batch (one Redis pipeline, one set of AMQP confirms), and so per
#: hand-off to the publishing thread, which a tick waits for at most half a poll interval:
#: as many as a tick reads by default (``redbeat_batch_size``), so a burst is one hand-off.
PUBLISH_BATCH = 1000
#: ... or fewer, once their payloads reach this many bytes (large arguments).
PUBLISH_BYTES = 2_000_000

#: How slots leave: built here and written in batches (when the transport and the
#: settings allow), one by one through the scheduler's ``send_slot`` on the publishing
#: thread (a subclass overriding how one slot is sent), or one by one on the tick's own
#: thread (the per-entry path of 2.4.2 subclasses, whose hooks own the producer).
BATCHED, ONE_BY_ONE, INLINE = "batched", "one-by-one", "inline"

Slot = tuple["RedBeatSchedulerEntry", str]  # an entry and the task id of its slot
#: Messages of claimed slots made before the commit, by task id: drafted, or sealed
Drafts = dict[str, "publish.Draft | publish.Outgoing"]
#: (entry key, how many held slots were dropped late, the last one's due time, ISO 8601)
Misfire = tuple[str, int, str]
T = TypeVar("T")


class Batch(NamedTuple):
    """Slots with their messages built (publish.py), and those left to Celery's path."""

    ready: list[tuple[RedBeatSchedulerEntry, publish.Outgoing]]
    alone: list[Slot]


class Sent(NamedTuple):
    """What became of slots handed to :meth:`Dispatcher.send`."""

    done: list[str]  # task ids done with: the broker took them, or refused them for good
    broker_failed: bool  # the broker failed on the way: the rest stay pending
    lease_lost: bool  # the lease could not be renewed on the way: the rest stay pending


class SendJob:
    """Slots handed to the publishing thread in one go. Their outcome (the task ids done
    with: sent, or dropped as unpublishable) belongs to the tick that waits for it, unless
    that tick gave up first: then the thread itself records the sends that went out late
    (the lock makes that one decision, not two)."""

    def __init__(
        self,
        slots: list[Slot],
        announce: Callable[[list[Slot]], None] | None = None,
        batch: Batch | None = None,
    ) -> None:
        self.slots = slots
        self.announce = announce  # logs the slots once the broker is known to be up
        self.batch = batch  # their messages, when built before the hand-off
        self.outcome: list[str] = []
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.finished = False
        self.given_up = False

    def give_up(self) -> bool:
        """Leave the outcome to the thread; False when it has already finished."""
        with self.lock:
            self.given_up = not self.finished
            return self.given_up

    def finish(self, outcome: list[str]) -> bool:
        """Record the outcome; True when the tick had given up on it."""
        with self.lock:
            self.outcome, self.finished = outcome, True
            return self.given_up


class OnDispatcher:
    """A scheduler attribute Celery reads and may assign (``connection``, ``producer``),
    kept by the scheduler's dispatcher under the same name; deleting it (as Celery's
    cached properties allow) makes the next read connect afresh."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, scheduler: Any, owner: type | None = None) -> Any:
        return self if scheduler is None else getattr(scheduler.dispatcher, self.name)

    def __set__(self, scheduler: Any, value: Any) -> None:
        setattr(scheduler.dispatcher, self.name, value)

    def __delete__(self, scheduler: Any) -> None:
        setattr(scheduler.dispatcher, self.name, None)


def say_sending(entry: RedBeatSchedulerEntry, task_id: str) -> None:
    """Celery's log line for a slot handed to the broker, with its slot task id."""
    logger.info("Scheduler: Sending due task %s (%s) id=%s", entry.name, entry.task, task_id)


class Dispatcher:
    """Publishes slots for one scheduler; see the module's docstring.

    Built with what it needs of its scheduler, each read when used (the scheduler may
    rebuild its lease or learn its node name later): ``store`` (confirms the sends that
    went out late, records refusals), ``node_id``, ``send_one(entry, task_id)`` (one slot
    through Celery's ``apply_async``), ``producer(connection)`` (Celery's ``Producer``),
    ``may_send(within)`` (whether this node still leads and its lease outlasts a send of
    ``within`` seconds) and ``monotonic`` (the clock the lease is measured with).
    """

    def __init__(
        self,
        app: Celery,
        config: RedBeatConfig,
        metrics: Recorder,
        *,
        store: Callable[[], ScheduleStore],
        node_id: Callable[[], str],
        send_one: Callable[[RedBeatSchedulerEntry, str], Any],
        producer: Callable[[Any], Any],
        may_send: Callable[[float], bool],
        monotonic: Callable[[], float],
    ) -> None:
        self.app = app
        self.config = config
        self.metrics = metrics
        self.store = store
        self.node_id = node_id
        self.send_one = send_one
        self.make_producer = producer
        self.lease_allows = may_send
        self.monotonic = monotonic
        #: ``redbeat_publish_timeout``, or less under a short lease (:meth:`bound_sends`):
        #: the socket timeouts of the connection to a Redis broker, and the longest a
        #: tick waits for a send
        self.publish_timeout: float = config.publish_timeout
        self.closed = False
        self.broker_down = False
        self._connection: Any = None
        self._producer: Any = None
        self._jobs: SimpleQueue[SendJob | None] | None = None
        self._publisher: threading.Thread | None = None
        self._stuck: SendJob | None = None  # a send the tick stopped waiting for, running
        self._broker_answered_at = -math.inf
        #: ids whose send ended (and was confirmed) after its tick gave up on it: a tick
        #: that read them as pending before that confirmation must not send them again
        self._sent_late: set[str] = set()
        #: what the held slots this tick re-sent leave for its claims: an entry's wait
        #: while its older held slots are still to go (planning.held_backlog)
        self.backlog = NO_BACKLOG
        #: the entries whose last slot tried the broker refused for now while answering
        #: (their queue: full under reject-publish, a Redis key of another type...), by
        #: key, each with when it was last refused (a count): their slots go after the
        #: others', one an entry, the least recently refused first
        self.refusing: dict[str, int] = {}
        self._refusals = 0
        #: argsrepr/kwargsrepr kept from tick to tick (a third of a message's build)
        self._reprs = publish.Reprs()
        self._templates = publish.Templates()
        self._errors: tuple[type[BaseException], ...] | None = None

    # -- the connection (what Celery sees as scheduler.connection and .producer) ----------

    @property
    def connection(self) -> Any:
        """Beat's broker connection. On a Redis broker its sockets time out after
        :attr:`publish_timeout` (or sooner, as ``broker_transport_options`` say): without
        a timeout, a broker that is frozen, or gone without closing the TCP connection,
        holds a publish forever. Other transports keep their own settings."""
        if self._connection is None:
            connection = self.app.connection_for_write()
            if connection.transport.driver_type == "redis":
                options = dict(connection.transport_options or {})
                for name in ("socket_timeout", "socket_connect_timeout"):
                    given = options.get(name)
                    options[name] = (
                        self.publish_timeout
                        if given is None
                        else min(float(given), self.publish_timeout)
                    )
                connection.transport_options = options
            self._connection = connection
        return self._connection

    @connection.setter
    def connection(self, value: Any) -> None:
        self._connection = value

    @property
    def producer(self) -> Any:
        """A producer on :attr:`connection`, connected with one retry within
        :attr:`publish_timeout` rather than Celery's ``broker_connection_max_retries``
        (a hundred, minutes apart): a broker that is down fails this send, and the next
        tick tries again."""
        if self._producer is None:
            connection = self.connection.ensure_connection(
                max_retries=1,
                interval_start=0,
                interval_step=0.5,
                interval_max=0.5,
                timeout=self.publish_timeout,
            )
            self._producer = self.make_producer(connection)
        return self._producer

    @producer.setter
    def producer(self, value: Any) -> None:
        self._producer = value

    def bound_sends(self, lease_timeout: float | None) -> None:
        """Make a send last at most half of ``lease_timeout`` (None: no lease), and the
        publish timeout. The lease lets a send start only while that much of it is left
        (``Lease.may_send``): with the default 5-s lease, a send could start 2.4 s after
        the last renewal, and with 3-s socket timeouts be taken by a slow broker at 5.4 s,
        after another node could take the lease over and send the slot still pending.
        A connection made under another bound is dropped, to be made with this one."""
        bound = self.config.publish_timeout
        if lease_timeout is not None:
            bound = min(bound, lease_timeout / 2)
        if bound != self.publish_timeout:
            self.publish_timeout = bound
            self.drop_producer()

    def drop_producer(self, release: bool = True) -> None:
        """Forget the broker connection (after a failure: a failed publish can leave
        Celery's producer without a channel, and the next send connects afresh)."""
        connection, self._connection, self._producer = self._connection, None, None
        if connection is not None and release:
            ignore_errors(connection, connection.release)

    def verdict(self, error: BaseException) -> str:
        """HOLD (the broker said "not now": the slot stays pending) or DROP (the
        message itself is refused) for an error met publishing (broker_errors.py)."""
        if self._errors is None:
            self._errors = tuple(self.connection.connection_errors)
        return verdict(cause_of(error), self._errors)

    def batched(self, path: str) -> bool:
        """Whether slots on ``path`` go out through the batched publish (publish.py):
        not on a transport or with settings that module does not reproduce."""
        return (
            path == BATCHED
            and publish.batch_transport(self.connection) is not None
            and publish.app_supports_batch(self.app)
        )

    # -- drafting, then the commit ------------------------------------------------------

    def draft_then_commit(
        self, commit: Callable[[], T], claims: list[Claim], path: str
    ) -> tuple[T, Drafts]:
        """The claims' messages drafted (:meth:`draft`: no signal, no side effect), then
        ``commit()`` (commit.lua, which records the claims); nothing is announced or sent
        before the commit has recorded them, and the drafts of claims it refused are
        dropped. Both on this thread: the commit used to wait on a thread of its own
        while this one drafted, but a thread started per tick and the two taking the
        interpreter's lock from each other cost a burst more than the overlap saved on a
        busy machine (benchmarks/e2e.py, 1,000 slots, three alternating runs: 135, 382
        and 393 ms to the last message against 250, 415 and 444, the same CPU). A broker that has
        been quiet is pinged meanwhile, on the publishing thread (:meth:`_probe_ahead`).
        Nothing is drafted for a broker that is down, slots that leave one by one or
        claims that wait behind their entries' held slots."""
        claims = self._going(claims)
        if not claims or self.broker_down or not self.batched(path):
            return commit(), {}
        self._probe_ahead()
        drafts = self.draft(claims)
        return commit(), drafts

    def _probe_ahead(self) -> None:
        """Hand the publishing thread a job without slots when the broker has been quiet
        for PROBE_AFTER: :meth:`_send_checked` pings it while this thread drafts and
        commits, so the send of the claims, which follows on that thread, finds it
        answered just now and goes out without a ping of its own (a round trip after the
        commit, before the first message). Not behind a send the tick gave up on: that
        one decides first; nor before a producer exists: the drafting makes it, on this
        thread, not raced for."""
        if (
            self._producer is not None
            and self.monotonic() - self._broker_answered_at > PROBE_AFTER
            and not self._waiting_on_broker()
        ):
            self._send_queue().put(SendJob([]))

    def draft(self, claims: list[Claim]) -> Drafts:
        """The claims' drafts by task id; one that cannot be drafted is left out (built
        again after the commit, where Celery's own path takes it). When no receiver
        listens to ``before_task_publish``, nothing can tell a message sealed now from
        one sealed after the commit: then the messages are sealed here too, and their
        records encoded for a Redis broker, before the commit."""
        builder = publish.Builder(self.app, self._reprs)
        early = not signals.before_task_publish.receivers
        if early and publish.batch_transport(self.connection) == "redis":
            return self._from_templates(builder, claims)
        drafts: Drafts = {}
        for claim in claims:
            try:
                draft = builder.draft(claim.entry, claim.task_id)
                drafts[claim.task_id] = builder.seal(draft) if early else draft
            except Exception:  # noqa: S112 - decided (and logged) on the publish path
                continue
        return drafts

    def _from_templates(self, builder: publish.Builder, claims: list[Claim]) -> Drafts:
        """:meth:`draft` for a Redis broker with nobody listening to
        ``before_task_publish``: each claim's message sealed and its record encoded,
        from its entry's template (publish.Templates) where one can stand for it. A
        broker that does not answer leaves nothing drafted: the publish after the commit
        meets it and holds the slots, as for any outage (an error here escaped the tick
        and ended beat, on every node that took the lead while the broker hung)."""
        try:
            channel = self.producer.channel
        except Exception:  # noqa: BLE001 - decided (and logged) on the publish path
            return {}
        drafts: Drafts = {}
        for claim, tag in zip(claims, publish.delivery_tags(len(claims)), strict=True):
            try:
                drafts[claim.task_id] = self._templates.outgoing(
                    builder, channel, claim.entry, claim.task_id, tag
                )
            except Exception:  # noqa: S112 - decided (and logged) on the publish path
                continue
        return drafts

    # -- sending --------------------------------------------------------------------------

    def send_claims(
        self,
        claims: list[Claim],
        lease: Lease | None,
        path: str,
        wait: float,
        drafts: Drafts | None = None,
    ) -> Sent:
        """Publish the slots a tick claimed (``drafts``: their messages drafted already,
        by task id), and count them. Not those of entries whose older held slots are
        still to go (:attr:`backlog`): they stay held (commit.lua recorded them) and go
        after those, in due order, from a later tick."""
        slots = [(claim.entry, claim.task_id) for claim in self._going(claims)]
        sent = self.send(slots, lease, path, wait, drafts=drafts)
        self._count([(claim.task_id, claim.due) for claim in claims], sent.done)
        return sent

    def _going(self, claims: list[Claim]) -> list[Claim]:
        """``claims`` but those that wait behind their entries' held slots (:attr:`backlog`)."""
        backlog = self.backlog
        if backlog == NO_BACKLOG:
            return claims
        return [claim for claim in claims if not backlog.waits(claim.entry.key)]

    def resend_held(
        self, fetch: Fetch, now: datetime, entry_class: type[Any], path: str, wait: float
    ) -> tuple[list[str], list[Misfire]]:
        """Publish this batch of held slots, oldest due first by each record's own due
        time (the index the batch is read from may be written by hand): a backlog
        released after a broker outage must reach the workers in the order it was due.
        A slot past its misfire grace is dropped instead (one log line; counted in its
        entry's misfires by confirm.lua), also while the broker is down, so an outage
        does not pile up slots that will never be sent. Sets :attr:`backlog`: which of
        the tick's claims may follow (those of entries with no held slot left).

        Returns the task ids done with (sent or dropped) and the misfires to count."""
        done: list[str] = []
        held: list[tuple[str, PendingMessage]] = []
        for task_id, message in fetch.pending.items():
            try:
                held.append((task_id, read_pending(self.app, message, entry_class, fetch.held)))
            except Exception as exc:
                # whatever a record holds (a due of 1e300, nesting past the recursion
                # limit, a bad definition, a held definition removed by hand), it must
                # not stop the node: drop it, log it
                logger.error(
                    "beat: Dropping unreadable pending slot %s: %s",
                    printable(task_id),
                    printable(repr(exc)[:300]),
                )
                done.append(task_id)
        held.sort(key=lambda item: (item[1].due, item[0]))
        late: dict[str, tuple[int, datetime]] = {}
        resend: list[Slot] = []
        reasons: dict[str, str] = {}
        for task_id, slot in held:
            key = slot.entry.key
            grace = held_grace(slot, fetch.policies.get(key), self.config.misfire_grace_time, now)
            if grace is not None:
                logger.warning(
                    "beat: Dropping held slot %s: %.3f s late, past its misfire grace time of %g s",
                    printable(task_id),
                    (now - slot.due).total_seconds(),
                    grace,
                )
                done.append(task_id)
                self.metrics.dispatched("skipped")
                if self.config.keys.is_entry_key(key):
                    late[key] = (late.get(key, (0, slot.due))[0] + 1, slot.due)
                continue
            resend.append((slot.entry, task_id))
            reasons[task_id] = slot.reason

        def announce(unit: list[Slot]) -> None:
            for entry, task_id in unit:
                if entry.key in self.refusing:
                    continue  # tried again as each tick: said when the broker refused it
                if reasons[task_id] == "run-now":
                    logger.info("beat: Sending %s now, as asked (%s)", task_id, reasons[task_id])
                else:
                    logger.warning(
                        "beat: Re-sending slot %s (claimed, publish not confirmed)", task_id
                    )

        sent = self.send(resend, None, path, wait, announce).done
        self._count(
            [(task_id, held_slot.due) for task_id, held_slot in held if task_id in reasons], sent
        )
        done.extend(sent)
        went = set(done)
        # a slot the broker did not take for a reason of its entry's own (it refuses the
        # entry for now) holds back that entry; any other holds back every entry
        left = [slot.entry.key for task_id, slot in held if task_id not in went]
        self.backlog = held_backlog(
            [(slot.entry.key, task_id in went) for task_id, slot in held]
            + [("", True)] * (len(fetch.pending) - len(held)),  # unreadable: dropped
            any(key not in self.refusing for key in left),
            self.config.batch_size,
            self.config.delivery == AT_LEAST_ONCE,
        )
        return done, [(key, count, last.isoformat()) for key, (count, last) in late.items()]

    def _count(self, slots: list[tuple[str, datetime]], done: list[str]) -> None:
        """Metrics: the lag of each slot handed to the broker; the others stay held."""
        handed = set(done)
        for task_id, due in slots:
            if task_id in handed:
                self.metrics.late_by(due)
        self.metrics.dispatched("held", len(slots) - len(handed))

    def send(
        self,
        slots: list[Slot],
        lease: Lease | None,
        path: str,
        wait: float,
        announce: Callable[[list[Slot]], None] | None = None,
        drafts: Drafts | None = None,
    ) -> Sent:
        """Publish ``slots`` in order: PUBLISH_BATCH at a time on the batched path, one at
        a time otherwise, waiting for each unit at most ``wait`` seconds (and at most
        the publish timeout). The lease (when given) is renewed every third of its
        timeout; a lease that cannot be renewed stops the sends.

        The slots of entries the broker refuses for now (:attr:`refusing`) go after the
        others', only the oldest of each entry (the others of an entry follow it once
        the broker takes it), and a refusal of theirs does not stop the others': an
        entry whose queue the broker refuses costs a slot a send and holds back no other
        entry, and its own slots keep their order."""
        done: list[str] = []
        batched = self.batched(path)
        extended_at = self.monotonic()
        remaining, later = self._refusing_last(slots)
        while remaining:
            if lease is not None and self.monotonic() - extended_at > lease.timeout / 3:
                # A slow broker must not let the lock lapse under a healthy leader. If it
                # lapsed anyway, stop: the new leader re-sends what is still pending.
                # Counted from when the renewal was asked for: Redis may have applied it
                # at once and the reply come late, so the lease can end that much sooner.
                asked_at = self.monotonic()
                if not lease.renew():
                    return Sent(done, False, True)
                extended_at = asked_at
                lease.renewed(extended_at)
            if self._waiting_on_broker():
                return Sent(done, True, False)  # do not queue behind a send under way
            remaining = self._drop_sent_late(remaining, done)
            if not remaining:
                break
            if batched:  # a broker that was down is tried with one slot first
                unit, batch = self._build(remaining[:1] if self.broker_down else remaining, drafts)
            else:
                unit, batch = remaining[:1], None
            remaining = remaining[len(unit) :]
            sent = self._try_send(unit, path, wait, announce, batch)
            done.extend(sent)
            if later:  # an entry the broker took again: its other slots follow
                taken = set(sent)
                for entry, task_id in unit:
                    if task_id in taken and entry.key in later:
                        remaining = remaining + later.pop(entry.key)
            if len(sent) < len(unit) and not self._refused_for_now(unit, sent):
                return Sent(done, True, False)
        return Sent(done, False, False)

    def _refusing_last(self, slots: list[Slot]) -> tuple[list[Slot], dict[str, list[Slot]]]:
        """``slots`` to send first: those of the entries the broker refuses for now
        (:attr:`refusing`) after the others and only the oldest of each, the least
        recently refused entry first; and the rest of those entries' slots, by entry
        key, in their order."""
        if not self.refusing:
            return slots, {}
        first: list[Slot] = []
        probes: list[Slot] = []
        later: dict[str, list[Slot]] = {}
        for slot in slots:
            key = slot[0].key
            if key not in self.refusing:
                first.append(slot)
            elif key in later:
                later[key].append(slot)
            else:
                later[key] = []
                probes.append(slot)
        # the least recently refused first: a broker that was down is tried with one slot,
        # which must not always be the same refused entry's
        probes.sort(key=lambda slot: self.refusing.get(slot[0].key, 0))
        return first + probes, {key: rest for key, rest in later.items() if rest}

    def _refused_for_now(self, unit: list[Slot], sent: list[str]) -> bool:
        """Whether the broker, answering (not down), refused the slots of ``unit`` it
        did not take for their entries' own sake (:attr:`refusing`): the send goes on."""
        if self.broker_down:
            return False
        taken = set(sent)
        return all(entry.key in self.refusing for entry, task_id in unit if task_id not in taken)

    def _try_send(
        self,
        unit: list[Slot],
        path: str,
        wait: float,
        announce: Callable[[list[Slot]], None] | None = None,
        batch: Batch | None = None,
    ) -> list[str]:
        """Publish ``unit`` on the publishing thread, waiting for it at most ``wait``
        seconds; returns the task ids done with. A broker that failed or has not
        answered by then leaves the rest pending: nothing is lost, and the tick keeps
        its pace."""
        if path == INLINE:
            if announce:
                announce(unit)
            return self._send_slots(unit)  # inline: the hooks own the producer there
        job = SendJob(unit, announce, batch)
        self._send_queue().put(job)
        wait = min(wait, self.publish_timeout)
        if job.done.wait(wait) or not job.give_up():
            job.done.wait()  # finished: at most the instant until its event is set
            return job.outcome
        self._stuck = job
        if not self.broker_down:  # once an outage: its first stuck send
            logger.warning(
                "beat: The broker has not answered for %.1fs; slots stay pending until it does",
                wait,
            )
        return []

    def _waiting_on_broker(self) -> bool:
        """Whether a send the tick gave up on is still under way."""
        stuck = self._stuck
        if stuck is not None and not stuck.done.is_set():
            return True
        self._stuck = None
        return False

    def _drop_sent_late(self, slots: list[Slot], done: list[str]) -> list[Slot]:
        """``slots`` without those whose send was given up on and went out after all
        (confirmed since); their ids join ``done``. Checked before anything is built,
        so their messages are not built (nor announced to signal receivers) again."""
        if not self._sent_late:
            return slots
        late = [task_id for _, task_id in slots if task_id in self._sent_late]
        self._sent_late.difference_update(late)
        done.extend(late)
        return [slot for slot in slots if slot[1] not in late] if late else slots

    def _send_queue(self) -> SimpleQueue[SendJob | None]:
        """The publishing thread's queue, starting the thread when it is not running."""
        if self._jobs is None or self._publisher is None or not self._publisher.is_alive():
            self._jobs = SimpleQueue()
            self._publisher = threading.Thread(
                target=self._publishing, args=(self._jobs,), name="redbeat-publish", daemon=True
            )
            self._publisher.start()
        return self._jobs

    def _publishing(self, jobs: SimpleQueue[SendJob | None]) -> None:
        """The publishing thread: one job at a time, until close() queues None."""
        while (job := jobs.get()) is not None:
            outcome: list[str] = []
            try:
                outcome = self._send_checked(job)
            except BaseException:  # the thread must outlive any one send
                logger.exception("beat: Publishing %s failed", [tid for _, tid in job.slots])
            try:
                if job.finish(outcome) and outcome and self.config.delivery == AT_LEAST_ONCE:
                    self._sent_late.update(outcome)  # for a tick that read them as pending
                    self.store().confirm(outcome)  # and for whoever leads next
            except Exception:
                logger.exception("beat: Confirming %s failed", outcome)
            finally:
                job.done.set()

    def _send_checked(self, job: SendJob) -> list[str]:
        """Send ``job`` unless this node may no longer send: it stopped leading, or its
        lease may run out during the send (a tick stalled on Redis renews nothing); a
        Redis broker that has been quiet is pinged first, so a hung one is found by a
        ping that writes nothing rather than by a message it would deliver later."""
        if not self.may_send():
            return []
        if self.monotonic() - self._broker_answered_at > PROBE_AFTER:
            try:
                self._ping_broker()
            except Exception as exc:
                if self.verdict(exc) == DROP:
                    raise
                if not self.broker_down:
                    logger.error(
                        "beat: Broker unavailable (%s); %s",
                        exc,
                        "slots stay pending and are sent when it answers"
                        if self.config.delivery == AT_LEAST_ONCE
                        else "at-most-once: runs due meanwhile are lost",
                    )
                self.broker_down = True
                self.drop_producer()
                return []
            if not self.may_send():
                return []
        if job.announce is not None:
            job.announce(job.slots)
        done = self._send_slots(job.slots, job.batch)
        short = len(done) < len(job.slots)
        if short and not self._refused_only(job, done):
            self.drop_producer()
        elif done or not short:  # it answered: took all, or some and refused the others'
            self._broker_answered_at = self.monotonic()
            if self.broker_down:
                logger.info("beat: Broker is back")
                self.broker_down = False
        return done

    def _refused_only(self, job: SendJob, done: list[str]) -> bool:
        """Whether ``job``'s slots not in ``done`` were written whole in a batch and
        refused for their entries' own sake (:attr:`refusing`): the connection is as it
        was. Any other failure (or one met through Celery's producer) drops it."""
        taken = set(done)
        return job.batch is not None and all(
            entry.key in self.refusing for entry, task_id in job.slots if task_id not in taken
        )

    def may_send(self) -> bool:
        """Whether a send may start now: not closed, and the lease (or, without one,
        leading) allows a send that may last the publish timeout."""
        return not self.closed and self.lease_allows(self.publish_timeout)

    def _ping_broker(self) -> None:
        """PING a Redis broker (through the pool the sends use); other transports have
        no such probe and rely on their own timeouts."""
        channel = self.producer.channel
        if channel is None:
            raise OperationalError("no channel to the broker")
        acquire = getattr(channel, "conn_or_acquire", None)
        if acquire is not None:
            with acquire() as client:
                client.ping()
        self._broker_answered_at = self.monotonic()

    def _send_slots(self, slots: list[Slot], batch: Batch | None = None) -> list[str]:
        """Publish ``slots``: built into ``batch`` already, or one by one through
        Celery's ``apply_async``; the ids done with."""
        if batch is not None:
            return self._send_batch(batch)
        done = []
        for entry, task_id in slots:
            if not self._send(entry, task_id):
                break
            done.append(task_id)
        return done

    def _build(self, slots: list[Slot], drafts: Drafts | None = None) -> tuple[list[Slot], Batch]:
        """The first slots' messages, built with Celery's message API
        (publish.py), up to PUBLISH_BATCH of them or PUBLISH_BYTES of payload; a slot that
        module cannot build exactly is left to Celery's own ``apply_async``. Built on the
        tick's thread, so the tick's wait on the publishing thread is for the broker;
        from its draft when there is one (taken from ``drafts``)."""
        batch, size = Batch([], []), 0
        builder = publish.Builder(self.app, self._reprs)
        drafts = drafts if drafts is not None else {}
        for entry, task_id in slots[:PUBLISH_BATCH]:
            try:
                draft = drafts.pop(task_id, None) or builder.draft(entry, task_id)
                message = draft if isinstance(draft, publish.Outgoing) else builder.seal(draft)
            except Exception:  # Celery's own path decides, and logs a refusal its way
                batch.alone.append((entry, task_id))
                continue
            batch.ready.append((entry, message))
            size += len(message.payload)
            if size >= PUBLISH_BYTES:
                break
        return slots[: len(batch.ready) + len(batch.alone)], batch

    def _send_batch(self, batch: Batch) -> list[str]:
        """Write the built messages in one go, then send the others through Celery's
        ``send_slot``."""
        ready = batch.ready
        # an entry the broker refuses for now is tried again each tick: said once taken
        refusing = self.refusing
        for entry, message in ready:
            if entry.key not in refusing:
                say_sending(entry, message.task_id)
        done: list[str] = []
        if ready:
            try:
                refusals = self._write([message for _, message in ready])
            except Exception as exc:
                if self.verdict(exc) == DROP:
                    raise
                self._broker_failed(f"{len(ready)} slots", exc)
                return []
            accepted, taken = [], []
            held: list[tuple[RedBeatSchedulerEntry, BaseException]] = []
            for (entry, message), refusal in zip(ready, refusals, strict=True):
                if refusal is None:
                    accepted.append(message)
                    taken.append(entry)
                    if entry.key in refusing:
                        say_sending(entry, message.task_id)
                elif self.verdict(refusal) == HOLD:
                    held.append((entry, refusal))
                    continue  # not now: it stays pending
                else:
                    self._refused(entry, message.task_id, refusal)
                done.append(message.task_id)
            self.metrics.dispatched("sent", len(accepted))
            publish.published(accepted)
            self._taken(taken)
            if held:
                self._held_back(f"{len(held)} slots", held, partial=bool(accepted))
                if self.broker_down:
                    return done  # and the slots after them stay pending too
        return done + self._send_slots(batch.alone)

    def _write(self, messages: list[publish.Outgoing]) -> list[BaseException | None]:
        connection = self.producer.connection
        if publish.batch_transport(connection) == "redis":
            return publish.write_redis(self.producer.channel, messages)
        return publish.write_amqp(connection, messages, self.publish_timeout)

    def _send(self, entry: RedBeatSchedulerEntry, task_id: str) -> bool:
        """Publish one slot; False when the broker could not be reached (the slot stays
        pending and is retried). A message the broker or Celery refuses for what it is
        (bad options, unserialisable arguments) would fail forever and block the slots
        behind it, so it is logged and dropped."""
        try:
            self.send_one(entry, task_id)
            self.metrics.dispatched("sent")
            self._taken([entry])
        except Exception as exc:
            if self.verdict(exc) == HOLD:
                self._held_back(task_id, [(entry, cause_of(exc))], partial=False)
                return False
            self._refused(entry, task_id, cause_of(exc))
        return True

    def _taken(self, entries: list[RedBeatSchedulerEntry]) -> None:
        """The broker took a slot of each of ``entries``: none is refused any more."""
        if self.refusing:
            for entry in entries:
                self.refusing.pop(entry.key, None)

    def _held_back(
        self,
        what: str,
        refused: list[tuple[RedBeatSchedulerEntry, BaseException]],
        partial: bool,
    ) -> None:
        """The broker could not take the slots of ``refused`` (each with the error met)
        now; ``partial``: it took others in the same write. An entry whose slot it
        refused while answering (a reply, a nack: not a failure to reach it) joins
        :attr:`refusing`, and is said once: by name when the broker took other slots
        (it refuses that entry's queue: full under reject-publish, a Redis key of
        another type), else as an outage (:meth:`_broker_failed`); refused again, not
        again."""
        cause = refused[0][1]
        if self._errors is None:
            self._errors = tuple(self.connection.connection_errors)
        if isinstance(cause, (OSError, OperationalError, *self._errors)):
            self._broker_failed(what, cause)  # the broker itself could not be reached
            return
        new = sorted(
            {printable(entry.name) for entry, _ in refused if entry.key not in self.refusing}
        )
        for entry, _ in refused:
            self._refusals += 1
            self.refusing[entry.key] = self._refusals
        if not new:
            return  # refused again, as when it began: said then
        if not partial or self.broker_down:
            self._broker_failed(what, cause)
            return
        logger.error(
            "beat: The broker takes other slots but refuses those of %s for now (%s: %s); %s",
            ", ".join(new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else ""),
            type(cause).__name__,
            cause,
            "at-most-once: their runs are lost while it does"
            if self.config.delivery != AT_LEAST_ONCE
            else "they stay pending and are re-sent, in due order, when it takes them; "
            "the other entries' slots go on",
        )

    def _broker_failed(self, what: str, cause: BaseException) -> None:
        """The broker could not take ``what`` now: logged once per outage (a broker
        that answers "not now" to every send is pinged fine and would otherwise be
        logged on every tick); it is then tried with one slot until it accepts."""
        if self.broker_down:
            return
        self.broker_down = True
        lost = self.config.delivery != AT_LEAST_ONCE
        logger.error(
            "beat: Publishing %s failed, the broker cannot take it now (%s: %s); %s",
            what,
            type(cause).__name__,
            cause,
            "at-most-once: this run is lost"
            if lost
            else "it stays pending and is re-sent when the broker accepts",
        )

    def _refused(self, entry: RedBeatSchedulerEntry, task_id: str, cause: BaseException) -> None:
        logger.error(
            "beat: Slot %s of %s cannot be published (%r); dropped", task_id, entry.name, cause
        )
        # recorded on the entry, so list/show/status do not count it as a run
        self.store().record_failure(entry.key, task_id, repr(cause), self.node_id())
        self.metrics.dispatched("failed")

    # -- shutdown -------------------------------------------------------------------------

    def open(self) -> None:
        """Sends may start again (a scheduler used after close() starts a new thread)."""
        self.closed = False

    def close(self) -> None:
        """Stop publishing: the thread ends after its current send, and no send starts."""
        self.closed = True
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None  # and a scheduler used again starts another

    def release(self) -> None:
        """Let the broker connection go: released, or, when a send is stuck on a hung
        broker, abandoned with it (its slot is still pending) rather than waited for."""
        stuck = self._stuck is not None and not self._stuck.done.is_set()
        self.drop_producer(release=not stuck)
