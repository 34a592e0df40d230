"""redbeat: a Celery beat scheduler that keeps the schedule in Redis."""

from . import worker as _worker  # noqa: F401  (connects worker_init: docs/outcomes.md)
from .entry import RedBeatSchedulerEntry
from .schedulers import RedBeatScheduler

__all__ = ["RedBeatScheduler", "RedBeatSchedulerEntry"]
__version__ = "3.0.0.dev0"
