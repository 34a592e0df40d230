"""A real scheduler whose broker publish is recorded instead of sent: the task ids of the
slots it would have published, in order. Everything else (Redis, scripts, lease) is real."""

from __future__ import annotations

from typing import Any

from redbeat import RedBeatScheduler


class RecordingIds(RedBeatScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: list[str] = []
        super().__init__(*args, **kwargs)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> None:
        self.sent.append(entry.options["task_id"])
