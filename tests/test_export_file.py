"""redbeat.export_file: the export document streamed both ways (tables over layouts and
read-buffer sizes), and `redbeat export`/`import`/`list` as a user runs them: a summary,
--quiet, and Ctrl-C that says what was written and exits 130 (real processes, forked
from the session's forker of support/forked.py and run as ``python -m redbeat``; a real
redis-server)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from redbeat.cli import main
from redbeat.export_file import FORMAT, JsonReader, JsonWriter, header
from support import forked

RECORDS = [{"name": "a", "score": 1.5, "static": False, "definition": {"task": "t"},
            "meta": None, "policy": None},
           {"name": "b\n\"q\"", "score": -1, "static": True,
            "definition": {"__raw__": "{broken"}, "meta": {"x": [1, 2, {"y": 1e-7}]},
            "policy": {"jitter": 12345678901234567890}}]


def written(records: list[dict]) -> str:
    out = io.StringIO()
    writer = JsonWriter(out, header("redbeat:", 1.0))
    for record in records:
        writer.entry(record)
    writer.close()
    return out.getvalue()


def read(text: str, chunk: int) -> tuple[list[dict], dict]:
    reader = JsonReader(io.StringIO(text), chunk=chunk)
    return list(reader.entries()), reader.head


LAYOUTS = {
    "as written": written(RECORDS),
    "empty": written([]),
    "pretty": json.dumps({"format": FORMAT, "prefix": "p", "entries": RECORDS}, indent=2),
    "compact": json.dumps({"format": FORMAT, "entries": RECORDS}, separators=(",", ":")),
    "entries first": json.dumps({"entries": RECORDS, "format": FORMAT, "prefix": "p"}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 1 << 16])
def test_any_layout_reads_back_whatever_the_buffer(layout, chunk):
    text = LAYOUTS[layout]
    entries, head = read(text, chunk)
    assert entries == json.loads(text)["entries"]
    assert head["format"] == FORMAT


def test_the_writer_writes_one_json_document_one_entry_per_line():
    text = written(RECORDS)
    assert json.loads(text)["entries"] == RECORDS
    assert len(text.splitlines()) == len(RECORDS) + 2


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected one of '{'"),
    ("[1, 2]", "expected one of '{'"),
    ('{"format": "redbeat-export/1"}', "no entries"),
    ('{"format": "other", "entries": []}', "expected format redbeat-export/1"),
    ('{"format": "redbeat-export/1", "entries": [{"name": "a"} {"name": "b"}]}',
     "expected one of ',]'"),
    ('{"format": "redbeat-export/1", "entries": [{"name": "a"', "not a redbeat export"),
])
def test_what_is_not_an_export_is_a_value_error(text, message):
    with pytest.raises(ValueError, match=message):
        read(text, 3)


# -- the commands, as a user runs them -----------------------------------------------------


def fill(client, count: int, name: str = "job-{:06d}") -> None:
    """``count`` interval entries, named ``name.format(number)``."""
    with client.pipeline(transaction=False) as pipe:
        for number in range(count):
            key = f"redbeat:{name.format(number)}"
            pipe.hset(key, "definition", json.dumps({
                "name": name.format(number), "task": "tasks.t", "args": [number],
                "schedule": {"__type__": "interval", "every": 3600, "relative": False}}))
            pipe.zadd("redbeat::schedule", {key: 2_000_000_000 + number})
            if number % 5000 == 4999:
                pipe.execute()
        pipe.execute()


def redbeat(url: str, *args: str, stdout: forked.Output, stderr: forked.Output
            ) -> forked.Forked:
    """``python -m redbeat --url url args`` writing to the files or descriptors given."""
    return forked.start(sys.executable, os.environ.get("PYTHONPATH", ""),
                        ["-m", "redbeat", "--url", url, *args], os.getcwd(),
                        dict(os.environ), stdout, stderr)


def in_process(url: str, *args: str) -> tuple[int, str]:
    """``redbeat args`` run by click's runner in this process (no interpreter to start),
    for a step that sets up or checks what a real process was interrupted in: its exit
    status and standard output."""
    result = CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)
    return result.exit_code, result.stdout


#: Entries exported then imported, and exported under a progress bar: two pages of the
#: export's reads and two import batches (500 each, manage.PAGE and IMPORT_BATCH), the
#: second of each part full (it was 3,000 then 1,200, and 2,000 under the bar: the import's
#: checks and writes are about 1 ms of CPU an entry)
STREAMED = 700


@pytest.mark.redis_server
def test_export_then_import_elsewhere_streams_with_a_summary(redis_server, tmp_path):
    """Streamed both ways over pages and batches of 500 (the last one part full)."""
    client = redis_server.client()
    fill(client, STREAMED)
    path, errors = tmp_path / "export.json", tmp_path / "export.err"
    path.touch()
    errors.touch()
    export = redbeat(redis_server.url, "export", stdout=str(path), stderr=str(errors))
    assert export.wait(120) == 0 and errors.read_text() == \
        f"exported {STREAMED} entries (0 static) from prefix 'redbeat:'\n"
    assert len(path.read_text().splitlines()) == STREAMED + 2  # a line per entry
    load = forked.run(["-m", "redbeat", "--url", redis_server.url, "--prefix", "copy:",
                       "import", str(path), "--quiet"], os.getcwd(), timeout=120)
    assert load.returncode == 0, load.stderr
    assert load.stdout == f"created {STREAMED}, updated 0, unchanged 0, pruned 0\n"
    assert load.stderr == ""
    assert client.zcard("copy::schedule") == STREAMED
    last = f"job-{STREAMED - 1:06d}"
    assert client.hget(f"copy:{last}", "definition") == client.hget(f"redbeat:{last}",
                                                                   "definition")


#: Entries in the schedule Ctrl-C interrupts (two import batches, manage.IMPORT_BATCH) and
#: their names, as long as an application's can be: each command's output (370 KB exported,
#: 80 KB of import lines, 150 KB listed) is several times what it can write before it
#: blocks on the held pipe (see :func:`interrupted`), whatever the machine's speed. (5,000
#: entries of 10-character names wrote 1.2 MB, 75 KB and 400 KB, and cost 4 s of CPU more,
#: most of it in checking and writing the imports.)
INTERRUPTED = 1000
LONG_NAME = "job-{:06d}-nightly-statement-of-the-receivables-ledger-for-the-emea-customers"


def interrupted(url: str, *args: str, after: int) -> tuple[int, str, str]:
    """Run ``redbeat args`` and Ctrl-C it while it still has most of its output to write.

    Standard output is a pipe of 4 KB that this test reads; once ``after`` bytes came it
    reads no more, so the command blocks on a write (4 KB in the pipe, at most 16 KB in
    its own buffers) and cannot finish, however fast it runs. SIGINT comes then, and the
    rest is read. Returns the exit status, all of standard output, standard error."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    with os.fdopen(read_end, "rb") as out, tempfile.TemporaryDirectory() as directory:
        errors = Path(directory) / "stderr"
        errors.touch()
        process = redbeat(url, *args, stdout=write_end, stderr=str(errors))
        os.close(write_end)  # the process has opened the pipe: its end is the only one
        head = b""
        while len(head) < after:
            chunk = out.read1(after - len(head))
            assert chunk, f"redbeat {' '.join(args)} ended after {len(head)} bytes"
            head += chunk
        os.kill(process.pid, signal.SIGINT)
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.append(out.read()), daemon=True)
        reader.start()
        status = process.wait(120)
        reader.join(120)
        err = errors.read_text()
    assert rest, "standard output was not read to its end"
    return status, (head + rest[0]).decode(), err


@pytest.mark.redis_server
def test_ctrl_c_says_what_was_written_and_exits_130(redis_server, tmp_path):
    client = redis_server.client()
    fill(client, INTERRUPTED, LONG_NAME)
    # export: stopped once it has begun writing
    status, out, err = interrupted(redis_server.url, "export", after=20_000)
    assert status == 130, err
    (line,) = err.splitlines()
    assert line.startswith("error: interrupted: ") and line.endswith(
        f" of {INTERRUPTED} entries written; the output is incomplete (not a valid export)")
    count = int(line.split()[2])
    assert 0 < count < INTERRUPTED
    assert len(out.splitlines()) == count + 1  # the header, a line each
    # import: stopped between two batches; what it says it wrote is what Redis holds
    full = tmp_path / "full.json"
    status, document = in_process(redis_server.url, "export")
    assert status == 0
    full.write_text(document)
    status, out, err = interrupted(redis_server.url, "--prefix", "copy:", "import", str(full),
                                   after=3000)
    assert status == 130, err
    (line,) = err.splitlines()
    assert line.startswith("error: interrupted: created ") and "the rest was not imported" \
        in line, line
    created = int(line.split("created ")[1].split(",")[0])
    assert 0 < created < INTERRUPTED and created % 500 == 0  # whole batches
    assert client.zcard("copy::schedule") == created
    assert out.count("  + ") == created
    # the same import again finishes it
    status, out = in_process(redis_server.url, "--prefix", "copy:", "import", str(full),
                             "--quiet")
    assert status == 0
    assert out == f"created {INTERRUPTED - created}, updated 0, unchanged {created}, pruned 0\n"
    # list: stopped while printing
    status, out, err = interrupted(redis_server.url, "list", after=20_000)
    assert status == 130, err
    assert err.startswith("error: interrupted after ") and "--offset" in err
    shown = int(err.split()[3])
    assert 0 < shown < INTERRUPTED and out.count("job-") == shown


@pytest.mark.redis_server
def test_a_progress_bar_on_a_terminal_none_with_quiet(redis_server, tmp_path):
    import pty

    fill(redis_server.client(), STREAMED)
    for quiet in ([], ["--quiet"]):
        leader, follower = pty.openpty()
        chunks: list[bytes] = []

        def drain(fd: int = leader, into: list[bytes] = chunks) -> None:
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # the terminal closed: everything was read
                    return
                if not data:
                    return
                into.append(data)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        (tmp_path / "out.json").write_text("")
        export = redbeat(redis_server.url, "export", *quiet, stdout=str(tmp_path / "out.json"),
                         stderr=follower)
        assert export.wait(120) == 0
        os.close(follower)
        reader.join(30)
        os.close(leader)
        text = b"".join(chunks).decode(errors="replace")
        if quiet:
            assert text == ""
        else:
            assert "exporting" in text and f"{STREAMED}/{STREAMED}" in text, text
            assert f"exported {STREAMED} entries (0 static)" in text
