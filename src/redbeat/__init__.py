"""redbeat: a Celery beat scheduler that keeps the schedule in Redis."""

from .entry import RedBeatSchedulerEntry
from .schedulers import RedBeatScheduler

__all__ = ["RedBeatScheduler", "RedBeatSchedulerEntry"]
__version__ = "3.0.0.dev0"
