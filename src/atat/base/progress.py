"""Line-oriented progress for the rules' logs: one complete log line per finished step (an
epoch, an attack batch, a target class) with the count, the percentage, the elapsed time and
an ETA -- no carriage returns, so ``tail``/``grep`` on a log and Snakemake's
``--show-failed-logs`` print readable lines.

    prog = Progress(total=epochs, desc="model epoch", done=start_epoch, log=log)
    for epoch in range(start_epoch, epochs):
        ...
        prog.step(loss=0.1234)   # "model epoch 3/10 (30%) loss=0.1234 | 0:00:12 elapsed, ETA 0:00:28"

or ``for item in track(iterable, "PPA batch", log=log): ...`` (one line after each item).
The ETA extrapolates the mean duration of the steps done *in this process* (a resumed run
does not count the steps it skipped)."""

from __future__ import annotations

import atexit
import logging
import re
import resource
import sys
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

_log = logging.getLogger("atat.base.progress")


def format_seconds(seconds: float) -> str:
    """``h:mm:ss`` (hours unbounded)."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _format_value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class Progress:
    """Counts finished steps out of ``total`` and writes one line per step.

    ``log``: a :class:`logging.Logger` (INFO) or any callable taking the line (e.g. the
    ``log=`` callbacks of the inversion attacks); None logs to ``atat.base.progress``.
    ``enabled=False`` keeps the counting and returns the lines without writing them."""

    def __init__(self, total: int | None, desc: str, *, done: int = 0,
                 log: logging.Logger | Callable[[str], Any] | None = None,
                 enabled: bool = True, clock: Callable[[], float] = time.perf_counter) -> None:
        self.total = None if total is None else int(total)
        self.desc = desc
        self.done = int(done)
        self._first = int(done)
        self._clock = clock
        self._t0 = clock()
        self.enabled = enabled
        if log is None:
            log = _log
        self._emit: Callable[[str], Any] = log.info if isinstance(log, logging.Logger) else log

    def line(self, **info: Any) -> str:
        """The status line for the current count (without writing it)."""
        elapsed = self._clock() - self._t0
        count = f"{self.done}/{self.total}" if self.total else str(self.done)
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        extra = "".join(f" {k}={_format_value(v)}" for k, v in info.items())
        timing = f"{format_seconds(elapsed)} elapsed"
        ran = self.done - self._first
        if self.total and ran > 0:
            timing += f", ETA {format_seconds(elapsed / ran * max(self.total - self.done, 0))}"
        return f"{self.desc} {count}{pct}{extra} | {timing}"

    def skip(self, n: int = 1) -> None:
        """Count ``n`` steps done earlier (resumed): in the count, not in the ETA's rate."""
        self.done += n
        self._first += n

    def step(self, n: int = 1, **info: Any) -> str:
        """Count ``n`` finished steps, write the status line (with ``info`` as key=value)
        and return it."""
        self.done += n
        text = self.line(**info)
        if self.enabled:
            self._emit(text)
        return text


def track(iterable: Iterable[T], desc: str, *, total: int | None = None,
          log: logging.Logger | Callable[[str], Any] | None = None,
          enabled: bool = True) -> Iterator[T]:
    """Yield the items of ``iterable``, writing a :class:`Progress` line after each one."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    prog = Progress(total, desc, log=log, enabled=enabled)
    for item in iterable:
        yield item
        prog.step()


# ------------------------------------------------------------------------------ exit line
#: a job's last log line: its CPU and wall time (summed per rule by ``python -m atat.lab.jobstats``)
LINE = re.compile(r"job resources: rule=(?P<rule>\S+) cpu_s=(?P<cpu>[\d.]+) "
                  r"user_s=[\d.]+ sys_s=[\d.]+ wall_s=(?P<wall>[\d.]+) "
                  r"max_rss_mb=(?P<rss>\d+) threads=(?P<threads>\d+)")


def resources_line(rule: str, wall_s: float, threads: int) -> str:
    """The exit line of a job: CPU of this process and of its waited-for children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    user, system = me.ru_utime + kids.ru_utime, me.ru_stime + kids.ru_stime
    rss_mb = max(me.ru_maxrss, kids.ru_maxrss) // 1024  # Linux: kilobytes
    return (f"job resources: rule={rule} cpu_s={user + system:.1f} user_s={user:.1f} "
            f"sys_s={system:.1f} wall_s={wall_s:.1f} max_rss_mb={rss_mb} threads={threads}")


def log_resources_at_exit(rule: str, threads: int) -> None:
    """Write :func:`resources_line` to the job's stderr (its log) when the interpreter exits,
    also after an error; nothing if that stream was closed before."""
    start = time.perf_counter()
    stream = sys.stderr

    def write() -> None:
        if getattr(stream, "closed", False):
            return
        try:
            stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO atat.lab.jobstats: "
                         f"{resources_line(rule, time.perf_counter() - start, threads)}\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    atexit.register(write)
